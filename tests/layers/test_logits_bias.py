"""LogitsBias: MarianMT's final_logits_bias, a fixed vector added to the logits."""

from __future__ import annotations

import keras
import numpy as np

from keras_transformer.layers import LogitsBias
from tests.helpers import assert_layer_contract, to_numpy


def test_layer_contract(tmp_path):
    logits = np.random.default_rng(0).normal(size=(2, 3, 10)).astype("float32")
    assert_layer_contract(LogitsBias, {}, [logits], tmp_path=tmp_path)


def test_adds_its_bias_to_every_position_and_starts_at_zero():
    logits = np.random.default_rng(1).normal(size=(2, 3, 10)).astype("float32")
    layer = LogitsBias()
    np.testing.assert_array_equal(to_numpy(layer(logits)), logits)
    bias = np.arange(10, dtype="float32")
    layer.bias.assign(bias)
    np.testing.assert_allclose(to_numpy(layer(logits)), logits + bias, atol=1e-6)


def test_is_not_trained_as_marians_buffer_is_not():
    layer = LogitsBias()
    layer(np.zeros((1, 1, 4), "float32"))
    assert layer.trainable_weights == [] and len(layer.non_trainable_weights) == 1


def test_stays_float32_under_a_mixed_precision_policy():
    keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        layer = LogitsBias()
        output = layer(np.zeros((1, 2, 4), "float16"))
    finally:
        keras.mixed_precision.set_global_policy("float32")
    assert layer.bias.dtype == "float32"
    assert keras.backend.standardize_dtype(output.dtype) == "float32"
