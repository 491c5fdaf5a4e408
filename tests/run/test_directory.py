"""`RunDirectory`: a model from your own `model.fit` becomes a run directory
(`save_model`); the new/resume/overwrite decision and its refusals; the
lock held by a running `train`; the run's writes."""

from __future__ import annotations

import errno
import json
import os
import shutil

import numpy as np
import pytest

from keras_transformer.data.token_store import FORMAT
from keras_transformer.data.tokenizer import train_tokenizer
from keras_transformer.model import build_transformer
from keras_transformer.run.directory import (
    RunBusy,
    RunConflict,
    RunDirectory,
    RunWriteError,
    identity_conflicts,
)
from keras_transformer.utils.user_cache import user_cache_root
from tests.helpers import make_corpus, small_config, to_numpy
from tests.run.locking import run_directory_locked_by_child

# Marked backend_neutral (the torch suite alone): the tests that do no Keras
# computation at all (the manifest's identity, the new/resume/overwrite
# decision, moving a run aside, the lock, removing partial files); a model's
# round trip through a run directory stays on every backend.
no_keras = pytest.mark.backend_neutral


@pytest.fixture(scope="module")
def tokenizer():
    return train_tokenizer(make_corpus(), 300)


def test_saved_model_loads_back_with_its_tokenizer(tokenizer, tmp_path):
    # One layer each: the round trip does not depend on depth, and JAX runs
    # this model op by op (it was 11 s of the JAX suite with two).
    model = build_transformer(
        small_config(
            vocab_size=tokenizer.vocab_size, num_encoder_layers=1, num_decoder_layers=1
        )
    )
    run = RunDirectory(tmp_path / "run")
    run.save_model(model, tokenizer)
    assert run.load_config() == model.config
    assert run.load_tokenizer().encode(["the dog"]) == tokenizer.encode(["the dog"])
    inputs = {"source_ids": np.array([[5, 6, 7]]), "target_ids": np.array([[2, 9]])}
    np.testing.assert_allclose(
        to_numpy(run.load_model()(inputs)), to_numpy(model(inputs)), atol=1e-6
    )
    with pytest.raises(FileExistsError, match="already exists"):
        run.save_model(model, tokenizer)


def test_tokenizer_of_another_size_is_refused(tokenizer, tmp_path):
    model = build_transformer(small_config(vocab_size=tokenizer.vocab_size + 1))
    run = RunDirectory(tmp_path / "run")
    with pytest.raises(ValueError, match="vocab_size"):
        run.save_model(model, tokenizer)
    assert not run.path.exists()


# --- check, identity_conflicts, set_aside ------------------------------------------

IDENTITY = {"preset": "tiny", "seed": 0, "data": {"name": "builtin", "size": 10}}


def created(tmp_path, identity=IDENTITY) -> RunDirectory:
    run = RunDirectory(tmp_path / "run")
    run.create(identity, options={})
    return run


@no_keras
def test_identity_conflicts_name_each_setting_with_both_values():
    requested = {"preset": "small", "seed": 0, "data": {"name": "builtin", "size": 9}}
    assert identity_conflicts(IDENTITY, requested) == [
        "data.size: stored 10, requested 9",
        "preset: stored 'tiny', requested 'small'",
    ]
    assert identity_conflicts(IDENTITY, dict(IDENTITY)) == []
    assert identity_conflicts({"a": 1}, {"b": 2}) == [
        "a: stored 1, requested None",
        "b: stored None, requested 2",
    ]


@no_keras
def test_check_decides_new_resume_or_overwrite(tmp_path):
    absent = RunDirectory(tmp_path / "absent")
    assert absent.check(IDENTITY) == "new"
    (tmp_path / "empty").mkdir()
    assert RunDirectory(tmp_path / "empty").check(IDENTITY) == "new"
    run = created(tmp_path)
    assert run.check(IDENTITY) == "resume"
    assert run.check({**IDENTITY, "seed": 1}, overwrite=True) == "overwrite"


