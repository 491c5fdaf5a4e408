"""Training callbacks: one update clock, checkpoints, limits, NaN, signals."""

from __future__ import annotations

import json
import os
import signal
import time

import keras
import numpy as np
import pytest

from keras_transformer.training.callbacks import (
    DevBleu,
    GracefulInterrupt,
    RestoreEpochMetrics,
    StepCheckpoints,
    StopOnNonFiniteLoss,
    TrainingDiverged,
    TrainingLimit,
    UpdateClock,
)

# TensorFlow runs these fits eagerly (but with steps_per_execution, which
# needs a traced step): each model's `fit` would otherwise trace its train
# step, ~0.5 s for this one layer on two cores. The callbacks see the same
# batches, logs and optimizer; the traced step under these callbacks is
# tests/training/test_job.py's, on every backend.
EAGER = keras.backend.backend() == "tensorflow"


def tiny_model(accumulation_steps=None, steps_per_execution=1):
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    model.compile(
        optimizer=keras.optimizers.Adam(
            1e-3, gradient_accumulation_steps=accumulation_steps
        ),
        loss="mse",
        steps_per_execution=steps_per_execution,
        run_eagerly=EAGER and steps_per_execution == 1,
    )
    return model


def data(rows):
    x = np.arange(rows * 3, dtype="float32").reshape(rows, 3) / 10.0
    return x, np.ones((rows, 2), "float32")


def iterations(model):
    return int(keras.ops.convert_to_numpy(model.optimizer.iterations))


class StepRecorder(keras.callbacks.Callback):
    """Records clock.step after every batch that completed an update."""

    def __init__(self, clock):
        super().__init__()
        self.clock = clock
        self.steps = []

    def on_train_batch_end(self, batch, logs=None):
        if self.clock.at_update_boundary:
            self.steps.append(self.clock.step)


# --- UpdateClock -------------------------------------------------------------------


@pytest.mark.parametrize("accumulation", [1, 2, 3])
def test_clock_counts_optimizer_updates(accumulation):
    model = tiny_model(accumulation if accumulation > 1 else None)
    clock = UpdateClock(accumulation)
    recorder = StepRecorder(clock)
    x, y = data(24)  # 12 batches of 2 per epoch.
    model.fit(x, y, batch_size=2, epochs=2, verbose=0, callbacks=[clock, recorder])
    updates = 24 // accumulation
    assert clock.batches == 24
    assert clock.step == updates == iterations(model)
    assert recorder.steps == list(range(1, updates + 1))


@pytest.mark.skipif(
    keras.backend.backend() == "torch",
    reason="Keras 3.15's torch trainer refuses steps_per_execution > 1",
)
def test_clock_with_steps_per_execution_and_initial_step():
    model = tiny_model(steps_per_execution=3)
    clock = UpdateClock(1, initial_step=100)
    x, y = data(12)
    model.fit(x, y, batch_size=2, epochs=2, verbose=0, callbacks=[clock])
    assert clock.batches == 12
    assert clock.step == 112


# --- StepCheckpoints -----------------------------------------------------------------


@pytest.mark.parametrize("accumulation,every", [(1, 3), (2, 2), (3, 1)])
def test_checkpoints_fire_every_n_updates(accumulation, every):
    model = tiny_model(accumulation if accumulation > 1 else None)
    clock = UpdateClock(accumulation)
    saved = []
    callback = StepCheckpoints(
        clock, lambda m: saved.append((clock.step, iterations(m))), every=every
    )
    x, y = data(36)  # 18 batches.
    model.fit(x, y, batch_size=2, epochs=1, verbose=0, callbacks=[clock, callback])
    updates = 18 // accumulation
    expected = list(range(every, updates + 1, every))
    # Named by the update, and the optimizer agrees: no two saves per name.
    assert [step for step, _ in saved] == expected
    assert [it for _, it in saved] == expected


def test_checkpoints_every_zero_never_fire():
    model = tiny_model()
    clock = UpdateClock()
    saved = []
    callback = StepCheckpoints(clock, saved.append, every=0)
    x, y = data(8)
    model.fit(x, y, batch_size=2, epochs=2, verbose=0, callbacks=[clock, callback])
    assert saved == []


