"""Token accuracy over non-pad targets."""

from __future__ import annotations

import keras
from keras import ops

from keras_transformer.config import PAD_ID


@keras.saving.register_keras_serializable(package="keras_transformer")
class MaskedTokenAccuracy(keras.metrics.Mean):
    """Fraction of real (non-pad) target tokens whose argmax is the label.

    Accumulates correct and real-token counts over batches, so the epoch
    value is per token, not a mean of per-batch ratios.

    Call arguments (`update_state`):
        y_true: (B, T) int labels.
        y_pred: (B, T, V) logits or probabilities.
    """

    def __init__(self, pad_id: int = PAD_ID, name: str = "token_accuracy", dtype=None):
        super().__init__(name=name, dtype=dtype)
        self.pad_id = pad_id

    def update_state(self, y_true, y_pred, sample_weight=None):
        y_true = ops.cast(y_true, "int32")
        predicted = ops.cast(ops.argmax(y_pred, axis=-1), "int32")
        correct = ops.cast(ops.equal(predicted, y_true), "float32")
        real = ops.cast(ops.not_equal(y_true, self.pad_id), "float32")
        # Mean with per-token weights = real tokens gives sum(correct)/sum(real).
        return super().update_state(correct, sample_weight=real)

    def get_config(self):
        config = super().get_config()
        config.update({"pad_id": self.pad_id})
        return config
