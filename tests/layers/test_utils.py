"""Helpers shared by the layers: residual sub-layer wiring, initializers."""

from __future__ import annotations

import keras
import numpy as np

from keras_transformer.layers.utils import clone_initializer, layer_norm, residual
from tests.helpers import to_numpy


class _Recorder:
    """A sub-layer that doubles its input and remembers what it saw."""

    def __call__(self, hidden):
        self.seen = to_numpy(hidden)
        return hidden * 2.0, "extra"


def _norm_reference(x, epsilon):
    mean = x.mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(x.var(-1, keepdims=True) + epsilon)


def test_post_norm_residual():
    x = np.random.default_rng(0).normal(size=(2, 3, 8)).astype("float32")
    norm = layer_norm(1e-6, "float32", "norm")
    sublayer = _Recorder()
    output, extra = residual(
        keras.ops.convert_to_tensor(x),
        sublayer,
        norm,
        keras.layers.Dropout(0.0),
        norm_first=False,
    )
    assert extra == "extra"
    np.testing.assert_allclose(sublayer.seen, x)
    np.testing.assert_allclose(
        to_numpy(output), _norm_reference(3 * x, 1e-6), atol=1e-5
    )


def test_pre_norm_residual():
    x = np.random.default_rng(1).normal(size=(2, 3, 8)).astype("float32")
    norm = layer_norm(1e-6, "float32", "norm")
    sublayer = _Recorder()
    output, _ = residual(
        keras.ops.convert_to_tensor(x),
        sublayer,
        norm,
        keras.layers.Dropout(0.0),
        norm_first=True,
    )
    np.testing.assert_allclose(sublayer.seen, _norm_reference(x, 1e-6), atol=1e-5)
    expected = x + 2 * _norm_reference(x, 1e-6)
    np.testing.assert_allclose(to_numpy(output), expected, atol=1e-5)


def test_layer_norm_settings():
    norm = layer_norm(1e-3, "mixed_bfloat16", "some_norm")
    assert norm.epsilon == 1e-3
    assert norm.name == "some_norm"
    assert norm.dtype_policy.name == "mixed_bfloat16"


def test_clone_initializer_is_a_fresh_equal_copy():
    original = keras.initializers.GlorotUniform(seed=3)
    clone = clone_initializer(original)
    assert clone is not original
    assert type(clone) is type(original)
    assert clone.get_config() == original.get_config()
