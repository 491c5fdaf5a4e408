"""One decoder layer (Vaswani et al. 2017, §3.1, Figure 1 right)."""

from __future__ import annotations

import keras
from keras import ops

from keras_transformer.layers.encoder_block import EncoderBlock
from keras_transformer.layers.multi_head_attention import MultiHeadAttention
from keras_transformer.layers.utils import clone_initializer, layer_norm


@keras.saving.register_keras_serializable(package="keras_transformer")
class DecoderBlock(EncoderBlock):
    """Masked self-attention, cross-attention on the encoder output, then
    feed-forward; each a residual sub-layer with dropout and LayerNorm.

    Takes the same arguments as `EncoderBlock` and adds a cross-attention
    sub-layer between self-attention and feed-forward. The causal and padding
    masks come from the caller (`keras_transformer.layers.masks`).

    Two ways to run it:
    - `call`: a whole target sequence at once (training, scoring).
    - `decode_step`: one or more new positions against a preallocated
      self-attention key/value cache and precomputed cross-attention
      keys/values, for incremental decoding.

    Call arguments:
        inputs: (B, T, D) target-side hidden states.
        memory: (B, S, D) encoder output.
        self_attention_mask: bool (B, T, T), causal AND target padding.
        cross_attention_mask: bool (B, T, S), source padding.
        return_attention_weights: bool, keyword-only; also return a dict
            with "self_attention" (B, H, T, T) and "cross_attention"
            (B, H, T, S) weights.

    Returns:
        (B, T, D), or (output, weights dict).
    """

    def build(self, inputs_shape, memory_shape=None):
        super().build(inputs_shape)
        policy = self.dtype_policy
        self.cross_attention = MultiHeadAttention(
            self.num_heads,
            dropout_rate=self.attention_dropout_rate,
            kernel_initializer=clone_initializer(self.kernel_initializer),
            key_dim=self.key_dim,
            dtype=policy,
            name="cross_attention",
        )
        self.cross_attention.build(inputs_shape, memory_shape or inputs_shape)
        self.cross_attention_dropout = keras.layers.Dropout(
            self.dropout_rate, dtype=policy, name="cross_attention_dropout"
        )
        self.cross_attention_norm = layer_norm(
            self.layer_norm_epsilon, policy, "cross_attention_norm"
        )
        self.cross_attention_norm.build(inputs_shape)

    def _forward(self, inputs, self_attend, cross_attend, training):
        x, self_extra = self._sublayer(inputs, self_attend, "self_attention", training)
        x, cross_weights = self._sublayer(x, cross_attend, "cross_attention", training)
        x = self._feed_forward_sublayer(x, training)
        return x, self_extra, cross_weights

    def call(
        self,
        inputs,
        memory,
        self_attention_mask=None,
        cross_attention_mask=None,
        training=None,
        *,
        return_attention_weights: bool = False,
    ):
        def self_attend(hidden):
            return self.self_attention(
                hidden,
                attention_mask=self_attention_mask,
                training=training,
                return_attention_weights=True,
            )

        def cross_attend(hidden):
            return self.cross_attention(
                hidden,
                memory,
                attention_mask=cross_attention_mask,
                training=training,
                return_attention_weights=True,
            )

        x, self_weights, cross_weights = self._forward(
            inputs, self_attend, cross_attend, training
        )
        if return_attention_weights:
            weights = {"self_attention": self_weights, "cross_attention": cross_weights}
            return x, weights
        return x

    def decode_step(
        self,
        inputs,
        cache,
        cross_key_value,
        cache_index,
        self_attention_mask,
        cross_attention_mask,
        beams: int = 1,
    ):
        """Run new positions against the caches (inference only).

        Args:
            inputs: (B, T_new, D) hidden states of the new positions.
            cache: (key_cache, value_cache), (B, H, L_max, d_k) and
                (B, H, L_max, K): this layer's self-attention keys/values for
                earlier positions.
            cross_key_value: (keys, values), (B / beams, H, S, d_k) and
                (B / beams, H, S, K), from
                `cross_attention.project_key_value_cache(memory)`.
            cache_index: int or scalar tensor; position of inputs[:, 0].
            self_attention_mask: bool (B, T_new, L_max); True only for cache
                slots already written (<= the query's position).
            cross_attention_mask: bool (B, T_new, S).
            beams: int. Rows of `inputs` per row of `cross_key_value`: the
                hypotheses of one source in beam search, `beams`
                consecutive rows that share its keys/values. Defaults to 1.

        Returns:
            (outputs (B, T_new, D), updated cache).
        """

        def self_attend(hidden):
            key_cache, value_cache = self.self_attention.update_cache(
                *cache, hidden, cache_index
            )
            output = self.self_attention.attend_cache(
                hidden, key_cache, value_cache, self_attention_mask
            )
            return output, (key_cache, value_cache)

        def cross_attend(hidden):
            # A source's beams attend as extra query positions of one row, so
            # its keys/values are stored and read once, not once per beam
            # (with one beam the reshapes change nothing).
            steps, width = ops.shape(hidden)[1], ops.shape(hidden)[2]
            source_length = ops.shape(cross_attention_mask)[2]
            output = self.cross_attention.attend_cache(
                ops.reshape(hidden, (-1, beams * steps, width)),
                *cross_key_value,
                ops.reshape(cross_attention_mask, (-1, beams * steps, source_length)),
            )
            return ops.reshape(output, (-1, steps, width)), None

        x, new_cache, _ = self._forward(inputs, self_attend, cross_attend, False)
        return x, new_cache

    def compute_output_shape(self, inputs_shape, memory_shape=None):
        return inputs_shape