def test_checkpoints_of_a_resumed_run_continue_its_schedule():
    model = tiny_model()
    clock = UpdateClock(initial_step=7)  # Last saved at 6 (every 3).
    saved = []
    callback = StepCheckpoints(clock, lambda m: saved.append(clock.step), every=3)
    x, y = data(10)
    model.fit(x, y, batch_size=2, epochs=1, verbose=0, callbacks=[clock, callback])
    assert saved == [9, 12]


# --- TrainingLimit ---------------------------------------------------------------


def test_training_limit_counts_updates_with_accumulation():
    model = tiny_model(accumulation_steps=2)
    clock = UpdateClock(2)
    limit = TrainingLimit(clock, max_steps=5)
    x, y = data(16)  # 8 batches = 4 updates per epoch: the limit is in epoch 2.
    history = model.fit(
        x, y, batch_size=2, epochs=10, verbose=0, callbacks=[clock, limit]
    )
    assert clock.step == 5 == iterations(model)
    assert clock.batches == 10
    assert len(history.history["loss"]) == 2
    assert limit.reached_max_steps()


def test_training_limit_of_a_resumed_run_counts_from_the_start():
    model = tiny_model()
    clock = UpdateClock(initial_step=4)
    limit = TrainingLimit(clock, max_steps=6)
    x, y = data(20)
    model.fit(x, y, batch_size=2, epochs=1, verbose=0, callbacks=[clock, limit])
    assert iterations(model) == 2


def test_training_limit_max_minutes_zero_stops_after_one_step():
    model = tiny_model()
    clock = UpdateClock()
    limit = TrainingLimit(clock, max_minutes=0)
    assert limit.elapsed_seconds() == 0.0
    x, y = data(8)
    model.fit(x, y, batch_size=2, epochs=3, verbose=0, callbacks=[clock, limit])
    assert iterations(model) == 1
    assert limit.elapsed_seconds() > 0.0


def test_training_limit_without_limits_runs_everything():
    model = tiny_model()
    clock = UpdateClock()
    limit = TrainingLimit(clock)
    x, y = data(4)
    model.fit(x, y, batch_size=2, epochs=3, verbose=0, callbacks=[clock, limit])
    assert iterations(model) == 6


# --- StopOnNonFiniteLoss -------------------------------------------------------------


class PoisonAt(keras.callbacks.Callback):
    """Sets the Dense kernel to Inf before batch `index` (0-based)."""

    def __init__(self, index):
        super().__init__()
        self.index = index
        self.seen = 0

    def on_train_batch_begin(self, batch, logs=None):
        if self.seen == self.index:
            kernel = self.model.layers[0].kernel
            kernel.assign(np.full(kernel.shape, np.inf, "float32"))
        self.seen += 1


@pytest.mark.parametrize("accumulation,poisoned,step", [(1, 4, 5), (2, 4, 3)])
def test_non_finite_loss_raises_naming_the_step(accumulation, poisoned, step):
    model = tiny_model(accumulation if accumulation > 1 else None)
    clock = UpdateClock(accumulation)
    ended = []
    ends = keras.callbacks.LambdaCallback(on_train_end=lambda logs: ended.append(1))
    callbacks = [clock, StopOnNonFiniteLoss(clock), PoisonAt(poisoned), ends]
    x, y = data(16)
    with pytest.raises(TrainingDiverged, match=f"at step {step};") as error:
        model.fit(x, y, batch_size=2, epochs=1, verbose=0, callbacks=callbacks)
    assert error.value.step == step
    assert not ended  # on_train_end (and any final save) never ran.


# --- GracefulInterrupt ---------------------------------------------------------------


