"""Compile a function of Keras layers with the backend's own compiler.

The decoding loop is written once with `keras.ops`; this is the one place that
knows how each backend compiles it: `tf.function(jit_compile=True)` (XLA) on
TensorFlow, `jax.jit` on JAX with the model's variables passed in as
arguments (a Keras `StatelessScope` maps them back onto the layers), so the
weights are inputs of the compiled program rather than baked-in constants.
Other backends run the function as it is.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import keras

# Programs that took less than this to compile are not worth a disk read.
_CACHE_MIN_COMPILE_SECONDS = 0.5


def compile_function(fn: Callable, model: keras.Model) -> Callable:
    """Return a compiled version of `fn(*tensors)` that uses `model`'s layers.

    Each distinct input shape compiles once; keep shapes in a small fixed set.
    """
    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf  # noqa: TID251 - the TF compiler itself

        return tf.function(fn, jit_compile=True)
    if backend == "jax":
        import jax  # noqa: TID251 - the JAX compiler itself

        variables = model.variables

        def stateless(values, *args):
            with keras.StatelessScope(state_mapping=list(zip(variables, values))):
                return fn(*args)

        compiled = jax.jit(stateless)
        return lambda *args: compiled([v.value for v in variables], *args)
    return fn


def enable_compilation_cache(
    directory: str | os.PathLike | None = None,
) -> Path | None:
    """On JAX, keep compiled programs on disk so later runs skip compiling.

    The directory is `directory`, else `$KERAS_TRANSFORMER_CACHE/jax`, else
    `~/.cache/keras_transformer/jax` (beside the Multi30k download cache). A
    cache the user configured for JAX (`JAX_COMPILATION_CACHE_DIR`) is left
    as it is. TensorFlow has no such cache for XLA programs, so there this
    does nothing.

    Returns:
        The cache directory in use, or None on other backends.
    """
    if keras.backend.backend() != "jax":
        return None
    import jax  # noqa: TID251 - the JAX compiler itself

    configured = jax.config.jax_compilation_cache_dir
    if configured:
        return Path(configured)
    if directory is None:
        root = os.environ.get("KERAS_TRANSFORMER_CACHE")
        root = Path(root) if root else Path.home() / ".cache" / "keras_transformer"
        directory = root / "jax"
    directory = Path(directory)
    jax.config.update("jax_compilation_cache_dir", str(directory))
    jax.config.update(
        "jax_persistent_cache_min_compile_time_secs", _CACHE_MIN_COMPILE_SECONDS
    )
    return directory
