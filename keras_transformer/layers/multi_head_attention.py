"""Multi-head attention with a preallocated key/value cache (§3.2.2)."""

from __future__ import annotations

import keras
from keras import ops

from keras_transformer.layers.scaled_dot_product_attention import (
    ScaledDotProductAttention,
    attend_cache_and_own,
    attend_heads_first,
)
from keras_transformer.layers.utils import clone_initializer


@keras.saving.register_keras_serializable(package="keras_transformer")
class MultiHeadAttention(keras.layers.Layer):
    """MultiHead(Q, K, V) = Concat(head_1..head_h) W_O, head_i = Attention(
    Q W_Q_i, K W_K_i, V W_V_i), with d_v = d_model / h and d_k = d_v unless
    `key_dim` sets it apart (Table 3 row (B) varies d_k alone).

    Used for encoder self-attention, masked decoder self-attention and
    encoder-decoder (cross) attention; which one is decided by the inputs and
    the mask the caller passes (True = may attend), never implicitly.

    Incremental decoding uses three methods instead of `call`:
    `project_key_value_cache` (cross-attention keys/values, computed once
    per source), `update_cache` (writes the new step's keys/values into a
    preallocated (B, H, L_max, K) cache at the step index) and
    `attend_cache` (queries against cached keys/values). `call` is `attend` over
    `project_key_value(value)`, so both paths share every weight and op.

    Legend: B batch, T queries, S keys, D model size, H heads, K = D / H
    (the value head size d_v; the query/key head size d_k is K too unless
    `key_dim` is given, and the key cache then has d_k on its last axis).

    Args:
        num_heads: int. h.
        key_dim: int or None. d_k, the size of each head's queries and keys.
            None (the default): d_model / h, as in the paper's main models.
        dropout_rate: float. Dropout on attention weights. Defaults to 0.
        use_bias: bool. Biases in the four projections. Defaults to True.
        kernel_initializer: initializer for the projections.
            Defaults to "glorot_uniform".

    Call arguments:
        query: (B, T, D).
        value: (B, S, D); defaults to `query` (self-attention).
        attention_mask: optional bool (B, T, S).
        return_attention_weights: bool, keyword-only; also return the
            (B, H, T, S) float32 attention weights.

    Returns:
        (B, T, D), or (output, weights) when weights are requested.

    Examples:
        >>> attention = MultiHeadAttention(num_heads=8)
        >>> x = keras.random.normal((2, 10, 512))
        >>> attention(x).shape
        (2, 10, 512)
    """

    def __init__(
        self,
        num_heads: int,
        dropout_rate: float = 0.0,
        use_bias: bool = True,
        kernel_initializer="glorot_uniform",
        key_dim: int | None = None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        if not isinstance(num_heads, int) or num_heads < 1:
            raise ValueError(
                f"num_heads must be an integer >= 1. Received: num_heads={num_heads}"
            )
        if key_dim is not None and (
            isinstance(key_dim, bool) or not isinstance(key_dim, int) or key_dim < 1
        ):
            raise ValueError(
                "key_dim must be None (d_model / num_heads) or an integer >= 1. "
                f"Received: key_dim={key_dim!r}"
            )
        self.num_heads = num_heads
        self.key_dim = key_dim
        self.dropout_rate = dropout_rate
        self.use_bias = use_bias
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.attention = ScaledDotProductAttention(
            dropout_rate, dtype=self.dtype_policy, name="attention"
        )

    def build(self, query_shape, value_shape=None):
        model_dim = query_shape[-1]
        if model_dim % self.num_heads:
            raise ValueError(
                "The model size must be divisible by num_heads (d_k = d_model "
                f"/ h). Received: d_model={model_dim}, num_heads={self.num_heads}"
            )
        self.model_dim = model_dim
        self.head_dim = model_dim // self.num_heads  # d_v
        self.key_head_dim = self.key_dim or self.head_dim  # d_k
        key_width = self.num_heads * self.key_head_dim
        value_dim = model_dim if value_shape is None else value_shape[-1]
        self.query_dense = self._projection("query", query_shape[-1], key_width)
        self.key_dense = self._projection("key", value_dim, key_width)
        self.value_dense = self._projection("value", value_dim, model_dim)
        self.output_dense = self._projection("output", model_dim, model_dim)
        self.built = True

    def _projection(self, role: str, input_dim: int, units: int):
        # A fresh initializer per projection: identical draws for W_Q, W_K
        # and W_V would make every head start symmetric.
        dense = keras.layers.Dense(
            units,
            use_bias=self.use_bias,
            kernel_initializer=clone_initializer(self.kernel_initializer),
            dtype=self.dtype_policy,
            name=f"{role}_projection",
        )
        dense.build((None, None, input_dim))
        return dense

    def _split_heads(self, x, head_size: int):
        # (B, L, H * head_size) -> (B, L, H, head_size)
        shape = ops.shape(x)
        return ops.reshape(x, (shape[0], shape[1], self.num_heads, head_size))

    def project_key_value(self, value):
        """Keys and values of `value`. (B, S, D) -> (B, S, H, d_k) keys and
        (B, S, H, K) values."""
        keys = self._split_heads(self.key_dense(value), self.key_head_dim)
        values = self._split_heads(self.value_dense(value), self.head_dim)
        return keys, values

    def empty_cache(self, batch_size, max_length: int, dtype=None):
        """A zero (B, H, L_max, d_k) key cache and (B, H, L_max, K) value cache.

        Caches are heads-first: the layout the attention's batched matmuls
        (over B and H) read directly. A (B, L_max, H, K) buffer carried
        through a compiled decoding loop gets transposed for them at every
        step, which made decoding 2x (TensorFlow) to 8x (JAX) slower per
        attention at beam 4, batch 64.
        """
        dtype = dtype or self.compute_dtype
        heads = (batch_size, self.num_heads, max_length)
        key_cache = ops.zeros(heads + (self.key_head_dim,), dtype)
        return key_cache, ops.zeros(heads + (self.head_dim,), dtype)

    def update_cache(self, key_cache, value_cache, inputs, index):
        """Write the keys/values of `inputs` (B, T, D) at position `index`.

        Returns the two updated (B, H, L_max, K) caches. Shapes are fixed, so
        the decode loop compiles once (XLA on TF, jit on JAX).
        """
        keys, values = self.project_key_value_cache(inputs)
        start = [0, 0, index, 0]
        key_cache = ops.slice_update(key_cache, start, ops.cast(keys, key_cache.dtype))
        value_cache = ops.slice_update(
            value_cache, start, ops.cast(values, value_cache.dtype)
        )
        return key_cache, value_cache

    def project_key_value_cache(self, value):
        """Keys and values of `value` in the cache layout.
        (B, S, D) -> two (B, H, S, K)."""
        keys, values = self.project_key_value(value)
        return _heads_first(keys), _heads_first(values)

    def attend_cache(
        self, query, key_cache, value_cache, attention_mask=None, own=None
    ):
        """`attend` over (B, H, S, K) caches (see `empty_cache`), inference
        only. (B, T, D) -> (B, T, D).

        `own`: for one new position (T = 1) whose keys and values the caches
        do not hold, its (B, H, 1, K) keys and values: it sees them and the
        slots `attention_mask` (B, 1, S) allows (`attend_cache_and_own`)."""
        queries = _heads_first(
            self._split_heads(self.query_dense(query), self.key_head_dim)
        )
        if own is None:
            context = attend_heads_first(
                queries, key_cache, value_cache, attention_mask
            )
        else:
            context = attend_cache_and_own(
                queries, key_cache, value_cache, *own, attention_mask
            )
        shape = ops.shape(query)
        # (B, H, T, K) -> (B, T, D): concatenate the heads.
        context = ops.reshape(
            _heads_first(context), (shape[0], shape[1], self.model_dim)
        )
        return self.output_dense(context)

    def attend(
        self,
        query,
        keys,
        values,
        attention_mask=None,
        training=None,
        return_attention_weights: bool = False,
    ):
        """Attend from `query` (B, T, D) over projected keys/values."""
        queries = self._split_heads(self.query_dense(query), self.key_head_dim)
        context, weights = self.attention(
            queries,
            keys,
            values,
            attention_mask,
            training=training,
            return_attention_weights=True,
        )
        shape = ops.shape(context)
        # (B, T, H, K) -> (B, T, D): concatenate the heads.
        context = ops.reshape(context, (shape[0], shape[1], self.model_dim))
        output = self.output_dense(context)
        if return_attention_weights:
            return output, weights
        return output

    def call(
        self,
        query,
        value=None,
        attention_mask=None,
        training=None,
        *,
        return_attention_weights: bool = False,
    ):
        keys, values = self.project_key_value(query if value is None else value)
        return self.attend(
            query,
            keys,
            values,
            attention_mask,
            training=training,
            return_attention_weights=return_attention_weights,
        )

    def compute_output_shape(self, query_shape, value_shape=None):
        return tuple(query_shape)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "num_heads": self.num_heads,
                "key_dim": self.key_dim,
                "dropout_rate": self.dropout_rate,
                "use_bias": self.use_bias,
                "kernel_initializer": keras.initializers.serialize(
                    self.kernel_initializer
                ),
            }
        )
        return config


def _heads_first(x):
    """(B, L, H, K) <-> (B, H, L, K)."""
    return ops.transpose(x, (0, 2, 1, 3))
