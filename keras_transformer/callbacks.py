"""Training callbacks: step checkpoints, time/step limits, dev-set BLEU."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Sequence
from pathlib import Path

import keras

CHECKPOINT_PATTERN = "ckpt-{step:07d}.keras"
_CHECKPOINT_NAME = re.compile(r"ckpt-(\d+)\.keras")


def list_checkpoints(directory: str | Path) -> list[Path]:
    """Step checkpoints in `directory`, oldest first (by step number; an
    unfinished `ckpt-*.partial.keras` is not a checkpoint)."""
    found = []
    for path in Path(directory).glob("ckpt-*.keras"):
        match = _CHECKPOINT_NAME.fullmatch(path.name)
        if match:
            found.append((int(match.group(1)), path))
    return [path for _, path in sorted(found)]


class StepCheckpoints(keras.callbacks.Callback):
    """Save the whole model (weights + optimizer) every `every` steps and at
    the end of training, keeping the last `keep` files."""

    def __init__(self, directory: str | Path, *, every: int, keep: int):
        super().__init__()
        self.directory = Path(directory)
        self.every = every
        self.keep = keep

    def _step(self) -> int:
        return int(keras.ops.convert_to_numpy(self.model.optimizer.iterations))

    def save(self) -> Path:
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self.directory / CHECKPOINT_PATTERN.format(step=self._step())
        # Write to a temporary name first: a crash mid-save must not leave a
        # truncated file that looks like the latest checkpoint.
        partial = path.with_suffix(".partial.keras")
        self.model.save(partial)
        partial.replace(path)
        for old in list_checkpoints(self.directory)[: -self.keep]:
            old.unlink()
        return path

    def on_train_begin(self, logs=None):
        self._batches = 0

    def on_train_batch_end(self, batch, logs=None):
        # Count here instead of reading optimizer.iterations every batch: a
        # read forces a device sync (and a state sync on JAX) per step.
        self._batches += 1
        if self.every and self._batches % self.every == 0:
            self.save()

    def on_train_end(self, logs=None):
        if not (self.directory / CHECKPOINT_PATTERN.format(step=self._step())).exists():
            self.save()


class TrainingLimit(keras.callbacks.Callback):
    """Stop after `max_steps` optimizer steps or `max_minutes` of wall time."""

    def __init__(
        self, *, max_steps: int | None = None, max_minutes: float | None = None
    ):
        super().__init__()
        self.max_steps = max_steps
        self.max_seconds = None if max_minutes is None else 60.0 * max_minutes
        self.started = None
        self.steps = 0

    def on_train_begin(self, logs=None):
        self.started = time.monotonic()

    def on_train_batch_end(self, batch, logs=None):
        self.steps += 1
        out_of_steps = self.max_steps is not None and self.steps >= self.max_steps
        elapsed = time.monotonic() - self.started
        out_of_time = self.max_seconds is not None and elapsed >= self.max_seconds
        if out_of_steps or out_of_time:
            self.model.stop_training = True

    def elapsed_seconds(self) -> float:
        return 0.0 if self.started is None else time.monotonic() - self.started


class DevBleu(keras.callbacks.Callback):
    """Every `every` steps, translate a small fixed dev subset, log its
    sacreBLEU, and print a few sample translations."""

    def __init__(
        self,
        translate,
        sources: Sequence[str],
        references: Sequence[str],
        *,
        every: int,
        samples: int = 3,
        log_path: str | Path | None = None,
    ):
        super().__init__()
        self.translate = translate
        self.sources = list(sources)
        self.references = list(references)
        self.every = every
        self.samples = samples
        self.log_path = None if log_path is None else Path(log_path)
        self.steps = 0
        self.history: list[dict] = []

    def on_train_batch_end(self, batch, logs=None):
        self.steps += 1
        if self.every and self.steps % self.every == 0:
            self.evaluate()

    def evaluate(self) -> float:
        from keras_transformer.evaluation import corpus_scores

        # Reading `self.model` syncs the trained weights back into the
        # variables on JAX, which fit otherwise does only per epoch.
        self.model.trainable_variables  # noqa: B018
        hypotheses = self.translate(self.sources)
        result = corpus_scores(hypotheses, self.references)
        entry = {"step": self.steps, "dev_bleu": result.bleu, "dev_chrf": result.chrf}
        self.history.append(entry)
        print(f"\n[step {self.steps}] dev subset: {result}")
        for source, hypothesis, reference in list(
            zip(self.sources, hypotheses, self.references)
        )[: self.samples]:
            print(f"  src: {source}\n  hyp: {hypothesis}\n  ref: {reference}")
        if self.log_path is not None:
            with open(self.log_path, "a", encoding="utf-8") as f:
                f.write(json.dumps(entry) + "\n")
        return result.bleu
