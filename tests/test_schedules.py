"""TransformerSchedule and transformer_optimizer (§5.3); FineTuneSchedule."""

from __future__ import annotations

import math

import keras
import numpy as np
import pytest

from keras_transformer.schedules import (
    FineTuneSchedule,
    TransformerSchedule,
    transformer_optimizer,
)


def closed_form(step, d_model, warmup, scale=1.0):
    """The paper's formula at n = step + 1 (optimizer iteration i is step i+1)."""
    n = step + 1
    return scale * d_model**-0.5 * min(n**-0.5, n * warmup**-1.5)


def value(schedule, step):
    return float(keras.ops.convert_to_numpy(schedule(step)))


D_MODEL, WARMUP = 16, 50
STEPS = [0, 1, 2, 99, WARMUP - 2, WARMUP - 1, WARMUP, 10 * WARMUP, 123_456]


# JAX without x64 truncates int64 to int32 and says so; harmless here.
@pytest.mark.filterwarnings("ignore:Explicitly requested dtype int64")
@pytest.mark.parametrize("scale", [1.0, 2.5])
@pytest.mark.parametrize("dtype", ["int32", "int64", "float32"])
def test_values_match_closed_form(dtype, scale):
    schedule = TransformerSchedule(D_MODEL, warmup_steps=WARMUP, scale=scale)
    for step in STEPS:
        got = value(schedule, keras.ops.convert_to_tensor(step, dtype=dtype))
        expected = closed_form(step, D_MODEL, WARMUP, scale)
        assert got == pytest.approx(expected, rel=1e-5), (dtype, step)


def test_python_int_step_and_numpy_step():
    schedule = TransformerSchedule(D_MODEL, warmup_steps=WARMUP)
    assert value(schedule, 7) == pytest.approx(closed_form(7, D_MODEL, WARMUP))
    assert value(schedule, np.int64(7)) == pytest.approx(
        closed_form(7, D_MODEL, WARMUP)
    )


@pytest.mark.filterwarnings("ignore:Explicitly requested dtype int64")
def test_finite_and_positive_at_step_zero():
    schedule = TransformerSchedule(512, warmup_steps=4000)
    lr = value(schedule, keras.ops.convert_to_tensor(0, dtype="int64"))
    assert math.isfinite(lr)
    assert lr > 0
    assert lr == pytest.approx(512**-0.5 * 4000**-1.5, rel=1e-5)


def test_warmup_is_linear_then_inverse_sqrt_decay():
    schedule = TransformerSchedule(D_MODEL, warmup_steps=WARMUP)
    values = [value(schedule, step) for step in range(3 * WARMUP)]
    rising, falling = values[:WARMUP], values[WARMUP - 1 :]
    assert all(b > a for a, b in zip(rising, rising[1:], strict=False))
    assert all(b < a for a, b in zip(falling, falling[1:], strict=False))
    # Linear warmup: value(i) = (i + 1) * value(0).
    np.testing.assert_allclose(
        rising, [(i + 1) * values[0] for i in range(WARMUP)], rtol=1e-5
    )


@pytest.mark.parametrize("d_model, warmup, scale", [(16, 50, 1.0), (512, 4000, 2.0)])
def test_peak_is_value_at_end_of_warmup(d_model, warmup, scale):
    schedule = TransformerSchedule(d_model, warmup_steps=warmup, scale=scale)
    assert schedule.peak() == pytest.approx(value(schedule, warmup - 1), rel=1e-5)
    assert schedule.peak() == pytest.approx(
        closed_form(warmup - 1, d_model, warmup, scale), rel=1e-12
    )
    # Nothing is higher than the peak.
    for step in (0, warmup - 2, warmup, 2 * warmup):
        assert value(schedule, step) <= schedule.peak() * (1 + 1e-6)


