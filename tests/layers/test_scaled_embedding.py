"""ScaledEmbedding: lookup times sqrt(d_model), and its transpose (logits)."""

from __future__ import annotations

import keras
import numpy as np
import pytest

from keras_transformer.layers import ScaledEmbedding
from tests.helpers import assert_layer_contract, to_numpy

V, D = 50, 16


def test_layer_contract(tmp_path):
    ids = np.array([[1, 5, 49, 0], [7, 7, 0, 0]], "int32")
    assert_layer_contract(
        ScaledEmbedding, {"vocab_size": V, "model_dim": D}, [ids], tmp_path=tmp_path
    )


def test_layer_contract_reverse(tmp_path):
    hidden = np.random.default_rng(0).normal(size=(2, 3, D)).astype("float32")
    outputs = assert_layer_contract(
        ScaledEmbedding,
        {"vocab_size": V, "model_dim": D},
        [hidden],
        call_kwargs={"reverse": True},
        tmp_path=tmp_path,
    )
    assert outputs[0].shape == (2, 3, V)


def test_lookup_is_scaled_by_sqrt_model_dim():
    layer = ScaledEmbedding(V, D)
    ids = np.array([[3, 0, 49]], "int32")
    output = to_numpy(layer(ids))
    table = to_numpy(layer.embeddings)
    np.testing.assert_allclose(output[0], table[[3, 0, 49]] * np.sqrt(D), rtol=1e-6)


def test_reverse_is_transposed_table():
    layer = ScaledEmbedding(V, D)
    layer.build()
    hidden = np.random.default_rng(1).normal(size=(2, 3, D)).astype("float32")
    logits = layer(hidden, reverse=True)
    assert keras.backend.standardize_dtype(logits.dtype) == "float32"
    expected = hidden @ to_numpy(layer.embeddings).T
    np.testing.assert_allclose(to_numpy(logits), expected, atol=1e-5)


def test_one_variable_for_both_directions():
    layer = ScaledEmbedding(V, D)
    layer(np.ones((1, 2), "int32"))
    layer(np.ones((1, 2, D), "float32"), reverse=True)
    assert len(layer.weights) == 1
    assert tuple(layer.weights[0].shape) == (V, D)


def test_initial_scale_gives_unit_variance_embeddings():
    layer = ScaledEmbedding(1000, 64)
    layer.build()
    std = np.std(to_numpy(layer.embeddings))
    np.testing.assert_allclose(std, 64**-0.5, rtol=0.05)


@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
def test_mixed_precision_dtypes(policy):
    layer = ScaledEmbedding(V, D, dtype=policy)
    vectors = layer(np.array([[1, 2]], "int32"))
    assert keras.backend.standardize_dtype(vectors.dtype) == policy.split("_")[1]
    assert keras.backend.standardize_dtype(layer.embeddings.dtype) == "float32"
    logits = layer(vectors, reverse=True)
    assert keras.backend.standardize_dtype(logits.dtype) == "float32"


@pytest.mark.parametrize("name,args", [("vocab_size", (0, D)), ("model_dim", (V, 0))])
def test_invalid_sizes(name, args):
    with pytest.raises(ValueError, match=name):
        ScaledEmbedding(*args)
