"""Compile a function of Keras layers with the backend's own compiler.

The decoding loop is written once with `keras.ops`; this is the one place that
knows how each backend compiles it: `tf.function(jit_compile=True)` (XLA) on
TensorFlow, `jax.jit` on JAX with the model's variables passed in as
arguments (a Keras `StatelessScope` maps them back onto the layers), so the
weights are inputs of the compiled program rather than baked-in constants.
On torch the function runs eagerly under `torch.no_grad()` (inference
records no autograd graph) by default: `torch.compile` (Keras's `jit_compile`
on torch) measured slower to the end of a search (`TORCH_COMPILE_ENV`).
Other backends run the function as it is.
"""

from __future__ import annotations

import hashlib
import os
import platform
import re
import tempfile
import threading
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from keras_transformer.utils.user_cache import user_cache_root

if TYPE_CHECKING:
    import keras

# Programs that took less than this to compile are not worth a disk read.
_CACHE_MIN_COMPILE_SECONDS = 0.5
# "1": compile the search with torch.compile on the torch backend instead of
# running it eagerly (docs/benchmarks-compiling.md, "Decoding on torch": Keras's torch
# while_loop is a Python loop whose condition is read on the host every
# step, so torch.compile can compile only the loop's body, one graph per
# shape, and still pays Python and Keras's layer calls around it).
TORCH_COMPILE_ENV = "KERAS_TRANSFORMER_TORCH_COMPILE"


class _Counter:
    """A count kept across threads."""

    def __init__(self):
        self._lock = threading.Lock()
        self.count = 0

    def add(self) -> None:
        with self._lock:
            self.count += 1


_traces = _Counter()  # Programs traced for compiling.
_cache_loads = _Counter()  # Of those, loaded from the persistent cache.
_JAX_CACHE_HIT = "/jax/compilation_cache/cache_hits"
_listening = threading.Lock()


def compilations() -> int:
    """Programs traced for compiling by `compile_function` in this process
    so far (TensorFlow and JAX: each new input shape is one; torch runs
    eagerly: 0). A server reads it to tell a compile while serving from
    one during its warm-up."""
    return _traces.count


def cache_loads() -> int:
    """Of `compilations()`, the programs read from the persistent compilation
    cache instead of compiled (JAX, once `enable_compilation_cache` ran;
    TensorFlow does not say: 0). A load costs the reading, not the compile."""
    return _cache_loads.count


def _count_jax_cache_loads() -> None:
    """Count JAX's cache-hit events from now on (once per process)."""
    import jax  # noqa: TID251 - the JAX compiler itself

    if not _listening.acquire(blocking=False):
        return  # Already listening.

    def on_event(event: str, **_: object) -> None:
        if event == _JAX_CACHE_HIT:
            _cache_loads.add()

    jax.monitoring.register_event_listener(on_event)


def _counting(fn: Callable) -> Callable:
    """`fn`, counting its calls: under tf.function and jax.jit the Python
    body runs once per trace, that is once per compiled program."""

    def traced(*args, **kwargs):
        _traces.add()
        return fn(*args, **kwargs)

    return traced


def compile_function(fn: Callable, model: keras.Model) -> Callable:
    """Return a compiled version of `fn(*tensors)` that uses `model`'s layers.

    Each distinct input shape compiles once; keep shapes in a small fixed set.
    """
    import keras  # Not at the top: servers of exports read the counters, no Keras.

    backend = keras.backend.backend()
    if backend in ("tensorflow", "jax"):
        fn = _counting(fn)
    if backend == "tensorflow":
        import tensorflow as tf  # noqa: TID251 - the TF compiler itself

        compiled = tf.function(fn, jit_compile=True)
        # Each new shape traces once, by design; the callers keep the shapes
        # to a small fixed set. TensorFlow would call that "excessive
        # retracing" once 5 of the last 10 calls traced, which a search in
        # segments (batch rows 64/16/4/1, growing caches) does on its first
        # batches: the warning would point a user at a non-problem.
        compiled._omit_frequent_tracing_warning = True
        return compiled
    if backend == "jax":
        import jax  # noqa: TID251 - the JAX compiler itself

        variables = model.variables

        def stateless(values, *args):
            with keras.StatelessScope(state_mapping=list(zip(variables, values))):
                return fn(*args)

        compiled = jax.jit(stateless)
        return lambda *args: compiled([v.value for v in variables], *args)
    if backend == "torch":
        return _torch_function(fn, os.environ.get(TORCH_COMPILE_ENV) == "1")
    return fn


def _torch_function(fn: Callable, compiled: bool) -> Callable:
    """`fn` without autograd (a search never needs gradients, and every
    eager step would otherwise record a graph over the weights), through
    `torch.compile` if `compiled`."""
    import torch  # noqa: TID251 - the torch compiler itself

    def inference(*args):
        with torch.no_grad():
            return fn(*args)

    return torch.compile(inference) if compiled else inference