@pytest.mark.parametrize(
    "kwargs, name",
    [
        (dict(d_model=0), "d_model"),
        (dict(d_model=-4), "d_model"),
        (dict(d_model=16.0), "d_model"),
        (dict(d_model=True), "d_model"),
        (dict(d_model=16, warmup_steps=0), "warmup_steps"),
        (dict(d_model=16, warmup_steps=2.5), "warmup_steps"),
        (dict(d_model=16, scale=0.0), "scale"),
        (dict(d_model=16, scale=-1.0), "scale"),
    ],
)
def test_constructor_errors_name_the_argument(kwargs, name):
    with pytest.raises(ValueError, match=name):
        TransformerSchedule(**kwargs)


def test_get_config_round_trip():
    schedule = TransformerSchedule(64, warmup_steps=300, scale=2)
    config = schedule.get_config()
    assert config == {"d_model": 64, "warmup_steps": 300, "scale": 2.0}
    clone = TransformerSchedule.from_config(config)
    assert clone.get_config() == config
    for step in (0, 299, 1000):
        assert value(clone, step) == value(schedule, step)
    restored = keras.saving.deserialize_keras_object(
        keras.saving.serialize_keras_object(schedule)
    )
    assert isinstance(restored, TransformerSchedule)
    assert restored.get_config() == config


def test_transformer_optimizer_hyperparameters():
    schedule = TransformerSchedule(D_MODEL, warmup_steps=WARMUP)
    optimizer = transformer_optimizer(schedule, clipnorm=1.5)
    assert isinstance(optimizer, keras.optimizers.Adam)
    assert optimizer.beta_1 == pytest.approx(0.9)
    assert optimizer.beta_2 == pytest.approx(0.98)
    assert optimizer.epsilon == pytest.approx(1e-9)
    assert optimizer.global_clipnorm == pytest.approx(1.5)
    assert optimizer._learning_rate is schedule


def test_schedule_survives_keras_save_and_load(tmp_path):
    schedule = TransformerSchedule(16, warmup_steps=10, scale=3.0)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    model.compile(optimizer=transformer_optimizer(schedule), loss="mse")
    x = np.arange(12, dtype="float32").reshape(4, 3)
    y = np.ones((4, 2), "float32")
    model.fit(x, y, batch_size=2, epochs=1, verbose=0, shuffle=False)
    assert int(keras.ops.convert_to_numpy(model.optimizer.iterations)) == 2

    path = tmp_path / "model.keras"
    model.save(path)
    loaded = keras.saving.load_model(path)

    loaded_schedule = loaded.optimizer._learning_rate
    assert isinstance(loaded_schedule, TransformerSchedule)
    assert loaded_schedule.get_config() == schedule.get_config()
    assert int(keras.ops.convert_to_numpy(loaded.optimizer.iterations)) == 2
    lr = float(keras.ops.convert_to_numpy(loaded.optimizer.learning_rate))
    assert lr == pytest.approx(closed_form(2, 16, 10, 3.0), rel=1e-5)
    # Training goes on from the restored iteration count.
    loaded.fit(x, y, batch_size=2, epochs=1, verbose=0, shuffle=False)
    lr = float(keras.ops.convert_to_numpy(loaded.optimizer.learning_rate))
    assert lr == pytest.approx(closed_form(4, 16, 10, 3.0), rel=1e-5)


