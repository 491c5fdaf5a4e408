"""Sinusoidal positional encoding (Vaswani et al. 2017, §3.5)."""

from __future__ import annotations

import keras
from keras import ops


def sinusoidal_table(positions, depth: int):
    """PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(same).

    Sine and cosine are interleaved exactly as in §3.5 (the TensorFlow
    tutorial and tensor2tensor concatenate them instead).

    Args:
        positions: (L,) positions, any numeric dtype.
        depth: d_model.

    Returns:
        (L, depth) float32.
    """
    dims = ops.arange(depth)
    pair_index = ops.cast(dims // 2, "float32")  # i
    inverse_frequency = ops.power(10000.0, -2.0 * pair_index / depth)
    angles = ops.cast(positions, "float32")[:, None] * inverse_frequency[None, :]
    is_even = ops.equal(dims % 2, 0)[None, :]
    return ops.where(is_even, ops.sin(angles), ops.cos(angles))


@keras.saving.register_keras_serializable(package="keras_transformer")
class SinusoidalPositionalEncoding(keras.layers.Layer):
    """Adds the fixed sinusoidal encoding of each position to its embedding.

    Computed on the fly, so there is no upper limit tied to the training
    length; `start_index` shifts the positions (step t of cached decoding
    encodes position t, not 0).

    Call arguments:
        inputs: (B, L, D) embeddings.
        start_index: int or scalar tensor; position of the first row.
            Defaults to 0.

    Returns:
        (B, L, D): inputs + PE[start_index : start_index + L], in the inputs'
        dtype (the table itself is computed in float32).

    Examples:
        >>> layer = SinusoidalPositionalEncoding()
        >>> layer(keras.ops.zeros((1, 3, 8))).shape
        (1, 3, 8)
    """

    def build(self, input_shape):
        self.built = True

    def call(self, inputs, start_index=0):
        length = ops.shape(inputs)[1]
        positions = ops.arange(length) + start_index
        table = sinusoidal_table(positions, ops.shape(inputs)[-1])
        return inputs + ops.cast(table[None], inputs.dtype)

    def compute_output_shape(self, input_shape):
        return input_shape
