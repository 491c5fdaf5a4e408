"""Scaled dot-product attention (Vaswani et al. 2017, §3.2.1)."""

from __future__ import annotations

import math

import keras
from keras import ops

# Fill for masked scores. Scores are cast to float32 before the fill and the
# softmax, so this stays finite under float16 and bfloat16 compute dtypes
# (where -1e9 itself would overflow to -inf and a fully masked row to NaN).
MASKED_SCORE = -1e9


def attention_weights(query, key, attention_mask=None):
    """softmax(Q K^T / sqrt(d_k)) in float32, masked.

    Legend: B batch, T queries, S keys, H heads, K head size.

    Args:
        query: (B, T, H, K) tensor.
        key: (B, S, H, K) tensor.
        attention_mask: optional bool (B, T, S); True = may attend.

    Returns:
        (B, H, T, S) float32 weights. Masked keys get exactly 0; a query row
        with no key to attend to gets all zeros (not NaN, not uniform).
    """
    scores = ops.einsum("bthk,bshk->bhts", _scaled(query), key)  # (B, H, T, S)
    return _masked_softmax(scores, attention_mask)


def attend_heads_first(query, key, value, attention_mask=None):
    """softmax(Q K^T / sqrt(d_k)) V on heads-first tensors, without dropout.

    The layout of the decoding caches (`MultiHeadAttention.empty_cache`):
    batched matrix products over (B, H) read them as they are, where the
    (B, S, H, K) einsums of `attention_weights` make an exported graph
    transpose each cache at every step.

    Args:
        query: (B, H, T, K) tensor.
        key: (B, H, S, K) tensor.
        value: (B, H, S, V) tensor.
        attention_mask: optional bool (B, T, S); True = may attend.

    Returns:
        (B, H, T, V): the weights as `attention_weights`'s.
    """
    scores = ops.matmul(_scaled(query), ops.swapaxes(key, -1, -2))  # (B, H, T, S)
    weights = _masked_softmax(scores, attention_mask)
    return ops.matmul(ops.cast(weights, value.dtype), value)


def attend_cache_and_own(query, key_cache, value_cache, own_key, own_value, cache_mask):
    """`attend_heads_first` for one new position over a cache that does not
    hold it: the query sees the slots `cache_mask` allows and its own key.

    Equal to `attend_heads_first` on the caches with the own key and value
    appended (and True appended to the mask), without that concatenation:
    a step graph then reads a cache of any capacity as it is, where
    appending copies every cache at every step (ONNX export, format 3).

    Args:
        query: (B, H, 1, K) tensor.
        key_cache: (B, H, C, K) tensor: C slots, any of them unused.
        value_cache: (B, H, C, V) tensor.
        own_key: (B, H, 1, K): the new position's key.
        own_value: (B, H, 1, V): its value.
        cache_mask: bool (B, 1, C); True = may attend.

    Returns:
        (B, H, 1, V).
    """
    query = _scaled(query)
    cached = ops.matmul(query, ops.swapaxes(key_cache, -1, -2))  # (B, H, 1, C)
    own = ops.sum(query * own_key, axis=-1, keepdims=True)  # (B, H, 1, 1)
    always = ops.ones_like(cache_mask[..., :1], dtype="bool")
    weights = _masked_softmax(
        ops.concatenate([cached, own], axis=-1),
        ops.concatenate([cache_mask, always], axis=-1),
    )
    weights = ops.cast(weights, value_cache.dtype)
    slots = ops.shape(key_cache)[2]
    return (
        ops.matmul(weights[..., :slots], value_cache) + weights[..., slots:] * own_value
    )


def _scaled(query):
    # Scale before the product so float16 scores stay in range.
    head_size = ops.shape(query)[-1]
    return query * ops.cast(1.0 / math.sqrt(head_size), query.dtype)


def _masked_softmax(scores, attention_mask):
    """(B, H, T, S) scores -> float32 weights; masked keys get exactly 0."""
    scores = ops.cast(scores, "float32")
    if attention_mask is None:
        return ops.softmax(scores, axis=-1)
    mask = ops.expand_dims(ops.cast(attention_mask, "bool"), axis=1)  # (B,1,T,S)
    scores = ops.where(mask, scores, MASKED_SCORE)
    weights = ops.softmax(scores, axis=-1)
    return ops.where(mask, weights, 0.0)


@keras.saving.register_keras_serializable(package="keras_transformer")
class ScaledDotProductAttention(keras.layers.Layer):
    """Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V, per head.

    The softmax runs in float32 whatever the compute dtype; masked positions
    are filled with a value that is safe in float16/bfloat16. Dropout, if any,
    applies to the attention weights (as tensor2tensor's `attention_dropout`;
    the paper itself uses only residual dropout).

    Args:
        dropout_rate: float. Dropout on the attention weights. Defaults to 0.

    Call arguments:
        query: (B, T, H, K): K is d_k, the scale's size.
        key: (B, S, H, K).
        value: (B, S, H, V): V (d_v) may differ from d_k.
        attention_mask: optional bool (B, T, S), True = may attend.
        return_attention_weights: bool, keyword-only. Also return the
            (B, H, T, S) float32 weights (before dropout).

    Returns:
        (B, T, H, V), or a tuple with the weights when requested.

    Examples:
        >>> attention = ScaledDotProductAttention()
        >>> q = k = v = keras.random.normal((2, 5, 4, 8))
        >>> attention(q, k, v).shape
        (2, 5, 4, 8)
    """

    def __init__(self, dropout_rate: float = 0.0, **kwargs):
        super().__init__(**kwargs)
        if not 0.0 <= dropout_rate < 1.0:
            raise ValueError(
                f"dropout_rate must be in [0, 1). Received: dropout_rate={dropout_rate}"
            )
        self.dropout_rate = dropout_rate
        self.weights_dropout = keras.layers.Dropout(
            dropout_rate, dtype=self.dtype_policy, name="weights_dropout"
        )

    def build(self, query_shape, key_shape=None, value_shape=None):
        self.built = True

    def call(
        self,
        query,
        key,
        value,
        attention_mask=None,
        training=None,
        *,
        return_attention_weights: bool = False,
    ):
        weights = attention_weights(query, key, attention_mask)
        dropped = ops.cast(weights, value.dtype)
        if self.dropout_rate > 0:
            dropped = self.weights_dropout(dropped, training=training)
        output = ops.einsum("bhts,bshk->bthk", dropped, value)
        if return_attention_weights:
            return output, weights
        return output

    def compute_output_shape(self, query_shape, key_shape, value_shape):
        return tuple(query_shape[:-1]) + (value_shape[-1],)

    def get_config(self):
        config = super().get_config()
        config.update({"dropout_rate": self.dropout_rate})
        return config
