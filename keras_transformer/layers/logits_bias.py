"""A learned bias on the logits (MarianMT's `final_logits_bias`)."""

from __future__ import annotations

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="keras_transformer")
class LogitsBias(keras.layers.Layer):
    """Adds one learned float32 number per vocabulary entry to the logits.

    The paper's tied output projection has no bias; MarianMT checkpoints
    (the OPUS-MT family) add one after it, so an imported checkpoint keeps
    its outputs exactly (`TransformerConfig.output_bias`). Not trained, as
    Marian's (a buffer there): it starts at zero, so a new model computes
    what it would without the layer, and a fine-tune keeps the imported one.

    Call arguments:
        inputs: (B, T, V) float32 logits.

    Returns:
        (B, T, V) float32: inputs + bias.

    Examples:
        >>> bias = LogitsBias()
        >>> bias(keras.ops.zeros((2, 3, 10))).shape
        (2, 3, 10)
    """

    def __init__(self, **kwargs):
        # float32 as the logits and the loss, under mixed precision too.
        kwargs.setdefault("dtype", "float32")
        super().__init__(**kwargs)

    def build(self, input_shape):
        self.bias = self.add_weight(
            name="bias", shape=(input_shape[-1],), initializer="zeros", trainable=False
        )
        self.built = True

    def call(self, inputs):
        return ops.cast(inputs, "float32") + ops.cast(self.bias, "float32")

    def compute_output_shape(self, input_shape):
        return input_shape
