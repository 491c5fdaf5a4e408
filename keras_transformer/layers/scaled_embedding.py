"""Token embedding scaled by sqrt(d_model), reusable as the output layer."""

from __future__ import annotations

import math

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="keras_transformer")
class ScaledEmbedding(keras.layers.Layer):
    """Embedding lookup times sqrt(d_model); its transpose gives the logits.

    §3.4: "we share the same weight matrix between the two embedding layers
    and the pre-softmax linear transformation ... In the embedding layers, we
    multiply those weights by sqrt(d_model)". One instance called on source
    ids, on target ids and with `reverse=True` on decoder outputs ties all
    three; separate instances give untied embeddings.

    The table is initialised with stddev d_model^-0.5 (as tensor2tensor and
    fairseq), so the scaled embeddings start with unit variance, comparable
    to the positional encoding they are added to.

    Args:
        vocab_size: int. V.
        model_dim: int. D.

    Call arguments:
        inputs: (B, L) int token ids, or (B, L, D) hidden states when
            `reverse=True`.
        reverse: bool, keyword-only. Project hidden states onto the
            vocabulary: (B, L, D) -> (B, L, V) float32 logits, computed in
            float32 under mixed precision.

    Example:
        >>> embedding = ScaledEmbedding(vocab_size=100, model_dim=16)
        >>> x = embedding(keras.ops.ones((2, 5), "int32"))
        >>> embedding(x, reverse=True).shape
        (2, 5, 100)
    """

    def __init__(self, vocab_size: int, model_dim: int, **kwargs):
        super().__init__(**kwargs)
        for name, value in (("vocab_size", vocab_size), ("model_dim", model_dim)):
            if not isinstance(value, int) or value < 1:
                raise ValueError(
                    f"{name} must be an integer >= 1. Received: {name}={value}"
                )
        self.vocab_size = vocab_size
        self.model_dim = model_dim

    def build(self, input_shape=None):
        self.embeddings = self.add_weight(
            name="embeddings",
            shape=(self.vocab_size, self.model_dim),
            initializer=keras.initializers.RandomNormal(stddev=self.model_dim**-0.5),
        )
        self.built = True

    def call(self, inputs, *, reverse: bool = False):
        if reverse:
            table = ops.cast(self.embeddings, "float32")
            hidden = ops.cast(inputs, "float32")
            return ops.matmul(hidden, ops.transpose(table))
        vectors = ops.take(self.embeddings, ops.cast(inputs, "int32"), axis=0)
        return ops.cast(vectors, self.compute_dtype) * ops.cast(
            math.sqrt(self.model_dim), self.compute_dtype
        )

    def compute_output_spec(self, inputs, *, reverse: bool = False):
        if reverse:
            return keras.KerasTensor(inputs.shape[:-1] + (self.vocab_size,), "float32")
        return keras.KerasTensor(inputs.shape + (self.model_dim,), self.compute_dtype)

    def get_config(self):
        config = super().get_config()
        config.update({"vocab_size": self.vocab_size, "model_dim": self.model_dim})
        return config
