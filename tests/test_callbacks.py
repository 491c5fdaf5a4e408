"""Training callbacks: StepCheckpoints, list_checkpoints, TrainingLimit."""

from __future__ import annotations

import keras
import numpy as np
import pytest

from keras_transformer.callbacks import (
    CHECKPOINT_PATTERN,
    StepCheckpoints,
    TrainingLimit,
    list_checkpoints,
)


def tiny_model():
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    model.compile(optimizer=keras.optimizers.Adam(1e-3), loss="mse")
    return model


def data(rows):
    x = np.arange(rows * 3, dtype="float32").reshape(rows, 3) / 10.0
    return x, np.ones((rows, 2), "float32")


def iterations(model):
    return int(keras.ops.convert_to_numpy(model.optimizer.iterations))


def names(paths):
    return [path.name for path in paths]


# --- StepCheckpoints -----------------------------------------------------------


def test_keeps_last_k_and_writes_atomically(tmp_path):
    model = tiny_model()
    directory = tmp_path / "checkpoints"
    saved = []
    real_save = model.save

    def recording_save(path, *args, **kwargs):
        # Written under a temporary name, never over the final one.
        final = directory / CHECKPOINT_PATTERN.format(step=iterations(model))
        assert str(path).endswith(".partial.keras")
        assert not final.exists()
        saved.append(str(path))
        return real_save(path, *args, **kwargs)

    model.save = recording_save
    callback = StepCheckpoints(directory, every=1, keep=2)
    x, y = data(10)
    model.fit(x, y, batch_size=2, epochs=1, verbose=0, callbacks=[callback])

    assert iterations(model) == 5
    assert len(saved) == 5  # One per step; none more at the end.
    assert names(list_checkpoints(directory)) == [
        "ckpt-0000004.keras",
        "ckpt-0000005.keras",
    ]
    assert sorted(p.name for p in directory.iterdir()) == [
        "ckpt-0000004.keras",
        "ckpt-0000005.keras",
    ]
    loaded = keras.saving.load_model(directory / "ckpt-0000005.keras")
    assert iterations(loaded) == 5
    for a, b in zip(loaded.get_weights(), model.get_weights(), strict=True):
        np.testing.assert_array_equal(a, b)


def test_every_n_steps_and_final_save(tmp_path):
    model = tiny_model()
    callback = StepCheckpoints(tmp_path, every=3, keep=5)
    x, y = data(14)
    model.fit(x, y, batch_size=2, epochs=1, verbose=0, callbacks=[callback])
    assert iterations(model) == 7
    assert names(list_checkpoints(tmp_path)) == [
        "ckpt-0000003.keras",
        "ckpt-0000006.keras",
        "ckpt-0000007.keras",  # At the end of training.
    ]


def test_every_zero_saves_only_at_the_end(tmp_path):
    model = tiny_model()
    callback = StepCheckpoints(tmp_path / "new" / "dir", every=0, keep=3)
    x, y = data(6)
    model.fit(x, y, batch_size=2, epochs=2, verbose=0, callbacks=[callback])
    assert names(list_checkpoints(tmp_path / "new" / "dir")) == ["ckpt-0000006.keras"]


def test_interrupted_save_leaves_no_checkpoint_behind(tmp_path):
    model = tiny_model()
    x, y = data(4)
    model.fit(x, y, batch_size=2, epochs=1, verbose=0)
    callback = StepCheckpoints(tmp_path, every=1, keep=2)
    callback.set_model(model)
    first = callback.save()
    assert first.name == "ckpt-0000002.keras"

    model.fit(x, y, batch_size=2, epochs=1, verbose=0)

    def crashing_save(path, *args, **kwargs):
        with open(path, "wb") as f:
            f.write(b"PK\x03\x04 truncated")
        raise OSError("disk full")

    model.save = crashing_save
    with pytest.raises(OSError, match="disk full"):
        callback.save()
    assert (tmp_path / "ckpt-0000004.partial.keras").exists()
    assert not (tmp_path / "ckpt-0000004.keras").exists()
    # The truncated file is not taken for the latest checkpoint.
    assert list_checkpoints(tmp_path) == [first]


# --- list_checkpoints ------------------------------------------------------------


def test_list_checkpoints_order(tmp_path):
    for step in (120, 3, 45, 10_000_000, 9_999_999):
        (tmp_path / CHECKPOINT_PATTERN.format(step=step)).write_bytes(b"")
    for other in ("ckpt-0000050.partial.keras", "model.keras", "ckpt-notes.txt"):
        (tmp_path / other).write_bytes(b"")
    assert names(list_checkpoints(tmp_path)) == [
        "ckpt-0000003.keras",
        "ckpt-0000045.keras",
        "ckpt-0000120.keras",
        "ckpt-9999999.keras",
        "ckpt-10000000.keras",
    ]
    assert list_checkpoints(tmp_path / "missing") == []


# --- TrainingLimit ---------------------------------------------------------------


def test_training_limit_stops_after_max_steps():
    model = tiny_model()
    limit = TrainingLimit(max_steps=6)
    x, y = data(8)  # 4 steps per epoch: the limit falls inside epoch 2.
    history = model.fit(x, y, batch_size=2, epochs=10, verbose=0, callbacks=[limit])
    assert iterations(model) == 6
    assert limit.steps == 6
    assert len(history.history["loss"]) == 2


def test_training_limit_max_minutes_zero_stops_after_one_step():
    model = tiny_model()
    limit = TrainingLimit(max_minutes=0)
    assert limit.elapsed_seconds() == 0.0
    x, y = data(8)
    model.fit(x, y, batch_size=2, epochs=3, verbose=0, callbacks=[limit])
    assert iterations(model) == 1
    assert limit.elapsed_seconds() > 0.0


def test_training_limit_without_limits_runs_everything():
    model = tiny_model()
    limit = TrainingLimit()
    x, y = data(4)
    model.fit(x, y, batch_size=2, epochs=3, verbose=0, callbacks=[limit])
    assert iterations(model) == 6
