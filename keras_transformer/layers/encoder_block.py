"""One encoder layer (Vaswani et al. 2017, §3.1, Figure 1 left)."""

from __future__ import annotations

import keras

from keras_transformer.layers.feed_forward import PositionwiseFeedForward
from keras_transformer.layers.multi_head_attention import MultiHeadAttention
from keras_transformer.layers.utils import clone_initializer, layer_norm, residual


@keras.saving.register_keras_serializable(package="keras_transformer")
class EncoderBlock(keras.layers.Layer):
    """Self-attention then feed-forward, each in a residual sub-layer.

    Post-norm by default, as the paper: x = LayerNorm(x + Dropout(f(x))).
    With `norm_first=True`: x = x + Dropout(f(LayerNorm(x))); a stack of
    pre-norm blocks then needs a final LayerNorm (the model adds it).

    Args:
        num_heads: int. h.
        intermediate_dim: int. d_ff.
        dropout_rate: float. P_drop on each sub-layer output. Defaults to 0.1.
        attention_dropout_rate: float. On attention weights. Defaults to 0.
        relu_dropout_rate: float. Inside the FFN. Defaults to 0.
        activation: str. The FFN's: "relu" (the paper's), "swish" or
            "gelu". Defaults to "relu".
        norm_first: bool. Pre-norm instead of post-norm. Defaults to False.
        layer_norm_epsilon: float. Defaults to 1e-6.
        kernel_initializer: Defaults to "glorot_uniform".
        key_dim: int or None. d_k of every attention; None (the default):
            d_model / h.

    Call arguments:
        inputs: (B, S, D).
        attention_mask: bool (B, S, S), True = may attend.
        return_attention_weights: bool, keyword-only; also return the
            (B, H, S, S) self-attention weights.

    Returns:
        (B, S, D), or (output, weights).
    """

    def __init__(
        self,
        num_heads: int,
        intermediate_dim: int,
        dropout_rate: float = 0.1,
        attention_dropout_rate: float = 0.0,
        relu_dropout_rate: float = 0.0,
        norm_first: bool = False,
        layer_norm_epsilon: float = 1e-6,
        kernel_initializer="glorot_uniform",
        key_dim: int | None = None,
        activation: str = "relu",
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.activation = activation
        self.num_heads = num_heads
        self.key_dim = key_dim
        self.intermediate_dim = intermediate_dim
        self.dropout_rate = dropout_rate
        self.attention_dropout_rate = attention_dropout_rate
        self.relu_dropout_rate = relu_dropout_rate
        self.norm_first = norm_first
        self.layer_norm_epsilon = layer_norm_epsilon
        self.kernel_initializer = keras.initializers.get(kernel_initializer)

    def build(self, input_shape):
        policy = self.dtype_policy
        self.self_attention = MultiHeadAttention(
            self.num_heads,
            dropout_rate=self.attention_dropout_rate,
            kernel_initializer=clone_initializer(self.kernel_initializer),
            key_dim=self.key_dim,
            dtype=policy,
            name="self_attention",
        )
        self.self_attention.build(input_shape)
        self.self_attention_dropout = keras.layers.Dropout(
            self.dropout_rate, dtype=policy, name="self_attention_dropout"
        )
        self.self_attention_norm = layer_norm(
            self.layer_norm_epsilon, policy, "self_attention_norm"
        )
        self.self_attention_norm.build(input_shape)
        self.feed_forward = PositionwiseFeedForward(
            self.intermediate_dim,
            dropout_rate=self.relu_dropout_rate,
            activation=self.activation,
            kernel_initializer=clone_initializer(self.kernel_initializer),
            dtype=policy,
            name="feed_forward",
        )
        self.feed_forward.build(input_shape)
        self.feed_forward_dropout = keras.layers.Dropout(
            self.dropout_rate, dtype=policy, name="feed_forward_dropout"
        )
        self.feed_forward_norm = layer_norm(
            self.layer_norm_epsilon, policy, "feed_forward_norm"
        )
        self.feed_forward_norm.build(input_shape)
        self.built = True

    def call(
        self,
        inputs,
        attention_mask=None,
        training=None,
        *,
        return_attention_weights: bool = False,
    ):
        def self_attend(hidden):
            return self.self_attention(
                hidden,
                attention_mask=attention_mask,
                training=training,
                return_attention_weights=True,
            )

        x, weights = self._sublayer(inputs, self_attend, "self_attention", training)
        x = self._feed_forward_sublayer(x, training)
        return (x, weights) if return_attention_weights else x

    def _sublayer(self, inputs, sublayer, role: str, training):
        """Residual sub-layer `role` ("self_attention", ...) around `sublayer`,
        which returns (output, extra); returns (new inputs, extra)."""
        return residual(
            inputs,
            sublayer,
            getattr(self, f"{role}_norm"),
            getattr(self, f"{role}_dropout"),
            norm_first=self.norm_first,
            training=training,
        )

    def _feed_forward_sublayer(self, inputs, training):
        def feed_forward(hidden):
            return self.feed_forward(hidden, training=training), None

        return self._sublayer(inputs, feed_forward, "feed_forward", training)[0]

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "num_heads": self.num_heads,
                "key_dim": self.key_dim,
                "intermediate_dim": self.intermediate_dim,
                "dropout_rate": self.dropout_rate,
                "attention_dropout_rate": self.attention_dropout_rate,
                "relu_dropout_rate": self.relu_dropout_rate,
                "activation": self.activation,
                "norm_first": self.norm_first,
                "layer_norm_epsilon": self.layer_norm_epsilon,
                "kernel_initializer": keras.initializers.serialize(
                    self.kernel_initializer
                ),
            }
        )
        return config
