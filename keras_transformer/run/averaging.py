"""Checkpoint averaging (the paper averaged the last 5 / 20 checkpoints, §6.1)."""

from __future__ import annotations

import os
from collections.abc import Sequence

import keras
import numpy as np

from keras_transformer.registry import register_keras_objects


def average_checkpoints(paths: Sequence[str | os.PathLike]) -> keras.Model:
    """A model whose weights are the element-wise mean of the checkpoints'.

    All checkpoints must hold the same architecture: a different number of
    weights or any shape mismatch is an error naming the file and the
    variable. The mean is accumulated in float64 in file order, so the result
    does not depend on the backend and averaging N copies of one checkpoint
    returns it unchanged. The optimizer state is not averaged (the result is
    for inference and export).
    """
    if not paths:
        raise ValueError("average_checkpoints needs at least one checkpoint path.")
    register_keras_objects()  # The files name the package's classes.
    model = keras.saving.load_model(paths[0], compile=False)
    reference = [(v.path, tuple(v.shape)) for v in model.weights]
    totals = [np.asarray(w, np.float64) for w in model.get_weights()]
    for path in paths[1:]:
        other = keras.saving.load_model(path, compile=False)
        weights = other.get_weights()
        if len(weights) != len(totals):
            raise ValueError(
                f"{path}: {len(weights)} weights, but {paths[0]} has "
                f"{len(totals)}; checkpoints of different models cannot be averaged."
            )
        for (name, shape), total, value in zip(reference, totals, weights):
            if tuple(value.shape) != shape:
                raise ValueError(
                    f"{path}: weight {name} has shape {tuple(value.shape)}, but "
                    f"{paths[0]} has {shape}; cannot average."
                )
            total += value
    dtypes = [w.dtype for w in model.get_weights()]
    model.set_weights([(t / len(paths)).astype(d) for t, d in zip(totals, dtypes)])
    return model
