"""Step checkpoints: atomic writes, exact restore, fallback past damage."""

from __future__ import annotations

import errno
import json
import os
import shutil

import keras
import numpy as np
import pytest

from keras_transformer import (
    LabelSmoothedCrossEntropy,
    TransformerSchedule,
    build_transformer,
    transformer_optimizer,
)
from keras_transformer.data.pipeline import DataPosition
from keras_transformer.run.checkpoints import (
    RunWriteError,
    list_checkpoints,
    prune_checkpoints,
    remove_partials,
    restore_latest,
    restore_random_state,
    save_checkpoint,
)
from tests.helpers import small_config

pytestmark = pytest.mark.usefixtures("keras_state")

RUN = "run-a"


def compiled_model(seed=0):
    """One encoder and one decoder layer, with dropout: what a checkpoint
    holds and restores does not depend on depth. TensorFlow runs the steps
    eagerly: tracing a train step costs ~10 s on two cores, once for the
    original and again for each fresh model a test restores into (the
    traced step's checkpoints and exact resume are checked on every backend
    by tests/training/test_job.py). JAX compiles, once per model."""
    keras.utils.set_random_seed(seed)
    config = small_config(dropout_rate=0.3, num_encoder_layers=1, num_decoder_layers=1)
    model = build_transformer(config)
    model.compile(
        optimizer=transformer_optimizer(TransformerSchedule(32, 10)),
        loss=LabelSmoothedCrossEntropy(),
        run_eagerly=keras.backend.backend() == "tensorflow",
    )
    return model


def batch(seed):
    rng = np.random.default_rng(seed)
    ids = rng.integers(4, 50, (4, 7)).astype("int32")
    return {"source_ids": ids, "target_ids": ids[:, ::-1].copy()}, ids


def train_steps(model, steps, start=0):
    for step in range(start, start + steps):
        model.train_on_batch(*batch(step))


def numpy_state(model):
    weights = [keras.ops.convert_to_numpy(v) for v in model.variables]
    optimizer = [keras.ops.convert_to_numpy(v) for v in model.optimizer.variables]
    return weights, optimizer


def assert_state(model, expected):
    for got, want in zip(numpy_state(model), expected, strict=True):
        assert len(got) == len(want)
        for x, y in zip(got, want):
            np.testing.assert_array_equal(x, y)


@pytest.fixture(scope="module")
def original(tmp_path_factory):
    """Checkpoints of one model at steps 2 and 4, with its state at each
    (built once; each test works on a copy of the directory)."""
    directory = tmp_path_factory.mktemp("original")
    keras.config.set_dtype_policy("float32")
    model = compiled_model()
    states = {}
    for step, position in ((2, DataPosition(0, 2)), (4, DataPosition(1, 0))):
        train_steps(model, 2, start=step - 2)
        save_checkpoint(model, directory, step=step, run_id=RUN, position=position)
        states[step] = numpy_state(model)
    return directory, model, states


@pytest.fixture
def saved(original, tmp_path):
    directory, model, states = original
    copy = tmp_path / "checkpoints"
    shutil.copytree(directory, copy)
    return copy, model, states


def test_files_and_metadata(saved):
    directory, _, _ = saved
    names = sorted(p.name for p in directory.iterdir())
    assert names == [
        "ckpt-00000002.json",
        "ckpt-00000002.keras",
        "ckpt-00000004.json",
        "ckpt-00000004.keras",
    ]  # No temporary files left behind.
    meta = json.loads((directory / "ckpt-00000004.json").read_text())
    assert meta["step"] == 4 and meta["optimizer_iterations"] == 4
    assert meta["run_id"] == RUN
    assert meta["position"] == {"epoch": 1, "index": 0}
    assert len(meta["seed_states"]) > 0  # Dropout seed generators.
    assert meta["size"] == (directory / "ckpt-00000004.keras").stat().st_size
    # The model file alone loads (for translate / average / export).
    loaded = keras.saving.load_model(directory / "ckpt-00000004.keras")
    assert int(keras.ops.convert_to_numpy(loaded.optimizer.iterations)) == 4


def test_restore_is_exact_including_dropout_rng(saved):
    directory, model, states = saved
    fresh = compiled_model(seed=99)
    restored = restore_latest(fresh, directory, RUN)
    assert restored.step == 4 and restored.position == DataPosition(1, 0)
    assert_state(fresh, states[4])
    # Training on from both gives identical weights: dropout masks agree.
    train_steps(fresh, 2, start=4)
    # On torch dropout draws from the process's generators, which the
    # original's process held at the checkpoint (restored there with it).
    restore_random_state(restored)
    train_steps(model, 2, start=4)
    assert_state(fresh, numpy_state(model))


@pytest.mark.skipif(keras.backend.backend() != "torch", reason="torch's generators")
def test_a_gpu_random_state_that_cannot_be_restored_is_said(saved):
    import dataclasses

    import torch

    directory, _, _ = saved
    restored = restore_latest(compiled_model(seed=99), directory, RUN)
    visible = torch.cuda.device_count() if torch.cuda.is_available() else 0
    state = {**restored.random_state, "torch_cuda": ["AAAA"] * (visible + 1)}
    other = dataclasses.replace(restored, random_state=state)
    with pytest.warns(UserWarning, match=rf"{visible + 1} CUDA device\(s\), {visible}"):
        restore_random_state(other)


