"""ScaledDotProductAttention and attention_weights against a NumPy reference."""

from __future__ import annotations

import keras
import numpy as np
import pytest

from keras_transformer.layers import ScaledDotProductAttention, attention_weights
from keras_transformer.layers.scaled_dot_product_attention import MASKED_SCORE
from tests.helpers import assert_layer_contract, to_numpy

# Shapes shared with the MultiHeadAttention tests (d_model 16, 4 heads), so
# JAX compiles each eager op once.
B, T, S, H, K = 2, 4, 6, 4, 4


def reference_attention(query, key, value, mask=None):
    """softmax(Q K^T / sqrt(d_k)) V in float64; masked weights are 0 and a
    row with no visible key gets all-zero weights."""
    query, key, value = (np.asarray(a, np.float64) for a in (query, key, value))
    scores = np.einsum("bthk,bshk->bhts", query, key) / np.sqrt(query.shape[-1])
    if mask is None:
        mask = np.ones((query.shape[0], query.shape[1], key.shape[1]), bool)
    mask = np.broadcast_to(mask[:, None], scores.shape)
    scores = np.where(mask, scores, -np.inf)
    top = np.max(scores, axis=-1, keepdims=True)
    top = np.where(np.isfinite(top), top, 0.0)
    exp = np.where(mask, np.exp(scores - top), 0.0)
    total = exp.sum(axis=-1, keepdims=True)
    weights = np.divide(exp, total, out=np.zeros_like(exp), where=total > 0)
    return np.einsum("bhts,bshk->bthk", weights, value), weights


def random_qkv(seed=0):
    rng = np.random.default_rng(seed)
    query = rng.normal(size=(B, T, H, K)).astype("float32")
    key = rng.normal(size=(B, S, H, K)).astype("float32")
    value = rng.normal(size=(B, S, H, K)).astype("float32")
    return query, key, value


def example_mask():
    mask = np.ones((B, T, S), bool)
    mask[0, :, 3] = False  # A padded key.
    mask[1, 0, 1:] = False  # Only the first key.
    mask[1, 2, :] = False  # No key at all.
    return mask


def test_layer_contract(tmp_path):
    query, key, value = random_qkv()
    assert_layer_contract(
        ScaledDotProductAttention,
        {"dropout_rate": 0.2},
        [query, key, value, example_mask()],
        tmp_path=tmp_path,
    )


def test_unmasked_matches_numpy_reference():
    query, key, value = random_qkv(1)
    output, weights = ScaledDotProductAttention()(
        query, key, value, return_attention_weights=True
    )
    expected_output, expected_weights = reference_attention(query, key, value)
    np.testing.assert_allclose(to_numpy(output), expected_output, atol=1e-5)
    np.testing.assert_allclose(to_numpy(weights), expected_weights, atol=1e-6)
    assert to_numpy(output).shape == (B, T, H, K)
    assert to_numpy(weights).shape == (B, H, T, S)


def test_masked_matches_numpy_reference():
    query, key, value = random_qkv(2)
    mask = example_mask()
    output, weights = ScaledDotProductAttention()(
        query, key, value, mask, return_attention_weights=True
    )
    output, weights = to_numpy(output), to_numpy(weights)
    expected_output, expected_weights = reference_attention(query, key, value, mask)
    np.testing.assert_allclose(output, expected_output, atol=1e-5)
    np.testing.assert_allclose(weights, expected_weights, atol=1e-6)
    assert weights.dtype == np.float32
    hidden = np.broadcast_to(~mask[:, None], weights.shape)
    assert np.all(weights[hidden] == 0.0)  # Exactly, not approximately.
    # The row that sees no key: zero weights and zero output, never NaN.
    assert np.all(weights[1, :, 2] == 0.0)
    assert np.all(output[1, 2] == 0.0)
    # The row that sees one key copies that key's value.
    np.testing.assert_allclose(output[1, 0], value[1, 0], atol=1e-6)
    # Every row with a visible key sums to one, the others to zero.
    sums = weights.sum(axis=-1)  # (B, H, T)
    visible = np.broadcast_to(mask.any(axis=-1)[:, None], sums.shape)
    np.testing.assert_allclose(sums[visible], 1.0, atol=1e-6)
    assert np.all(sums[~visible] == 0.0)
    assert np.sum(~visible) == H  # Exactly the one empty row, in every head.


