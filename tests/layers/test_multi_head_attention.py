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


def test_attention_with_own_keys_apart_equals_call():
    """The ONNX step's attention (`own=`): the caches hold the positions
    before t only, in more slots than that; the slots past them hold values
    that would change the output if read (masked, they are not)."""
    query, _ = random_inputs(6)
    mask = np.tril(np.ones((T, T), bool))[None].repeat(B, axis=0)
    layer = MultiHeadAttention(H)
    expected = to_numpy(layer(query, attention_mask=mask))
    capacity = T + 3
    keys, values = (
        np.full(shape, 7.0, np.float32)
        for shape in (c.shape for c in layer.empty_cache(B, capacity))
    )
    slots = np.arange(capacity)
    for t in range(T):
        own = layer.project_key_value_cache(query[:, t : t + 1])
        step_mask = np.broadcast_to(slots < t, (B, 1, capacity))
        output = layer.attend_cache(
            query[:, t : t + 1], keys, values, step_mask, own=own
        )
        np.testing.assert_allclose(to_numpy(output)[:, 0], expected[:, t], atol=1e-5)
        keys[:, :, t : t + 1], values[:, :, t : t + 1] = (to_numpy(x) for x in own)


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


# --- d_k set apart from d_model / h (Table 3 row (B)) ------------------------

KEY_DIM = 3  # d_k; the value heads keep K = D / H = 4.


def reference_mha_key_dim(layer, query, value, mask):
    """NumPy attention with d_k != d_v, from the layer's own weights."""

    def dense(x, projection):
        kernel, bias = (np.asarray(w, np.float64) for w in projection.get_weights())
        return x @ kernel + bias

    q = dense(query, layer.query_dense).reshape(B, -1, H, KEY_DIM)
    k = dense(value, layer.key_dense).reshape(B, -1, H, KEY_DIM)
    v = dense(value, layer.value_dense).reshape(B, -1, H, K)
    scores = np.einsum("bthk,bshk->bhts", q, k) / np.sqrt(KEY_DIM)
    scores = np.where(mask[:, None], scores, -np.inf)
    weights = np.exp(scores - scores.max(-1, keepdims=True))
    weights /= weights.sum(-1, keepdims=True)
    context = np.einsum("bhts,bshk->bthk", weights, v).reshape(B, -1, D)
    return dense(context, layer.output_dense)


@pytest.mark.parametrize("kind", ["self", "cross"])
def test_layer_contract_with_key_dim(tmp_path, kind):
    query, memory = random_inputs(8)
    inputs = [query, query, self_mask()] if kind == "self" else [query, memory]
    if kind == "cross":
        inputs.append(cross_mask())
    layer_outputs = assert_layer_contract(
        MultiHeadAttention,
        {"num_heads": H, "key_dim": KEY_DIM},
        inputs,
        tmp_path=tmp_path,
    )
    assert layer_outputs[0].shape == (B, T, D)
    assert MultiHeadAttention(H, key_dim=KEY_DIM).get_config()["key_dim"] == KEY_DIM


def test_key_dim_sizes_query_and_key_projections_only():
    query, memory = random_inputs(9)
    layer = MultiHeadAttention(H, key_dim=KEY_DIM)
    layer(query, memory)
    assert tuple(layer.query_dense.kernel.shape) == (D, H * KEY_DIM)
    assert tuple(layer.key_dense.kernel.shape) == (D, H * KEY_DIM)
    assert tuple(layer.value_dense.kernel.shape) == (D, D)
    assert tuple(layer.output_dense.kernel.shape) == (D, D)
    assert (layer.key_head_dim, layer.head_dim) == (KEY_DIM, K)


def test_key_dim_matches_numpy_reference():
    query, memory = random_inputs(10)
    mask = cross_mask()
    layer = MultiHeadAttention(H, key_dim=KEY_DIM)
    output = layer(query, memory, mask)
    expected = reference_mha_key_dim(layer, query, memory, mask)
    np.testing.assert_allclose(to_numpy(output), expected, atol=1e-5)


def test_key_dim_closed_form_scale_is_one_over_sqrt_d_k():
    # Queries and keys are all ones (or zeros) in each of their d_k = 9
    # components, so a query scores 0 against the zero key and
    # 9 / sqrt(9) = 3 against the ones key: weights softmax([0, 3]), i.e.
    # sigmoid(3) on the second key. With W_V = W_O = I the output is that
    # weight times the ones vector. (Scaled by sqrt(D / H) = 2 instead, the
    # weight would be sigmoid(4.5).)
    key_dim = 9
    layer = MultiHeadAttention(H, key_dim=key_dim, use_bias=False)
    query = np.ones((1, 1, D), "float32")
    memory = np.stack([np.zeros(D), np.ones(D)])[None].astype("float32")
    layer(query, memory)
    width = H * key_dim
    layer.query_dense.set_weights([np.full((D, width), 1 / D, "float32")])
    layer.key_dense.set_weights([np.full((D, width), 1 / D, "float32")])
    layer.value_dense.set_weights([np.eye(D, dtype="float32")])
    layer.output_dense.set_weights([np.eye(D, dtype="float32")])
    output, weights = layer(query, memory, return_attention_weights=True)
    sigmoid_3 = 1 / (1 + np.exp(-3.0))
    np.testing.assert_allclose(
        to_numpy(weights),
        np.broadcast_to([1 - sigmoid_3, sigmoid_3], (1, H, 1, 2)),
        rtol=1e-6,
    )
    np.testing.assert_allclose(
        to_numpy(output), np.full((1, 1, D), sigmoid_3), rtol=1e-6
    )


def test_key_dim_cache_shapes_and_cached_attention_equals_call():
    query, _ = random_inputs(11)
    mask = np.tril(np.ones((T, T), bool))[None].repeat(B, axis=0)
    layer = MultiHeadAttention(H, key_dim=KEY_DIM)
    expected = to_numpy(layer(query, attention_mask=mask))
    max_length = T + 2
    caches = layer.empty_cache(B, max_length)
    assert tuple(caches[0].shape) == (B, H, max_length, KEY_DIM)
    assert tuple(caches[1].shape) == (B, H, max_length, K)
    slots = np.arange(max_length)
    for t in range(T):
        caches = layer.update_cache(*caches, query[:, t : t + 1], t)
        step_mask = np.broadcast_to(slots <= t, (B, 1, max_length))
        output = layer.attend_cache(query[:, t : t + 1], *caches, step_mask)
        np.testing.assert_allclose(to_numpy(output)[:, 0], expected[:, t], atol=1e-5)


def test_key_dim_equal_to_d_model_over_h_is_the_default_bit_for_bit():
    query, memory = random_inputs(12)
    keras.utils.set_random_seed(3)
    default = MultiHeadAttention(H)
    default_output = to_numpy(default(query, memory))
    keras.utils.set_random_seed(3)
    explicit = MultiHeadAttention(H, key_dim=K)
    explicit_output = to_numpy(explicit(query, memory))
    for ours, theirs in zip(default.get_weights(), explicit.get_weights()):
        np.testing.assert_array_equal(ours, theirs)
    np.testing.assert_array_equal(default_output, explicit_output)
    assert default.get_config()["key_dim"] is None


@pytest.mark.parametrize("key_dim", [0, -2, 2.0, True, "8"])
def test_invalid_key_dim(key_dim):
    with pytest.raises(ValueError, match="key_dim must be None .* Received: key_dim="):
        MultiHeadAttention(H, key_dim=key_dim)
