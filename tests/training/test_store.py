"""The tokenizer a resumed run uses: its copy of the store's, checked whole."""

from __future__ import annotations

import types

import pytest

from keras_transformer.data.tokenizer import train_tokenizer
from keras_transformer.run.directory import RunConflict, RunDirectory
from keras_transformer.training.store import run_tokenizer
from tests.helpers import make_corpus


@pytest.fixture(scope="module")
def tokenizer():
    return train_tokenizer(make_corpus(), 300)


def store_and_run(tmp_path, tokenizer):
    store = types.SimpleNamespace(
        path=tmp_path / "store", tokenizer_dir=tmp_path / "store" / "tokenizer"
    )
    tokenizer.save(store.tokenizer_dir)
    run = RunDirectory(tmp_path / "run")
    tokenizer.save(run.tokenizer_dir)
    return store, run


def test_a_resumed_run_reuses_its_whole_copy(tokenizer, tmp_path):
    store, run = store_and_run(tmp_path, tokenizer)
    reused, is_new = run_tokenizer(run, store, resuming=True)
    assert not is_new and reused.encode(["the dog"]) == tokenizer.encode(["the dog"])


@pytest.mark.parametrize("damage", ["missing", "truncated"])
def test_a_damaged_copy_is_named_with_the_store_to_restore_it_from(
    tokenizer, tmp_path, damage
):
    # It was "not the tokenizer of the store (was one of them replaced?)".
    store, run = store_and_run(tmp_path, tokenizer)
    model_file = run.tokenizer_dir / "sentencepiece.model"
    if damage == "missing":
        model_file.unlink()
    else:
        model_file.write_bytes(model_file.read_bytes()[:100])
    with pytest.raises(RunConflict) as info:
        run_tokenizer(run, store, resuming=True)
    message = str(info.value)
    expected = "is missing" if damage == "missing" else "is 100 bytes, the store's"
    assert f"{model_file} {expected}" in message
    assert f"copy {store.tokenizer_dir} to {run.tokenizer_dir}" in message
