"""Training callbacks, all counting one thing: optimizer updates.

`UpdateClock` turns Keras's batch callbacks into the paper's step_num: with
gradient accumulation over k batches, update u ends with batch u * k. Every
other callback here reads the clock, so `--max-steps`, `--checkpoint-every`,
`--eval-every`, checkpoint names and the "trained N steps" line all count
the same updates. The clock must come first in the callback list.
"""

from __future__ import annotations

import functools
import math
import signal
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import keras
import numpy as np

from keras_transformer.run.checkpoints import variable_value
from keras_transformer.run.directory import append_json_line
from keras_transformer.utils.console import EXIT_INTERRUPTED


class TrainingInterrupted(RuntimeError):
    """SIGTERM or Ctrl-C stopped training after saving a checkpoint."""

    def __init__(self, signal_name: str, step: int, run_dir: Path):
        self.step = step
        super().__init__(
            f"{signal_name}: saved a checkpoint at step {step} in {run_dir} and "
            f"stopped (exit status {EXIT_INTERRUPTED}). Run the same command "
            "again to resume exactly where it stopped."
        )


class TrainingDiverged(RuntimeError):
    """The training loss became NaN or infinite.

    `run_kept` False: the run had no checkpoint yet, and the trainer removed
    it (see `training.train`), so the corrected command starts afresh.
    """

    def __init__(self, step: int, value: float, *, run_kept: bool = True):
        self.step = step
        self.value = value
        if run_kept:
            outcome = (
                "training stopped without saving that step, and the last good "
                "checkpoint is kept. Lower --learning-rate-scale or raise the "
                "warmup, then resume."
            )
        else:
            outcome = (
                "training stopped before its first checkpoint, so the run was "
                "removed. Lower --learning-rate-scale or raise the warmup, then "
                "run again."
            )
        super().__init__(f"the training loss became {value} at step {step}; {outcome}")


class UpdateClock(keras.callbacks.Callback):
    """Counts optimizer updates (steps) and batches since the run began.

    Args:
        accumulation_steps: batches per update (k).
        initial_step: updates already done (a resumed run).
    """

    def __init__(self, accumulation_steps: int = 1, initial_step: int = 0):
        super().__init__()
        self.accumulation_steps = accumulation_steps
        self.initial_step = initial_step
        self.batches = 0  # Batches seen by this process's fit calls.
        self._epoch_start = 0

    @property
    def step(self) -> int:
        """Updates completed so far."""
        return self.initial_step + self.batches // self.accumulation_steps

    @property
    def at_update_boundary(self) -> bool:
        """True when the last batch completed an update."""
        return self.batches % self.accumulation_steps == 0

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch_start = self.batches

    def on_train_batch_end(self, batch, logs=None):
        # `batch` is the last batch index of this epoch that has run (with
        # steps_per_execution > 1 Keras reports only every n-th batch).
        self.batches = self._epoch_start + batch + 1

    def on_epoch_end(self, epoch, logs=None):
        # Keras's History (called after this) then records the step too.
        if logs is not None:
            logs["step"] = self.step


class _EveryNSteps:
    """Fires once each time the clock's step passes a multiple of `every`."""

    def __init__(self, every: int):
        self.every = every
        self.fired = None

    def due(self, clock: UpdateClock) -> bool:
        if not self.every or not clock.at_update_boundary:
            return False
        mark = clock.step // self.every
        if self.fired is None:
            self.fired = clock.initial_step // self.every
        if mark > self.fired:
            self.fired = mark
            return True
        return False


