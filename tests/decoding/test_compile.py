"""The persistent compilation caches the CLI turns on (JAX's and XLA's in
TensorFlow)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import keras
import numpy as np
import pytest

from keras_transformer.decoding.compile import enable_compilation_cache, machine_key

tensorflow_only = pytest.mark.skipif(
    keras.backend.backend() != "tensorflow", reason="TensorFlow only"
)


@pytest.mark.skipif(keras.backend.backend() != "jax", reason="JAX only")
def test_cache_goes_under_the_environment_root_and_respects_a_user_setting(
    tmp_path, monkeypatch
):
    import jax

    previous = jax.config.jax_compilation_cache_dir
    try:
        jax.config.update("jax_compilation_cache_dir", None)
        monkeypatch.setenv("KERAS_TRANSFORMER_CACHE", str(tmp_path))
        assert enable_compilation_cache() == tmp_path / "jax"
        assert jax.config.jax_compilation_cache_dir == str(tmp_path / "jax")
        # Already configured (by the user or an earlier call): left as it is.
        assert enable_compilation_cache(tmp_path / "other") == tmp_path / "jax"
    finally:
        jax.config.update("jax_compilation_cache_dir", previous)


CACHE_LOADS = """
import sys
import jax
import numpy
from keras_transformer.decoding.compile import cache_loads, enable_compilation_cache
enable_compilation_cache(sys.argv[1])
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
square = jax.jit(lambda x: x * x + 1)
square(numpy.ones(3, "float32")).block_until_ready()  # Compiled, and written.
before = cache_loads()
jax.clear_caches()  # Forgotten in memory: the next call reads the disk.
square(numpy.ones(3, "float32")).block_until_ready()
print(before, cache_loads())
"""


@pytest.mark.skipif(keras.backend.backend() != "jax", reason="JAX only")
def test_a_program_read_from_the_cache_is_counted_as_a_load(tmp_path):
    # The server counts loads apart from compilations (issue 50).
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).parents[2]))
    done = subprocess.run(
        [sys.executable, "-c", CACHE_LOADS, str(tmp_path)],
        capture_output=True, text=True, env=env, check=True,
    )  # fmt: skip
    assert done.stdout.split() == ["0", "1"], done.stderr[-2000:]


@tensorflow_only
def test_tensorflow_cache_is_per_version_and_machine_and_respects_a_user_setting(
    tmp_path, monkeypatch
):
    import tensorflow as tf

    monkeypatch.delenv("TF_XLA_FLAGS", raising=False)
    monkeypatch.setenv("KERAS_TRANSFORMER_CACHE", str(tmp_path))
    expected = tmp_path / "tensorflow" / f"{tf.__version__}-{machine_key()}"
    assert enable_compilation_cache() == expected
    assert expected.is_dir()
    assert os.environ["TF_XLA_FLAGS"] == (
        f"--tf_xla_persistent_cache_directory={expected}"
    )
    # Already in TF_XLA_FLAGS (by the user or an earlier call): left as it is.
    assert enable_compilation_cache(tmp_path / "other") == expected
    assert not (tmp_path / "other").exists()


@tensorflow_only
def test_tensorflow_cache_left_off_when_the_user_turned_it_off(tmp_path, monkeypatch):
    flags = "--tf_xla_persistent_cache_directory= --tf_xla_auto_jit=0"
    monkeypatch.setenv("TF_XLA_FLAGS", flags)
    assert enable_compilation_cache(tmp_path / "xla") is None
    assert os.environ["TF_XLA_FLAGS"] == flags
    assert not (tmp_path / "xla").exists()


@tensorflow_only
def test_tensorflow_cache_keeps_the_users_other_xla_flags(tmp_path, monkeypatch):
    monkeypatch.setenv("TF_XLA_FLAGS", "--tf_xla_auto_jit=0")
    assert enable_compilation_cache(tmp_path / "xla") == tmp_path / "xla"
    assert os.environ["TF_XLA_FLAGS"] == (
        f"--tf_xla_auto_jit=0 --tf_xla_persistent_cache_directory={tmp_path / 'xla'}"
    )


def _unwritable_directory():
    """An existing directory this process cannot create files in (root
    cannot either in /sys), or None."""
    directory = Path("/sys/kernel")
    try:
        with tempfile.TemporaryFile(dir=directory):
            return None
    except OSError:
        return directory if directory.is_dir() else None


@tensorflow_only
@pytest.mark.parametrize("problem", ["under a file", "not writable", "with a space"])
def test_tensorflow_cache_that_cannot_be_used_is_left_off_with_a_warning(
    tmp_path, monkeypatch, problem
):
    monkeypatch.delenv("TF_XLA_FLAGS", raising=False)
    if problem == "under a file":
        (tmp_path / "file").write_text("not a directory")
        directory, message = tmp_path / "file" / "xla", "cannot write there"
    elif problem == "not writable":
        directory, message = _unwritable_directory(), "cannot write there"
        if directory is None:
            pytest.skip("no unwritable directory on this machine")
    else:
        directory, message = tmp_path / "my cache", "path with spaces"
    with pytest.warns(UserWarning, match=message) as caught:
        assert enable_compilation_cache(directory) is None
    assert str(directory) in str(caught[0].message)
    assert "TF_XLA_FLAGS" not in os.environ


@tensorflow_only
def test_a_function_compiled_for_several_shapes_raises_no_retracing_warning():
    """Each shape traces once by design (the search in segments runs at a
    few batch sizes and cache lengths); TensorFlow's "excessive retracing"
    warning, which the main job printed twice, is not for that case."""
    import logging

    from keras_transformer.decoding.compile import compile_function

    records = []
    handler = logging.Handler()
    handler.emit = records.append
    logger = logging.getLogger("tensorflow")
    logger.addHandler(handler)
    try:
        compiled = compile_function(lambda x: keras.ops.sum(x * 2), model=None)
        for length in range(1, 8):  # 7 calls, each a new shape, each traced
            result = compiled(keras.ops.ones((2, length)))
            assert float(result) == 4 * length
    finally:
        logger.removeHandler(handler)
    messages = [record.getMessage() for record in records]
    assert not [m for m in messages if "retracing" in m], messages


def test_machine_key_is_twelve_hex_digits_and_stable():
    key = machine_key()
    assert len(key) == 12 and int(key, 16) >= 0
    assert machine_key() == key


# Decodes with a `tiny` model of the given seed, one layer a side (a third
# less tracing and compiling in each of the three processes than two, for
# the same four programs); prints the outputs as JSON.
_DECODE = """
import json, sys
import keras, numpy as np
from keras_transformer import TransformerConfig, build_transformer
from keras_transformer.decoding.compile import enable_compilation_cache
from keras_transformer.decoding.generator import SequenceGenerator

