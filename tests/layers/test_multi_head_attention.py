"""MultiHeadAttention: contract, NumPy reference, Keras MHA, caches."""

from __future__ import annotations

import keras
import numpy as np
import pytest

from keras_transformer.layers import MultiHeadAttention
from tests.helpers import assert_layer_contract, to_numpy

B, T, S, D, H = 2, 4, 6, 16, 4
K = D // H


def random_inputs(seed=0):
    rng = np.random.default_rng(seed)
    query = rng.normal(size=(B, T, D)).astype("float32")
    memory = rng.normal(size=(B, S, D)).astype("float32")
    return query, memory


def cross_mask():
    mask = np.ones((B, T, S), bool)
    mask[0, :, 4:] = False
    mask[1, :, 2:] = False
    mask[1, 0, 1] = False
    return mask


def self_mask():
    mask = np.tril(np.ones((T, T), bool))[None].repeat(B, axis=0)
    mask[1, :, 2] = False
    return mask


def reference_mha(layer, query, value, mask):
    """NumPy multi-head attention using the layer's own weights."""

    def dense(x, projection):
        kernel, bias = (np.asarray(w, np.float64) for w in projection.get_weights())
        return x @ kernel + bias

    def split(x):
        return x.reshape(x.shape[0], x.shape[1], H, K)

    q = split(dense(query, layer.query_dense))
    k = split(dense(value, layer.key_dense))
    v = split(dense(value, layer.value_dense))
    scores = np.einsum("bthk,bshk->bhts", q, k) / np.sqrt(K)
    scores = np.where(mask[:, None], scores, -np.inf)
    weights = np.exp(scores - scores.max(-1, keepdims=True))
    weights /= weights.sum(-1, keepdims=True)
    context = np.einsum("bhts,bshk->bthk", weights, v).reshape(B, -1, D)
    return dense(context, layer.output_dense), weights


def test_layer_contract_self_attention(tmp_path):
    query, _ = random_inputs()
    assert_layer_contract(
        MultiHeadAttention,
        {"num_heads": H, "dropout_rate": 0.1},
        [query, query, self_mask()],
        tmp_path=tmp_path,
    )


def test_layer_contract_cross_attention(tmp_path):
    query, memory = random_inputs(1)
    assert_layer_contract(
        MultiHeadAttention,
        {"num_heads": H, "use_bias": False, "kernel_initializer": "he_normal"},
        [query, memory, cross_mask()],
        tmp_path=tmp_path,
    )


def test_matches_numpy_reference():
    query, memory = random_inputs(2)
    mask = cross_mask()
    layer = MultiHeadAttention(H)
    output, weights = layer(query, memory, mask, return_attention_weights=True)
    expected, expected_weights = reference_mha(layer, query, memory, mask)
    np.testing.assert_allclose(to_numpy(output), expected, atol=1e-5)
    np.testing.assert_allclose(to_numpy(weights), expected_weights, atol=1e-6)


def test_projections_are_named_dense_layers_with_distinct_kernels():
    query, _ = random_inputs()
    layer = MultiHeadAttention(H)
    layer(query)
    names = [layer.query_dense.name, layer.key_dense.name, layer.value_dense.name]
    assert names == ["query_projection", "key_projection", "value_projection"]
    assert layer.output_dense.name == "output_projection"
    kernels = [to_numpy(d.kernel) for d in (layer.query_dense, layer.key_dense)]
    kernels.append(to_numpy(layer.value_dense.kernel))
    for kernel in kernels:
        assert kernel.shape == (D, D)
    assert not np.array_equal(kernels[0], kernels[1])
    assert not np.array_equal(kernels[1], kernels[2])


def keras_mha_with_our_weights(layer, query, value):
    """keras.layers.MultiHeadAttention holding `layer`'s weights."""
    reference = keras.layers.MultiHeadAttention(num_heads=H, key_dim=K)
    reference(query, value)  # Build.
    pairs = [
        (reference._query_dense, layer.query_dense, (D, H, K), (H, K)),
        (reference._key_dense, layer.key_dense, (D, H, K), (H, K)),
        (reference._value_dense, layer.value_dense, (D, H, K), (H, K)),
        (reference._output_dense, layer.output_dense, (H, K, D), (D,)),
    ]
    for theirs, ours, kernel_shape, bias_shape in pairs:
        kernel, bias = ours.get_weights()
        theirs.set_weights([kernel.reshape(kernel_shape), bias.reshape(bias_shape)])
    return reference