@no_keras
def test_check_refuses_another_run_and_changes_nothing(tmp_path):
    run = created(tmp_path)
    before = run.manifest_path.read_bytes()
    with pytest.raises(RunConflict, match="seed: stored 0, requested 1"):
        run.check({**IDENTITY, "seed": 1})
    assert run.manifest_path.read_bytes() == before
    assert sorted(p.name for p in run.path.iterdir()) == ["manifest.json"]


@no_keras
def test_check_refuses_a_directory_without_manifest_or_with_a_broken_one(tmp_path):
    run = RunDirectory(tmp_path / "run")
    run.path.mkdir()
    (run.path / "notes.txt").write_text("mine")
    with pytest.raises(RunConflict, match="has no manifest.json"):
        run.check(IDENTITY)
    run.manifest_path.write_text("{not json")
    with pytest.raises(RunConflict, match="manifest.json: unreadable"):
        run.check(IDENTITY)


@no_keras
def test_set_aside_moves_the_whole_run_under_a_new_name_each_time(tmp_path):
    run = created(tmp_path)
    first = run.set_aside()
    assert not run.path.exists()
    assert first.name.startswith("run.backup-") and (first / "manifest.json").exists()
    created(tmp_path)
    second = run.set_aside()  # The same second: a suffix keeps both.
    assert second != first and second.exists() and first.exists()


# --- the lock --------------------------------------------------------------------


@no_keras
def test_a_second_process_is_refused_naming_the_holders_pid(tmp_path):
    run = RunDirectory(tmp_path / "run")
    with run_directory_locked_by_child(run.path) as child:
        with pytest.raises(
            RunBusy, match=f"in use by another training process \\(pid {child.pid} on "
        ):
            run.lock()
        assert not run.path.exists()  # The lock lives beside the run.
    with run.lock():  # The child's exit released it.
        assert run.lock_path.read_text().startswith(f"pid {os.getpid()} ")


@no_keras
def test_a_killed_holder_releases_the_lock(tmp_path):
    run = RunDirectory(tmp_path / "run")
    with run_directory_locked_by_child(run.path) as child:
        child.kill()
        child.wait(timeout=60)
        run.lock().release()


@no_keras
def test_the_lock_guards_the_name_across_overwrite(tmp_path):
    # Beside the directory: moving the run aside does not move the lock.
    run = created(tmp_path)
    with run.lock():
        run.set_aside()
        with pytest.raises(RunBusy):
            RunDirectory(tmp_path / "run").lock()


@no_keras
def test_train_into_a_locked_run_directory_is_refused_before_any_work(tmp_path):
    from keras_transformer.training import TrainOptions, train

    run_dir = tmp_path / "run"
    with run_directory_locked_by_child(run_dir) as child:
        with pytest.raises(RunBusy, match=f"pid {child.pid} "):
            train(TrainOptions(run_dir=str(run_dir)))
    assert not run_dir.exists()


# --- writes ----------------------------------------------------------------------


@no_keras
def test_discard_new_run_leaves_the_directory_as_it_was(tmp_path):
    absent = created(tmp_path)
    (absent.tokenizer_dir).mkdir()
    absent.discard_new_run(existed=False)
    assert not absent.path.exists()
    run = created(tmp_path)
    run.discard_new_run(existed=True)
    assert run.path.is_dir() and not any(run.path.iterdir())


@no_keras
def test_remove_partials_takes_only_temporary_files(tmp_path):
    run = created(tmp_path)
    run.checkpoint_dir.mkdir()
    run.tokenizer_dir.mkdir()
    leftovers = [
        run.checkpoint_dir / ".ckpt-00000004.partial.keras",
        run.checkpoint_dir / ".ckpt-00000004.partial.json",
        run.path / ".model.partial.keras",
        run.tokenizer_dir / ".sentencepiece.partial.model",
    ]
    keep = [run.checkpoint_dir / "ckpt-00000004.keras", run.manifest_path]
    for path in leftovers + keep[:1]:
        path.write_bytes(b"x")
    assert sorted(run.remove_partials()) == sorted(leftovers)
    assert all(path.exists() for path in keep)