seed, cache = int(sys.argv[1]), sys.argv[2]
if cache != "-":
    assert enable_compilation_cache(cache) is not None
keras.utils.set_random_seed(seed)
config = TransformerConfig.preset(
    "tiny", vocab_size=40, num_encoder_layers=1, num_decoder_layers=1
)
model = build_transformer(config)
source = np.random.default_rng(0).integers(4, 40, (5, 6))
outputs = {}
for beam_size in (1, 3):
    generator = SequenceGenerator(model, beam_size=beam_size, max_extra_length=6)
    sequences, scores = generator(source)
    outputs[beam_size] = [sequences.tolist(), scores.tolist()]
print(json.dumps(outputs))
"""


def _decode(seed: int, cache, **environment) -> tuple[dict, str]:
    """The outputs of `_DECODE` in a TensorFlow subprocess, and its stderr."""
    environment = {**os.environ, "KERAS_BACKEND": "tensorflow", **environment}
    environment.pop("TF_XLA_FLAGS", None)
    completed = subprocess.run(
        [sys.executable, "-c", _DECODE, str(seed), str(cache)],
        capture_output=True,
        text=True,
        env=environment,
        timeout=600,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    return json.loads(completed.stdout.strip().splitlines()[-1]), completed.stderr


def _entries(directory) -> dict:
    return {path.name: path.stat().st_mtime_ns for path in directory.iterdir()}


@pytest.mark.slow
@tensorflow_only
def test_tensorflow_cache_hits_decode_with_the_loaded_models_weights(tmp_path):
    """A second process with another model of the same shapes loads every
    program from the cache (no entry is written again) and still decodes
    with its own weights: they are inputs of the compiled programs."""
    cache = tmp_path / "xla"
    first, _ = _decode(seed=1, cache=cache)
    written = _entries(cache)
    assert written, "the first process wrote no compiled program"
    # TensorFlow says when it loads an entry (at this verbose level only).
    second, log = _decode(
        seed=2,
        cache=cache,
        TF_CPP_MIN_LOG_LEVEL="0",
        TF_CPP_VMODULE="device_executable_persistor=1",
    )
    assert log.count("Loading cached entry for") == len(written)
    assert _entries(cache) == written  # nothing compiled again, nothing new
    uncached, _ = _decode(seed=2, cache="-")
    for beam_size, (sequences, scores) in uncached.items():
        assert second[beam_size][0] == sequences
        np.testing.assert_allclose(second[beam_size][1], scores, rtol=1e-6)
    assert first != second  # the weights differ, and so do the outputs