class StepCheckpoints(keras.callbacks.Callback):
    """Call `save(model)` every `every` updates (0: never), and at the update
    where a callback before this one stopped training (`--max-steps`,
    `--max-minutes`): saved there, inside the epoch, the checkpoint holds
    the epoch's running metrics, which the epoch-end validation resets. On
    JAX, `self.model` first syncs the trained state back into the model's
    variables."""

    def __init__(
        self,
        clock: UpdateClock,
        save: Callable[[keras.Model], object],
        *,
        every: int,
    ):
        super().__init__()
        self.clock = clock
        self.save = save
        self._every = _EveryNSteps(every)

    def on_train_batch_end(self, batch, logs=None):
        # `_model`: reading `model` would sync JAX's state every batch.
        stopping = self._model.stop_training and self.clock.at_update_boundary
        if self._every.due(self.clock) or stopping:
            self.save(self.model)


class RestoreEpochMetrics(keras.callbacks.Callback):
    """Put back the running metrics of a resumed, partly trained epoch.

    `fit` resets the metrics when an epoch begins; a run resumed in the
    middle of one would then report only the batches after the resume
    point. `states` are the values of `model.metrics_variables` saved with
    the checkpoint: the sums and counts of `Mean` metrics (every metric a
    `Transformer` is compiled with), which add. They are added to the
    metrics after the first batch of the resumed epoch, when they exist
    (TensorFlow builds them in the first step); x + y == y + x in floating
    point, so the sums are those of an uninterrupted run.
    """

    def __init__(self, states: Sequence[Sequence[float]]):
        super().__init__()
        self.states = states

    def on_train_batch_end(self, batch, logs=None):
        if self.states is None:
            return
        variables = self.model.metrics_variables  # Syncs JAX's state.
        if len(variables) != len(self.states):
            raise ValueError(
                f"the checkpoint holds {len(self.states)} metric states for a "
                f"model with {len(variables)} metric variables"
            )
        for variable, state in zip(variables, self.states):
            saved = np.asarray(state).astype(variable.dtype)
            variable.assign(variable_value(variable) + saved)
        self.states = None


class TrainingLimit(keras.callbacks.Callback):
    """Stop after `max_steps` updates (counted from the run's start) or
    `max_minutes` of training wall time in this process."""

    def __init__(
        self,
        clock: UpdateClock,
        *,
        max_steps: int | None = None,
        max_minutes: float | None = None,
    ):
        super().__init__()
        self.clock = clock
        self.max_steps = max_steps
        self.max_seconds = None if max_minutes is None else 60.0 * max_minutes
        self.started = None

    def on_train_begin(self, logs=None):
        if self.started is None:  # A resumed run calls fit more than once.
            self.started = time.monotonic()

    def on_train_batch_end(self, batch, logs=None):
        if not self.clock.at_update_boundary:
            return
        if self.reached_max_steps() or self.out_of_time():
            self.model.stop_training = True

    def reached_max_steps(self) -> bool:
        return self.max_steps is not None and self.clock.step >= self.max_steps

    def out_of_time(self) -> bool:
        return self.max_seconds is not None and (
            self.elapsed_seconds() >= self.max_seconds
        )

    def elapsed_seconds(self) -> float:
        return 0.0 if self.started is None else time.monotonic() - self.started


class StopOnNonFiniteLoss(keras.callbacks.Callback):
    """Raise `TrainingDiverged` naming the step as soon as `loss` is NaN or
    Inf. Raising (rather than `stop_training`) skips `on_train_end`, so
    nothing saves the diverged weights."""

    def __init__(self, clock: UpdateClock):
        super().__init__()
        self.clock = clock

    def on_train_batch_end(self, batch, logs=None):
        value = float(keras.ops.convert_to_numpy((logs or {}).get("loss", 0.0)))
        if not math.isfinite(value):
            # The update in progress (or just completed) holds the batch.
            k = self.clock.accumulation_steps
            step = self.clock.initial_step + math.ceil(self.clock.batches / k)
            raise TrainingDiverged(step, value)