class _RecordLearningRate(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.rates, self.iterations, self.kernels = [], [], []

    def on_train_batch_end(self, batch, logs=None):
        optimizer = self.model.optimizer
        self.rates.append(float(keras.ops.convert_to_numpy(optimizer.learning_rate)))
        self.iterations.append(int(keras.ops.convert_to_numpy(optimizer.iterations)))
        self.kernels.append(
            float(keras.ops.convert_to_numpy(self.model.weights[0])[0, 0])
        )


def test_learning_rate_changes_during_fit():
    """The compiled train step (jit on JAX, tf.function on TF) uses the
    schedule at the current iteration, not a value frozen at trace time."""
    schedule = TransformerSchedule(16, warmup_steps=100)
    model = keras.Sequential([keras.Input((1,)), keras.layers.Dense(1, use_bias=False)])
    # d loss / d w = x = 1 at every step, so Adam moves w by ~lr each step
    # (bias-corrected moments of a constant gradient are exactly 1).
    model.compile(
        optimizer=transformer_optimizer(schedule),
        loss=lambda y_true, y_pred: keras.ops.mean(y_pred),
    )
    initial = float(keras.ops.convert_to_numpy(model.weights[0])[0, 0])
    record = _RecordLearningRate()
    x = np.ones((5, 1), "float32")
    model.fit(
        x, x, batch_size=1, epochs=1, verbose=0, shuffle=False, callbacks=[record]
    )

    assert record.iterations == [1, 2, 3, 4, 5]
    assert all(b > a for a, b in zip(record.rates, record.rates[1:], strict=False))
    np.testing.assert_allclose(
        record.rates, [closed_form(i, 16, 100) for i in range(1, 6)], rtol=1e-5
    )
    # The update of step k used the rate at iteration k - 1.
    kernels = [initial, *record.kernels]
    moves = [a - b for a, b in zip(kernels, kernels[1:], strict=False)]
    np.testing.assert_allclose(
        moves, [closed_form(i, 16, 100) for i in range(5)], rtol=1e-3
    )


# --- FineTuneSchedule ---------------------------------------------------------


def fine_tune_closed_form(step, peak, warmup, total=None):
    """Linear warmup to `peak` at update `warmup`, then linear decay to
    peak / (total + 1 - warmup) at update `total` and 0 after (update =
    step + 1); constant without `total`."""
    update = step + 1
    if update < warmup:
        return peak * update / warmup
    if total is None:
        return peak
    return peak * max(total + 1 - update, 0) / (total + 1 - warmup)


FINE_TUNE_STEPS = [0, 1, 8, 9, 10, 50, 98, 99, 100, 150]


@pytest.mark.parametrize("total", [None, 100])
def test_fine_tune_schedule_matches_its_closed_form(total):
    schedule = FineTuneSchedule(3e-4, warmup_steps=10, total_steps=total)
    for step in FINE_TUNE_STEPS:
        expected = fine_tune_closed_form(step, 3e-4, 10, total)
        assert value(schedule, step) == pytest.approx(expected, rel=1e-5, abs=1e-12)
    assert value(schedule, 9) == pytest.approx(schedule.peak()) == 3e-4
    if total is not None:  # The last update still moves; none after it.
        assert value(schedule, total - 1) > 0 and value(schedule, total) == 0


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        (dict(peak=0.0, warmup_steps=5), "peak"),
        (dict(peak="1e-3", warmup_steps=5), "peak"),
        (dict(peak=1e-3, warmup_steps=0), "warmup_steps"),
        (dict(peak=1e-3, warmup_steps=2.5), "warmup_steps"),
        (dict(peak=1e-3, warmup_steps=5, total_steps=4), "total_steps"),
        (dict(peak=1e-3, warmup_steps=5, total_steps=True), "total_steps"),
    ],
)
def test_fine_tune_schedule_errors_name_the_argument(kwargs, name):
    with pytest.raises(ValueError, match=name):
        FineTuneSchedule(**kwargs)


def test_fine_tune_schedule_round_trips_through_a_keras_file(tmp_path):
    schedule = FineTuneSchedule(1e-3, warmup_steps=2, total_steps=20)
    assert schedule.get_config() == {"peak": 1e-3, "warmup_steps": 2, "total_steps": 20}
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    model.compile(optimizer=transformer_optimizer(schedule), loss="mse")
    x, y = np.ones((4, 3), "float32"), np.ones((4, 2), "float32")
    model.fit(x, y, batch_size=2, epochs=1, verbose=0)
    model.save(tmp_path / "model.keras")
    loaded = keras.saving.load_model(tmp_path / "model.keras")
    restored = loaded.optimizer._learning_rate
    assert isinstance(restored, FineTuneSchedule)
    assert restored.get_config() == schedule.get_config()
    rate = float(keras.ops.convert_to_numpy(loaded.optimizer.learning_rate))
    assert rate == pytest.approx(fine_tune_closed_form(2, 1e-3, 2, 20), rel=1e-5)
