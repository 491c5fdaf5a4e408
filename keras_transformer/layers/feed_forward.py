"""Position-wise feed-forward network (Vaswani et al. 2017, §3.3)."""

from __future__ import annotations

import keras

from keras_transformer.config import ACTIVATIONS
from keras_transformer.layers.utils import clone_initializer

# Our names -> Keras's. "gelu" is the exact (erf) GELU, PyTorch's default.
_KERAS_ACTIVATIONS = {"relu": "relu", "swish": "silu", "gelu": "gelu"}


@keras.saving.register_keras_serializable(package="keras_transformer")
class PositionwiseFeedForward(keras.layers.Layer):
    """FFN(x) = max(0, x W1 + b1) W2 + b2, applied to each position alike.

    `activation` replaces the paper's ReLU (max(0, .)) by SiLU/swish or GELU,
    the activations of imported MarianMT checkpoints (OPUS-MT uses swish).

    Args:
        intermediate_dim: int. d_ff.
        dropout_rate: float. Dropout after the ReLU (tensor2tensor's
            `relu_dropout`; 0 in the paper). Defaults to 0.
        kernel_initializer: Defaults to "glorot_uniform".
        activation: str. "relu", "swish" (SiLU) or "gelu" (exact, erf).
            Defaults to "relu".

    Call arguments:
        inputs: (B, L, D).

    Returns:
        (B, L, D).
    """

    def __init__(
        self,
        intermediate_dim: int,
        dropout_rate: float = 0.0,
        kernel_initializer="glorot_uniform",
        activation: str = "relu",
        **kwargs,
    ):
        super().__init__(**kwargs)
        if activation not in ACTIVATIONS:
            raise ValueError(
                f"activation must be one of {ACTIVATIONS}. "
                f"Received: activation={activation!r}"
            )
        self.activation = activation
        if not isinstance(intermediate_dim, int) or intermediate_dim < 1:
            raise ValueError(
                "intermediate_dim must be an integer >= 1. "
                f"Received: intermediate_dim={intermediate_dim}"
            )
        self.intermediate_dim = intermediate_dim
        self.dropout_rate = dropout_rate
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.relu_dropout = keras.layers.Dropout(
            dropout_rate, dtype=self.dtype_policy, name="relu_dropout"
        )

    def build(self, input_shape):
        model_dim = input_shape[-1]
        self.intermediate_dense = keras.layers.Dense(
            self.intermediate_dim,
            activation=_KERAS_ACTIVATIONS[self.activation],
            kernel_initializer=clone_initializer(self.kernel_initializer),
            dtype=self.dtype_policy,
            name="intermediate_dense",
        )
        self.intermediate_dense.build((None, None, model_dim))
        self.output_dense = keras.layers.Dense(
            model_dim,
            kernel_initializer=clone_initializer(self.kernel_initializer),
            dtype=self.dtype_policy,
            name="output_dense",
        )
        self.output_dense.build((None, None, self.intermediate_dim))
        self.built = True

    def call(self, inputs, training=None):
        hidden = self.intermediate_dense(inputs)
        hidden = self.relu_dropout(hidden, training=training)
        return self.output_dense(hidden)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "intermediate_dim": self.intermediate_dim,
                "dropout_rate": self.dropout_rate,
                "activation": self.activation,
                "kernel_initializer": keras.initializers.serialize(
                    self.kernel_initializer
                ),
            }
        )
        return config