class GracefulInterrupt(keras.callbacks.Callback):
    """SIGTERM or Ctrl-C (SIGINT): finish the update in progress, save a
    checkpoint, stop training. `interrupted` then says why fit returned.

    A second Ctrl-C interrupts at once (Python's KeyboardInterrupt). The
    handlers are installed for the callback's lifetime in `fit` and the
    previous ones restored after it.
    """

    SIGNALS = (signal.SIGTERM, signal.SIGINT)

    def __init__(self, clock: UpdateClock, save: Callable[[keras.Model], object]):
        super().__init__()
        self.clock = clock
        self.save = save
        self.interrupted: str | None = None
        self._previous: dict = {}

    def _handle(self, signum, frame):
        if self.interrupted and signum == signal.SIGINT:
            raise KeyboardInterrupt
        self.interrupted = signal.Signals(signum).name

    def install(self) -> None:
        for signum in self.SIGNALS:
            self._previous[signum] = signal.signal(signum, self._handle)

    def uninstall(self) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous = {}

    def on_train_batch_end(self, batch, logs=None):
        if self.interrupted and self.clock.at_update_boundary:
            self.save(self.model)
            self.model.stop_training = True


class DevBleu(keras.callbacks.Callback):
    """Every `every` updates, translate a small fixed dev subset, log its
    sacreBLEU, and print a few sample translations.

    Each entry also records `train_seconds`: wall-clock time since this
    callback's first `fit` began, less the time spent in these evaluations
    (time to quality), and `eval_seconds`, the evaluation's own time.
    `extra_scores(hypotheses)` adds the task's own figures to each entry
    (the parsing task's dev F1).
    """

    def __init__(
        self,
        clock: UpdateClock,
        translate,
        sources: Sequence[str],
        references: Sequence[str],
        *,
        every: int,
        samples: int = 3,
        log_path: str | Path | None = None,
        log: Callable[[dict], object] | None = None,
        extra_scores: Callable[[list[str]], dict[str, float]] | None = None,
    ):
        super().__init__()
        self.extra_scores = extra_scores
        self.clock = clock
        self.translate = translate
        self.sources = list(sources)
        self.references = list(references)
        self._every = _EveryNSteps(every)
        self.samples = samples
        if log is None and log_path is not None:
            log = functools.partial(append_json_line, Path(log_path))
        self.log = log
        self.history: list[dict] = []
        self._started: float | None = None
        self._evaluating = 0.0

    def on_train_begin(self, logs=None):
        if self._started is None:
            self._started = time.monotonic()

    def on_train_batch_end(self, batch, logs=None):
        if self._every.due(self.clock):
            self.evaluate()

    def evaluate(self) -> float:
        from keras_transformer.decoding.evaluation import corpus_scores

        # Reading `self.model` syncs the trained weights back into the
        # variables on JAX, which fit otherwise does only per epoch.
        began = time.monotonic()
        self.model.trainable_variables  # noqa: B018
        hypotheses = self.translate(self.sources)
        result = corpus_scores(hypotheses, self.references)
        seconds = time.monotonic() - began
        started = began if self._started is None else self._started
        entry = {
            "step": self.clock.step,
            "dev_bleu": result.bleu,
            "dev_chrf": result.chrf,
            **(self.extra_scores(hypotheses) if self.extra_scores else {}),
            "train_seconds": round(began - started - self._evaluating, 2),
            "eval_seconds": round(seconds, 3),  # A fast one is a few ms.
        }
        self._evaluating += seconds
        self.history.append(entry)
        extra = {
            key: value
            for key, value in entry.items()
            if key not in ("step", "dev_bleu", "dev_chrf")
            and not key.endswith("_seconds")
        }
        shown = "".join(f", {key} {value}" for key, value in extra.items())
        print(f"\n[step {self.clock.step}] dev subset: {result}{shown}")
        for source, hypothesis, reference in list(
            zip(self.sources, hypotheses, self.references)
        )[: self.samples]:
            print(f"  src: {source}\n  hyp: {hypothesis}\n  ref: {reference}")
        if self.log is not None:
            self.log(entry)
        return result.bleu