def test_final_model_is_written_atomically(tokenizer, tmp_path, monkeypatch):
    model = build_transformer(small_config(vocab_size=tokenizer.vocab_size))
    run = RunDirectory(tmp_path / "run")
    run.path.mkdir()

    def killed_mid_save(path, *args, **kwargs):
        with open(path, "wb") as f:
            f.write(b"PK\x03\x04 half")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(model, "save", killed_mid_save)
    with pytest.raises(RunWriteError, match=r"final model .*model.keras at step 3"):
        run.save_final_model(model, step=3)
    assert list(run.path.iterdir()) == []


# --- a damaged tokenizer says where the same one can be restored from -----------


def run_of_store(tmp_path, tokenizer, store_name="store:{store}"):
    """A run whose manifest records a store, and that store (its manifest's
    fingerprint and tokenizer are what a run's tokenizer is restored from)."""
    store = tmp_path / "store"
    tokenizer.save(store / "tokenizer")
    fingerprint = "5" * 64
    manifest = {"format": FORMAT, "fingerprint": fingerprint}
    (store / "manifest.json").write_text(json.dumps(manifest))
    run = RunDirectory(tmp_path / "run")
    data = {"name": store_name.format(store=store), "fingerprint": fingerprint}
    run.create({"data": data}, {})
    model = build_transformer(small_config(vocab_size=tokenizer.vocab_size))
    run.save_model(model, tokenizer)
    return run, store


@pytest.mark.parametrize("damage", ["missing", "truncated"])
def test_a_damaged_run_tokenizer_names_the_file_and_the_store_holding_it(
    tokenizer, tmp_path, damage
):
    run, store = run_of_store(tmp_path, tokenizer)
    model_file = run.tokenizer_dir / "sentencepiece.model"
    if damage == "missing":
        model_file.unlink()
    else:
        model_file.write_bytes(model_file.read_bytes()[:100])
    with pytest.raises(ValueError) as info:
        run.open_for_inference()
    message = str(info.value)
    assert str(model_file) in message
    assert ("is missing" if damage == "missing" else "truncated or damaged") in message
    assert f"copy {store / 'tokenizer'} to {run.tokenizer_dir}" in message


def test_a_missing_tokenizer_directory_names_the_store_too(tokenizer, tmp_path):
    run, store = run_of_store(tmp_path, tokenizer)
    shutil.rmtree(run.tokenizer_dir)
    with pytest.raises(FileNotFoundError, match="the run has no tokenizer") as info:
        run.open_for_inference()
    assert f"copy {store / 'tokenizer'}" in str(info.value)


def test_a_store_not_on_this_machine_is_said_so(tokenizer, tmp_path):
    run, store = run_of_store(tmp_path, tokenizer)
    shutil.rmtree(store)
    (run.tokenizer_dir / "sentencepiece.model").unlink()
    with pytest.raises(ValueError, match="which is not on this machine: prepare"):
        run.load_tokenizer()


def test_a_store_in_the_cache_is_found_by_its_fingerprint(tokenizer, tmp_path):
    # A run trained on text: its store is in the cache, named by its key.
    cached = user_cache_root() / "stores" / "test-fingerprint-lookup"
    run, store = run_of_store(tmp_path, tokenizer, store_name="builtin")
    shutil.rmtree(cached, ignore_errors=True)
    shutil.move(store, cached)
    try:
        (run.tokenizer_dir / "sentencepiece.model").unlink()
        with pytest.raises(ValueError, match=f"copy {cached / 'tokenizer'}"):
            run.load_tokenizer()
    finally:
        shutil.rmtree(cached, ignore_errors=True)
