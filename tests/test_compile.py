"""The JAX persistent compilation cache the CLI turns on."""

from __future__ import annotations

import keras
import pytest

from keras_transformer.compile import enable_compilation_cache


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


@pytest.mark.skipif(keras.backend.backend() == "jax", reason="not JAX")
def test_cache_is_a_no_op_off_jax(tmp_path):
    assert enable_compilation_cache(tmp_path) is None
    assert not any(tmp_path.iterdir())