def test_list_orders_by_recorded_step_and_skips_partial_files(saved):
    directory, model, _ = saved
    save_checkpoint(model, directory, step=10, run_id=RUN, position=DataPosition(2, 0))
    (directory / ".ckpt-00000011.partial.keras").write_bytes(b"half")
    (directory / "ckpt-00000012.keras").write_bytes(b"no metadata")
    assert [c.step for c in list_checkpoints(directory)] == [2, 4, 10]
    assert [c.step for c in list_checkpoints(directory, "other")] == []


def test_prune_keeps_the_newest(saved):
    directory, model, _ = saved
    save_checkpoint(model, directory, step=6, run_id=RUN, position=DataPosition())
    prune_checkpoints(directory, RUN, keep=2)
    assert [c.step for c in list_checkpoints(directory)] == [4, 6]
    assert not (directory / "ckpt-00000002.keras").exists()
    assert not (directory / "ckpt-00000002.json").exists()


def _truncate(directory):
    path = directory / "ckpt-00000004.keras"
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    return path


def _corrupt_metadata(directory):
    path = directory / "ckpt-00000004.json"
    path.write_text('{"step": 4, "run_id": ')
    return path


def _delete_weights(directory):
    path = directory / "ckpt-00000004.keras"
    path.unlink()
    return path


def _other_run(directory):
    path = directory / "ckpt-00000004.json"
    meta = json.loads(path.read_text())
    meta["run_id"] = "run-b"
    path.write_text(json.dumps(meta))
    return path


@pytest.mark.parametrize(
    "damage", [_truncate, _corrupt_metadata, _delete_weights, _other_run]
)
def test_damaged_newest_falls_back_to_the_previous(saved, damage):
    directory, _, states = saved
    damaged = damage(directory)
    fresh = compiled_model(seed=5)
    with pytest.warns(UserWarning, match="skipping checkpoint") as caught:
        restored = restore_latest(fresh, directory, RUN)
    assert str(damaged) in str(caught[0].message)
    assert restored.step == 2 and restored.position == DataPosition(0, 2)
    assert_state(fresh, states[2])


def test_no_usable_checkpoint_is_an_error_not_a_fresh_start(saved):
    directory, _, _ = saved
    for path in directory.glob("*.keras"):
        path.write_bytes(b"garbage")
    with pytest.warns(UserWarning):
        with pytest.raises(RuntimeError, match="no usable checkpoint"):
            restore_latest(compiled_model(), directory, RUN)


def test_empty_directory_restores_nothing(tmp_path):
    assert restore_latest(compiled_model(), tmp_path / "none", RUN) is None


def test_crash_during_save_keeps_the_previous_checkpoint(saved, monkeypatch):
    directory, model, _ = saved

    def crashing_save(path, *args, **kwargs):
        with open(path, "wb") as f:
            f.write(b"PK\x03\x04 truncated")
        raise OSError("disk full")

    monkeypatch.setattr(model, "save", crashing_save)
    with pytest.raises(OSError, match="disk full"):
        save_checkpoint(model, directory, step=6, run_id=RUN, position=DataPosition())
    assert [c.step for c in list_checkpoints(directory)] == [2, 4]
    assert not (directory / "ckpt-00000006.keras").exists()
    fresh = compiled_model(seed=3)
    assert restore_latest(fresh, directory, RUN).step == 4


def test_metric_states_are_saved_with_the_checkpoint(saved):
    directory, model, _ = saved
    sums = [[12.5], [3.0]]
    save_checkpoint(
        model, directory, step=6, run_id=RUN, position=DataPosition(1, 2), metrics=sums
    )
    assert list_checkpoints(directory)[-1].metric_states == sums
    # Checkpoints written before the field existed read as None.
    assert list_checkpoints(directory)[0].metric_states is None


def test_prune_removes_partial_files_of_a_killed_writer(saved):
    directory, _, _ = saved
    leftovers = [
        directory / ".ckpt-00000006.partial.keras",
        directory / ".ckpt-00000006.partial.json",
    ]
    for path in leftovers:
        path.write_bytes(b"half")
    prune_checkpoints(directory, RUN, keep=5)
    assert not any(path.exists() for path in leftovers)
    assert [c.step for c in list_checkpoints(directory)] == [2, 4]
    assert remove_partials(directory) == []


def _full_disk(path, *args, **kwargs):
    with open(path, "wb") as f:
        f.write(b"PK\x03\x04 half")
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_full_disk_names_the_file_and_step_and_leaves_nothing(saved, monkeypatch):
    directory, model, _ = saved
    monkeypatch.setattr(model, "save", _full_disk)
    with pytest.raises(RunWriteError) as error:
        save_checkpoint(model, directory, step=6, run_id=RUN, position=DataPosition())
    message = str(error.value)
    assert "ckpt-00000006.keras at step 6" in message and "disk is full" in message
    assert error.value.errno == errno.ENOSPC and error.value.step == 6
    assert sorted(p.name for p in directory.iterdir()) == [
        "ckpt-00000002.json",
        "ckpt-00000002.keras",
        "ckpt-00000004.json",
        "ckpt-00000004.keras",
    ]


def test_a_failed_metadata_write_removes_the_model_file(saved, monkeypatch):
    from keras_transformer.run import checkpoints

    directory, model, _ = saved

    def full(path, text):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(checkpoints, "atomic_write_text", full)
    with pytest.raises(RunWriteError, match=r"ckpt-00000006\.json at step 6"):
        save_checkpoint(model, directory, step=6, run_id=RUN, position=DataPosition())
    assert not (directory / "ckpt-00000006.keras").exists()
    assert [c.step for c in list_checkpoints(directory)] == [2, 4]