def test_attention_weights_function_is_scaled_softmax():
    query, key, _ = random_qkv(3)
    tensors = [keras.ops.convert_to_tensor(a) for a in (query, key)]
    weights = to_numpy(attention_weights(*tensors))
    scores = np.einsum("bthk,bshk->bhts", query, key) / np.sqrt(K)
    expected = np.exp(scores - scores.max(-1, keepdims=True))
    expected /= expected.sum(-1, keepdims=True)
    np.testing.assert_allclose(weights, expected, atol=1e-6)


def test_masked_score_is_finite_in_half_precision():
    assert np.isfinite(np.float32(MASKED_SCORE))
    query, key, value = random_qkv(4)
    mask = example_mask()
    for dtype in ("float16", "bfloat16"):
        output, weights = ScaledDotProductAttention(dtype=dtype)(
            keras.ops.cast(query, dtype),
            keras.ops.cast(key, dtype),
            keras.ops.cast(value, dtype),
            mask,
            return_attention_weights=True,
        )
        weights = to_numpy(weights)
        assert weights.dtype == np.float32
        assert np.all(np.isfinite(weights))
        assert np.all(np.isfinite(to_numpy(keras.ops.cast(output, "float32"))))
        assert np.all(weights[np.broadcast_to(~mask[:, None], weights.shape)] == 0)


def test_dropout_in_training_keeps_masked_keys_at_zero():
    rate = 0.5
    query, key, _ = random_qkv(5)
    # One-hot values (one per key): each output row is then exactly its
    # (dropped) weights.
    value = np.zeros((B, S, H, S), "float32")
    for s in range(S):
        value[:, s, :, s] = 1.0
    mask = example_mask()
    layer = ScaledDotProductAttention(dropout_rate=rate)
    output, weights = layer(
        query, key, value, mask, training=True, return_attention_weights=True
    )
    output, weights = to_numpy(output), to_numpy(weights)
    assert np.all(np.isfinite(weights)) and np.all(np.isfinite(output))
    hidden = np.broadcast_to(~mask[:, None], weights.shape)
    assert np.all(weights[hidden] == 0.0)
    _, expected_weights = reference_attention(query, key, value, mask)
    np.testing.assert_allclose(weights, expected_weights, atol=1e-6)  # Pre-dropout.
    dropped = np.transpose(output, (0, 2, 1, 3))  # (B, H, T, S)
    assert np.all(dropped[hidden] == 0.0)
    kept = np.isclose(dropped, weights / (1 - rate), atol=1e-6)
    zeroed = dropped == 0.0
    assert np.all(kept | zeroed)
    assert np.any(zeroed & ~hidden)  # Dropout did drop something...
    assert np.any(kept & ~hidden & (weights > 0))  # ...and kept something.
    # Inference ignores dropout.
    inference = to_numpy(layer(query, key, value, mask, training=False))
    np.testing.assert_allclose(
        np.transpose(inference, (0, 2, 1, 3)), weights, atol=1e-6
    )


def test_compute_output_shape_uses_value_size():
    layer = ScaledDotProductAttention()
    assert layer.compute_output_shape((2, 3, 4, 8), (2, 5, 4, 8), (2, 5, 4, 6)) == (
        2,
        3,
        4,
        6,
    )


@pytest.mark.parametrize("rate", [-0.1, 1.0])
def test_invalid_dropout_rate(rate):
    with pytest.raises(ValueError, match="dropout_rate"):
        ScaledDotProductAttention(dropout_rate=rate)