def enable_compilation_cache(
    directory: str | os.PathLike | None = None,
) -> Path | None:
    """Keep compiled XLA programs on disk so later runs skip compiling them.

    JAX: its persistent compilation cache, in `directory`, else
    `$KERAS_TRANSFORMER_CACHE/jax`, else `~/.cache/keras_transformer/jax`
    (beside the Multi30k download cache). A cache configured for JAX
    (`JAX_COMPILATION_CACHE_DIR`) is left as it is.

    TensorFlow: XLA's persistent cache (`--tf_xla_persistent_cache_directory`
    in `TF_XLA_FLAGS`), in `directory`, else
    `<root>/tensorflow/<TensorFlow version>-<machine>`: a TensorFlow entry is
    machine code compiled for this CPU and loaded after only a warning on
    another, and may not load in another version, so the default keeps one
    directory per version and CPU type. A directory already in `TF_XLA_FLAGS`
    is left as it is (an empty one turns the cache off). TensorFlow reads
    its XLA flags once, when it first compiles with XLA, so call this before
    any compiled function runs. A cache hit costs the loading but not the
    compiling: `evaluate` of Multi30k test2016 with beam 4 took 41 s instead
    of 54 (all of it, from process start; docs/benchmarks-compiling.md, "Compilation
    caches"). TensorFlow logs two harmless error-level lines per hit (a text-format
    parse it falls back from, and tuning flags of the compiled code); the
    command line hides them.

    On TensorFlow, a directory that cannot be created or written to (where
    TensorFlow would fail every compile), or whose path holds a space (which
    `TF_XLA_FLAGS` cannot carry), leaves the cache off with a warning:
    compiling still works, only every run compiles anew. (JAX warns and
    goes on by itself.)

    Returns:
        The cache directory in use, or None (other backends, or off).
    """
    import keras  # Not at the top: servers of exports read the counters, no Keras.

    backend = keras.backend.backend()
    if backend == "jax":
        return _enable_jax_cache(directory)
    if backend == "tensorflow":
        return _enable_tensorflow_cache(directory)
    return None


def _enable_jax_cache(directory) -> Path:
    import jax  # noqa: TID251 - the JAX compiler itself

    _count_jax_cache_loads()
    configured = jax.config.jax_compilation_cache_dir
    if configured:
        return Path(configured)
    directory = Path(directory) if directory is not None else user_cache_root() / "jax"
    jax.config.update("jax_compilation_cache_dir", str(directory))
    jax.config.update(
        "jax_persistent_cache_min_compile_time_secs", _CACHE_MIN_COMPILE_SECONDS
    )
    return directory


_TF_CACHE_FLAG = "--tf_xla_persistent_cache_directory"


def _enable_tensorflow_cache(directory) -> Path | None:
    flags = os.environ.get("TF_XLA_FLAGS", "")
    configured = re.search(rf"(?:^|\s){_TF_CACHE_FLAG}=(\S*)", flags)
    if configured:  # The user's choice, an empty one (no cache) included.
        return Path(configured.group(1)) if configured.group(1) else None
    if directory is None:
        import tensorflow as tf  # noqa: TID251 - its version keys the cache

        version = f"{tf.__version__}-{machine_key()}"
        directory = user_cache_root() / "tensorflow" / version
    directory = Path(directory).absolute()
    problem = None
    if re.search(r"\s", str(directory)):
        problem = "TF_XLA_FLAGS cannot hold a path with spaces"
    else:
        try:
            directory.mkdir(parents=True, exist_ok=True)
            # TensorFlow fails every XLA compile whose entry it cannot write.
            with tempfile.TemporaryFile(dir=directory):
                pass
        except OSError as error:
            problem = f"cannot write there ({error.strerror or error})"
    if problem:
        warnings.warn(
            f"XLA compilation cache not enabled at {directory}: {problem}. "
            "Set KERAS_TRANSFORMER_CACHE to another directory.",
            stacklevel=3,
        )
        return None
    os.environ["TF_XLA_FLAGS"] = f"{flags} {_TF_CACHE_FLAG}={directory}".strip()
    return directory


def machine_key() -> str:
    """12 hex digits naming this CPU's model and instruction-set features
    (Linux's /proc/cpuinfo; elsewhere what `platform` reports)."""
    lines = []
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as cpuinfo:
            for line in cpuinfo:
                if line.startswith(("model name", "flags", "Features", "CPU part")):
                    lines.append(line.strip())
                if not line.strip() and lines:
                    break  # The first processor describes them all.
    except OSError:
        pass
    identity = "\n".join([platform.machine(), platform.processor(), *lines])
    return hashlib.sha256(identity.encode()).hexdigest()[:12]
