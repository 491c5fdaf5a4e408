"""Learned positional embedding, the alternative of Table 3 row (E)."""

from __future__ import annotations

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="keras_transformer")
class LearnedPositionalEmbedding(keras.layers.Layer):
    """Adds a trainable vector per position (Vaswani et al. 2017, Table 3 (E)).

    Unlike the sinusoids it has a fixed number of positions; sequences longer
    than `max_position` raise an error when the length is known statically.

    Args:
        max_position: int. Number of positions with an embedding.
        initializer: initializer of the table. Defaults to "glorot_uniform".

    Call arguments:
        inputs: (B, L, D).
        start_index: int or scalar tensor. Defaults to 0.

    Returns:
        (B, L, D).
    """

    def __init__(self, max_position: int, initializer="glorot_uniform", **kwargs):
        super().__init__(**kwargs)
        if not isinstance(max_position, int) or max_position < 1:
            raise ValueError(
                "max_position must be an integer >= 1. "
                f"Received: max_position={max_position}"
            )
        self.max_position = max_position
        self.initializer = keras.initializers.get(initializer)

    def build(self, input_shape):
        self.position_embeddings = self.add_weight(
            name="position_embeddings",
            shape=(self.max_position, input_shape[-1]),
            initializer=self.initializer,
        )
        self.built = True

    def call(self, inputs, start_index=0):
        length = inputs.shape[1]
        if isinstance(length, int) and isinstance(start_index, int):
            if start_index + length > self.max_position:
                raise ValueError(
                    f"Sequence of {start_index + length} positions exceeds "
                    f"max_position={self.max_position} of the learned "
                    "positional embedding. Use a larger max_position or "
                    "position_encoding='sinusoidal'."
                )
        table = ops.slice(
            ops.convert_to_tensor(self.position_embeddings),
            [start_index, 0],
            [ops.shape(inputs)[1], ops.shape(inputs)[-1]],
        )
        return inputs + ops.cast(table[None], inputs.dtype)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "max_position": self.max_position,
                "initializer": keras.initializers.serialize(self.initializer),
            }
        )
        return config