@pytest.mark.parametrize("kind", ["self", "self_masked", "cross", "cross_masked"])
def test_matches_keras_multi_head_attention(kind):
    query, memory = random_inputs(3)
    value = query if kind.startswith("self") else memory
    mask = None
    if kind == "self_masked":
        mask = self_mask()
    elif kind == "cross_masked":
        mask = cross_mask()
    layer = MultiHeadAttention(H)
    layer(query, value)
    # Non-trivial biases, so their layout is checked too.
    rng = np.random.default_rng(4)
    for dense in (layer.query_dense, layer.key_dense, layer.value_dense):
        kernel, _ = dense.get_weights()
        dense.set_weights([kernel, rng.normal(size=(D,)).astype("float32")])
    reference = keras_mha_with_our_weights(layer, query, value)
    ours = layer(query, value, mask)
    theirs = reference(query, value, attention_mask=mask)
    np.testing.assert_allclose(to_numpy(ours), to_numpy(theirs), atol=1e-5)


def test_empty_cache_shape_and_dtype():
    layer = MultiHeadAttention(H)
    layer.build((None, None, D))
    key_cache, value_cache = layer.empty_cache(B, 7)
    for cache in (key_cache, value_cache):
        assert tuple(cache.shape) == (B, H, 7, K)  # Heads-first.
        assert keras.backend.standardize_dtype(cache.dtype) == "float32"
        assert np.all(to_numpy(cache) == 0)


def test_update_cache_writes_at_index_only():
    query, _ = random_inputs(5)
    layer = MultiHeadAttention(H)
    layer(query)
    key_cache, value_cache = layer.empty_cache(B, 6)
    key_cache, value_cache = layer.update_cache(key_cache, value_cache, query[:, :2], 3)
    keys, values = layer.project_key_value(query[:, :2])  # (B, T, H, K)
    key_cache, value_cache = to_numpy(key_cache), to_numpy(value_cache)
    heads_first = (0, 2, 1, 3)
    np.testing.assert_array_equal(
        key_cache[:, :, 3:5], to_numpy(keys).transpose(heads_first)
    )
    np.testing.assert_array_equal(
        value_cache[:, :, 3:5], to_numpy(values).transpose(heads_first)
    )
    assert np.all(key_cache[:, :, [0, 1, 2, 5]] == 0)
    assert np.all(value_cache[:, :, [0, 1, 2, 5]] == 0)


def test_cached_attention_equals_call():
    query, _ = random_inputs(6)
    mask = np.tril(np.ones((T, T), bool))[None].repeat(B, axis=0)
    layer = MultiHeadAttention(H)
    expected = to_numpy(layer(query, attention_mask=mask))
    max_length = T + 2
    caches = layer.empty_cache(B, max_length)
    slots = np.arange(max_length)
    for t in range(T):
        caches = layer.update_cache(*caches, query[:, t : t + 1], t)
        step_mask = np.broadcast_to(slots <= t, (B, 1, max_length))
        output = layer.attend_cache(query[:, t : t + 1], *caches, step_mask)
        np.testing.assert_allclose(to_numpy(output)[:, 0], expected[:, t], atol=1e-5)


def test_attention_weights_shape_and_masked_zeros():
    query, memory = random_inputs(7)
    mask = cross_mask()
    _, weights = MultiHeadAttention(H)(
        query, memory, mask, return_attention_weights=True
    )
    weights = to_numpy(weights)
    assert weights.shape == (B, H, T, S)
    assert np.all(weights[np.broadcast_to(~mask[:, None], weights.shape)] == 0)


@pytest.mark.parametrize("num_heads", [0, -1, 2.0, None])
def test_invalid_num_heads(num_heads):
    with pytest.raises(ValueError, match="num_heads"):
        MultiHeadAttention(num_heads)


def test_model_size_not_divisible_by_heads():
    layer = MultiHeadAttention(3)
    with pytest.raises(ValueError, match="d_model=16, num_heads=3"):
        layer.build((None, None, 16))
