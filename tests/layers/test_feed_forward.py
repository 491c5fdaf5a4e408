"""PositionwiseFeedForward: max(0, x W1 + b1) W2 + b2."""

from __future__ import annotations

import math

import numpy as np
import pytest

from keras_transformer.layers import PositionwiseFeedForward
from tests.helpers import assert_layer_contract, to_numpy


def test_layer_contract(tmp_path):
    inputs = np.random.default_rng(0).normal(size=(2, 4, 16)).astype("float32")
    assert_layer_contract(
        PositionwiseFeedForward,
        {"intermediate_dim": 32, "dropout_rate": 0.3},
        [inputs],
        tmp_path=tmp_path,
    )


def test_matches_numpy_reference():
    inputs = np.random.default_rng(1).normal(size=(2, 4, 16)).astype("float32")
    layer = PositionwiseFeedForward(32)
    output = to_numpy(layer(inputs))
    w1, b1, w2, b2 = layer.get_weights()
    assert w1.shape == (16, 32) and w2.shape == (32, 16)
    expected = np.maximum(0.0, inputs @ w1 + b1) @ w2 + b2
    np.testing.assert_allclose(output, expected, atol=1e-5)


def test_each_position_alike():
    rng = np.random.default_rng(2)
    inputs = rng.normal(size=(1, 4, 16)).astype("float32")
    layer = PositionwiseFeedForward(32)
    whole = to_numpy(layer(inputs))
    single = to_numpy(layer(inputs[:, 2:3]))
    np.testing.assert_allclose(whole[:, 2:3], single, atol=1e-6)


def test_relu_dropout_only_in_training():
    inputs = np.random.default_rng(3).normal(size=(2, 4, 16)).astype("float32")
    layer = PositionwiseFeedForward(32, dropout_rate=0.5)
    inference = to_numpy(layer(inputs, training=False))
    np.testing.assert_array_equal(inference, to_numpy(layer(inputs)))
    training = to_numpy(layer(inputs, training=True))
    assert np.all(np.isfinite(training))
    assert not np.allclose(training, inference)


@pytest.mark.parametrize("intermediate_dim", [0, -4, 8.0])
def test_invalid_intermediate_dim(intermediate_dim):
    with pytest.raises(ValueError, match="intermediate_dim"):
        PositionwiseFeedForward(intermediate_dim)


@pytest.mark.parametrize(
    ("activation", "closed_form"),
    [
        ("swish", lambda h: h / (1.0 + np.exp(-h))),
        # The exact GELU, x * Phi(x), as PyTorch's default (Marian's "gelu").
        ("gelu", lambda h: 0.5 * h * (1.0 + np.vectorize(math.erf)(h / math.sqrt(2)))),
    ],
)
def test_an_imported_checkpoints_activation_matches_its_closed_form(
    activation, closed_form, tmp_path
):
    inputs = np.random.default_rng(4).normal(size=(2, 4, 16)).astype("float32")
    assert_layer_contract(
        PositionwiseFeedForward,
        {"intermediate_dim": 32, "activation": activation},
        [inputs],
        tmp_path=tmp_path,
    )
    layer = PositionwiseFeedForward(32, activation=activation)
    output = to_numpy(layer(inputs))
    w1, b1, w2, b2 = layer.get_weights()
    expected = closed_form((inputs @ w1 + b1).astype("float64")) @ w2 + b2
    np.testing.assert_allclose(output, expected, atol=1e-5)


def test_an_unknown_activation_is_refused_naming_the_choices():
    with pytest.raises(ValueError, match=r"activation must be one of .*'swish'"):
        PositionwiseFeedForward(32, activation="gelu_new")
