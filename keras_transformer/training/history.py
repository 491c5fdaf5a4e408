"""A run's per-epoch history across resumes, kept whole in `history.json`."""

from __future__ import annotations

from collections.abc import Callable

import keras

from keras_transformer.data.pipeline import DataPosition
from keras_transformer.run.directory import RunDirectory


def merge_history(
    previous: dict[str, list], new: dict[str, list], start: DataPosition, step: int
) -> dict[str, list]:
    """The stored epochs that ended before a resumed run's checkpoint (`step`,
    in epoch `start.epoch`), then the new ones. An epoch cut short there (by
    a stop at the checkpoint) is dropped: the resumed run finishes it."""
    steps = previous.get("step", [])
    epochs = previous.get("epoch") or [None] * len(steps)  # 1-based.
    keep = [
        i
        for i, (s, e) in enumerate(zip(steps, epochs))
        if s <= step and (e is None or e <= start.epoch)
    ]
    merged = {key: [values[i] for i in keep] for key, values in previous.items()}
    for key, values in new.items():
        merged.setdefault(key, [None] * len(keep))
        merged[key] = merged[key] + list(values)
    return merged


class EpochHistory(keras.callbacks.Callback):
    """Collects each epoch's logs and, where `write` is given (the chief),
    writes the merged history at every epoch end, so a stopped run keeps the
    epochs it finished (a resume drops those past its checkpoint and trains
    them again)."""

    def __init__(
        self,
        previous: dict[str, list],
        start: DataPosition,
        step: int,
        write: Callable[[dict[str, list]], None] | None = None,
    ):
        super().__init__()
        self.previous, self.start, self.step = previous, start, step
        self.write = write
        self.epochs: dict[str, list] = {}

    def merged(self) -> dict[str, list]:
        """The stored epochs up to the resumed step, then this call's."""
        return merge_history(self.previous, self.epochs, self.start, self.step)

    def on_epoch_end(self, epoch, logs=None):
        for key, value in (logs or {}).items():
            self.epochs.setdefault(key, []).append(float(value))
        self.epochs.setdefault("epoch", []).append(epoch + 1)
        if self.write is not None:
            self.write(self.merged())


def write_training_curve(run: RunDirectory, history: dict[str, list]) -> None:
    """The run's `training_curve.png` (loss and dev BLEU by step), when
    matplotlib is installed (plotting is optional)."""
    try:
        from keras_transformer.plots import training_curves
    except ImportError:
        return
    run.write_curve(training_curves(history, run.dev_bleu_entries() or None))