class SignalAt(keras.callbacks.Callback):
    def __init__(self, index, signum):
        super().__init__()
        self.index, self.signum, self.seen = index, signum, 0

    def on_train_batch_end(self, batch, logs=None):
        if self.seen == self.index:
            os.kill(os.getpid(), self.signum)
        self.seen += 1


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_signal_finishes_the_update_saves_and_stops(signum):
    model = tiny_model(accumulation_steps=2)
    clock = UpdateClock(2)
    saved = []
    interrupt = GracefulInterrupt(clock, lambda m: saved.append(clock.step))
    previous = signal.getsignal(signum)
    interrupt.install()
    try:
        x, y = data(40)
        # The signal arrives after batch 5, inside update 3 (batches 5-6).
        callbacks = [clock, interrupt, SignalAt(4, signum)]
        model.fit(x, y, batch_size=2, epochs=5, verbose=0, callbacks=callbacks)
    finally:
        interrupt.uninstall()
    assert interrupt.interrupted == signal.Signals(signum).name
    assert saved == [3]
    assert clock.batches == 6 and iterations(model) == 3
    assert signal.getsignal(signum) == previous


def test_dev_bleu_logs_scores_and_training_time_without_evaluations(tmp_path):
    references = ["a b c d", "e f g h"]
    hypotheses = iter([["a b c d", "x y z w"], ["a b c d", "e f g h"]])
    evaluation_pause = 0.3

    def translate(sources):
        assert sources == ["s1", "s2"]
        time.sleep(evaluation_pause)
        return next(hypotheses)

    clock = UpdateClock()
    log = tmp_path / "dev_bleu.jsonl"
    dev_bleu = DevBleu(
        clock, translate, ["s1", "s2"], references, every=2, log_path=log
    )
    model = tiny_model()
    started = time.monotonic()
    model.fit(*data(4), batch_size=1, epochs=1, verbose=0, callbacks=[clock, dev_bleu])
    wall = time.monotonic() - started
    entries = [json.loads(line) for line in log.read_text().splitlines()]
    assert [e["step"] for e in entries] == [2, 4]
    assert entries[0]["dev_bleu"] < entries[1]["dev_bleu"] == pytest.approx(100.0)
    assert all(e["eval_seconds"] >= evaluation_pause for e in entries)
    # The second entry's training time leaves out the first evaluation.
    assert 0 <= entries[0]["train_seconds"] <= entries[1]["train_seconds"]
    assert entries[1]["train_seconds"] <= wall - 2 * evaluation_pause + 0.01
    assert dev_bleu.history == entries


def test_checkpoints_save_the_update_where_a_limit_stops_training():
    model = tiny_model()
    clock = UpdateClock()
    saved = []
    limit = TrainingLimit(clock, max_steps=5)
    checkpoints = StepCheckpoints(clock, lambda m: saved.append(clock.step), every=4)
    x, y = data(20)
    model.fit(
        x, y, batch_size=2, epochs=1, verbose=0, callbacks=[clock, limit, checkpoints]
    )
    assert saved == [4, 5]


def test_restored_epoch_metrics_make_a_split_epoch_report_the_whole():
    from keras_transformer.run.checkpoints import metric_states

    def compiled():
        keras.utils.set_random_seed(3)
        model = tiny_model()
        model.compile(optimizer="adam", loss="mse", metrics=["mae"], run_eagerly=EAGER)
        return model

    x, y = data(12)
    x = x * np.arange(12)[:, None]  # Batches of different losses.
    whole = compiled().fit(x, y, batch_size=2, shuffle=False, verbose=0)
    split = compiled()
    split.fit(x[:6], y[:6], batch_size=2, shuffle=False, verbose=0)
    states = metric_states(split)  # Without validation, fit leaves them.
    rest = split.fit(
        x[6:],
        y[6:],
        batch_size=2,
        shuffle=False,
        verbose=0,
        callbacks=[RestoreEpochMetrics(states)],
    )
    for key in ("loss", "mae"):
        np.testing.assert_allclose(
            rest.history[key], whole.history[key], rtol=1e-6, err_msg=key
        )


def test_divergence_before_any_checkpoint_says_the_run_was_removed():
    error = TrainingDiverged(3, float("nan"), run_kept=False)
    assert "at step 3;" in str(error) and "the run was removed" in str(error)
    assert "resume" not in str(error)
