"""A prepared store's checks: what `open_store` (and so `train`) refuses,
each with a message naming the file and what was expected."""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pytest

from keras_transformer import training
from keras_transformer.data import digests
from keras_transformer.data.datasets import DatasetSpec
from keras_transformer.data.prepare import prepare_store
from keras_transformer.data.store_options import PrepareOptions, with_store_settings
from keras_transformer.data.token_store import (
    FORMAT_VERSION,
    StoreError,
    open_store,
    store_fingerprint,
    token_dtype,
)
from keras_transformer.training.options import TrainOptions
from tests.helpers import write_training_corpus

pytestmark = pytest.mark.backend_neutral


def quiet(_message):
    pass


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """A store and the files it was made from, prepared once; each test
    works on a copy."""
    files = write_training_corpus(tmp_path_factory.mktemp("corpus"))
    out = tmp_path_factory.mktemp("stores") / "store"
    options = PrepareOptions(
        out=str(out),
        data=DatasetSpec(name="files", files=files),
        vocab_size=400,
        max_length=32,
        workers=1,
    )
    prepare_store(options, log=quiet)
    return out, files


@pytest.fixture
def store_dir(made, tmp_path):
    copy = tmp_path / "store"
    shutil.copytree(made[0], copy)
    return copy


def test_an_intact_store_opens_and_maps_its_files(store_dir):
    store = open_store(store_dir, verify=True)
    pairs = store.pairs()
    report = store.filter_report()
    assert len(pairs) == store.manifest["splits"]["train"]["pairs"] == report["kept"]
    assert report["kept"] + len(report["too_long_lines"]) == 240
    assert isinstance(pairs.tokens["source"], np.memmap)
    assert store.fingerprint == store_fingerprint(store.manifest)
    assert store.settings["vocab_size"] == store.vocab_size == 400
    assert token_dtype(400) == "uint16" and token_dtype(70_000) == "int32"


def rewrite_manifest(store_dir, change):
    path = store_dir / "manifest.json"
    manifest = json.loads(path.read_text())
    change(manifest)
    path.write_text(json.dumps(manifest))


def test_another_format_version_is_refused(store_dir):
    rewrite_manifest(store_dir, lambda m: m.update(format_version=FORMAT_VERSION + 1))
    with pytest.raises(StoreError) as error:
        open_store(store_dir)
    message = str(error.value)
    assert (
        str(store_dir) in message and f"format version {FORMAT_VERSION + 1}" in message
    )
    assert f"reads format version {FORMAT_VERSION}" in message


def test_not_a_store_is_refused_naming_the_manifest(tmp_path):
    with pytest.raises(StoreError, match=r"manifest\.json is missing"):
        open_store(tmp_path)
    (tmp_path / "manifest.json").write_text("{not json")
    with pytest.raises(StoreError, match="unreadable"):
        open_store(tmp_path)


@pytest.mark.parametrize(
    "change, missing",
    [
        (lambda m: m.pop("tokenizer"), "tokenizer"),
        (lambda m: m["splits"]["train"]["tokens"].pop("source"), "train.tokens.source"),
        (lambda m: m["splits"]["valid"].update(pairs="12"), "splits.valid.pairs"),
        (lambda m: m["splits"]["train"].pop("filter"), "splits.train.filter"),
        (
            lambda m: m["splits"]["valid"]["files"].pop("valid.target.index"),
            "splits.valid.files.valid.target.index",
        ),
    ],
)
def test_a_manifest_without_a_field_is_refused_naming_it(store_dir, change, missing):
    rewrite_manifest(store_dir, change)
    with pytest.raises(StoreError) as error:
        open_store(store_dir)
    message = str(error.value)
    assert f"{store_dir / 'manifest.json'} is damaged: it lacks " in message
    assert missing in message


def test_another_tokenizer_is_refused(store_dir, made, tmp_path):
    # A store of another vocabulary lends its tokenizer.
    other = tmp_path / "other"
    options = PrepareOptions(
        out=str(other),
        data=DatasetSpec(name="files", files=made[1]),
        vocab_size=420,
        max_length=32,
        workers=1,
    )
    prepare_store(options, log=quiet)
    shutil.rmtree(store_dir / "tokenizer")
    shutil.copytree(other / "tokenizer", store_dir / "tokenizer")
    with pytest.raises(StoreError) as error:
        open_store(store_dir)
    message = str(error.value)
    assert str(store_dir / "tokenizer") in message
    assert "not the tokenizer the ids" in message


def test_a_truncated_file_is_refused_naming_it_and_both_sizes(store_dir):
    path = store_dir / "train.target.tokens"
    size = path.stat().st_size
    with open(path, "r+b") as handle:
        handle.truncate(size - 6)
    with pytest.raises(StoreError) as error:
        open_store(store_dir)
    message = str(error.value)
    assert f"{path} is truncated" in message
    assert f"{size - 6:,} bytes, the manifest says {size:,}" in message


@pytest.mark.parametrize(
    "position, value, expected",
    [
        (40, -5, "offset 40 is -5, the one before "),
        (41, 10**9, "offset 41 is 1000000000, the one before "),
        (0, 3, "offset 0 is 3, the one before 0"),
        (-1, 1, "is 1, the one before "),  # The last: steps back.
    ],
)
def test_a_damaged_index_is_refused_naming_it_and_the_offset(
    store_dir, position, value, expected
):
    path = store_dir / "train.source.index"
    offsets = np.fromfile(path, "<i8")
    offsets[position] = value
    offsets.tofile(path)
    with pytest.raises(StoreError) as error:
        open_store(store_dir)
    message = str(error.value)
    assert f"{path} is damaged" in message and expected in message


def test_an_index_damaged_within_the_rising_rule_is_found_by_its_digest(store_dir):
    path = store_dir / "train.target.index"
    offsets = np.fromfile(path, "<i8")
    moved = offsets[5] + 1 if offsets[5] + 1 < offsets[6] else offsets[5] - 1
    assert offsets[4] < moved < offsets[6]  # Still rising: pairs 4 and 5 resized.
    offsets[5] = moved
    offsets.tofile(path)
    expected = r"train\.target\.index is damaged: its offsets"
    with pytest.raises(StoreError, match=expected):
        open_store(store_dir)


@pytest.mark.parametrize("verify", [False, True])
def test_a_token_file_damaged_in_place_is_refused_when_opened(store_dir, verify):
    # The same size: `train` trained on it (and failed deep in a batch, or
    # silently when the ids stayed within the vocabulary).
    path = store_dir / "train.source.tokens"
    open_store(store_dir)  # Its digests are now remembered.
    ids = np.fromfile(path, "<u2")
    ids[7], ids[len(ids) // 2 :] = 60_000, 5
    ids.tofile(path)
    with pytest.raises(StoreError, match=r"train\.source\.tokens is damaged: its SHA"):
        open_store(store_dir, verify=verify)


def test_a_token_file_damaged_after_opening_is_found_by_a_batch(store_dir):
    pairs = open_store(store_dir).pairs()
    path = store_dir / "train.source.tokens"
    ids = np.fromfile(path, "<u2")
    ids[7] = 60_000  # Past the vocabulary: no embedding row.
    ids.tofile(path)
    with pytest.raises(ValueError, match=r"train\.source\.tokens is damaged: pair"):
        pairs.gather("source", np.arange(len(pairs)))


def test_an_opened_store_is_not_hashed_again(store_dir, monkeypatch):
    open_store(store_dir)
    hashed = []
    monkeypatch.setattr(
        digests, "sha256_file", lambda path: hashed.append(path) or "0" * 64
    )
    open_store(store_dir)
    assert hashed == []  # A stat per file.


def test_an_edited_manifest_entry_is_refused(store_dir):
    # A tokenizer swapped together with its manifest entry: the ids are the
    # old tokenizer's, the model would be built for the new one.
    manifest_path = store_dir / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["tokenizer"]["vocab_size"] += 100
    manifest["tokenizer"]["sha256"] = "1" * 64
    manifest_path.write_text(json.dumps(manifest))
    with pytest.raises(StoreError, match=r"manifest\.json was edited"):
        open_store(store_dir)


def test_a_source_changed_after_the_store_was_made_is_refused(store_dir, made):
    source = made[1]["train"][0]
    original = open(source, "rb").read()
    try:
        with open(source, "wb") as handle:  # The same size, other text.
            handle.write(original.replace(b"The", b"Tha", 1))
        with pytest.raises(StoreError) as error:
            open_store(store_dir)
        message = str(error.value)
        assert f"{source} changed after the store {store_dir}" in message
        assert "Prepare it again" in message
        options = TrainOptions(data=DatasetSpec(name=f"store:{store_dir}"))
        with pytest.raises(StoreError, match="changed after the store"):
            training.prepare_training_store(options)
        os.utime(source)  # Touched: a new time, the same bytes...
    finally:
        with open(source, "wb") as handle:
            handle.write(original)
    assert open_store(store_dir).pairs()  # ...are not a change.


def test_train_on_a_store_takes_its_settings_and_refuses_others(store_dir):
    store = training.prepare_training_store(
        TrainOptions(data=DatasetSpec(name=f"store:{store_dir}"))
    )
    resolved = with_store_settings(TrainOptions(), store)
    assert (resolved.vocab_size, resolved.max_length) == (400, 32)
    for flag, changes in (
        ("--vocab-size 300", dict(vocab_size=300)),
        ("--max-length 64", dict(max_length=64)),
        ("--tokenizer wordpiece", dict(tokenizer="wordpiece")),
    ):
        options = TrainOptions(data=DatasetSpec(name=f"store:{store_dir}"), **changes)
        with pytest.raises(ValueError) as error:
            training.prepare_training_store(options)
        assert f"{flag}: the store {store_dir} was prepared with" in str(error.value)


def test_a_manifest_vocabulary_size_that_is_not_the_tokenizers_is_refused(store_dir):
    manifest_path = store_dir / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["tokenizer"]["vocab_size"] += 100  # Not in the fingerprint.
    manifest_path.write_text(json.dumps(manifest))
    with pytest.raises(StoreError, match="pieces, but .*manifest.json says"):
        open_store(store_dir).tokenizer()


def test_train_on_a_store_of_another_tokenizer_takes_it_without_a_flag(made, tmp_path):
    # train's --tokenizer defaults to the task's; a store that another kind
    # made is not a conflict unless --tokenizer names another.
    out = tmp_path / "words-store"
    prepare_store(
        PrepareOptions(
            out=str(out),
            data=DatasetSpec(name="files", files=made[1]),
            tokenizer="words",
            vocab_size=400,
            max_length=32,
            workers=1,
        ),
        log=quiet,
    )
    options = TrainOptions(data=DatasetSpec(name=f"store:{out}"))
    store = training.prepare_training_store(options)
    assert with_store_settings(options, store).tokenizer == "words"
    refused = TrainOptions(data=DatasetSpec(name=f"store:{out}"), tokenizer="wordpiece")
    with pytest.raises(ValueError, match="--tokenizer wordpiece: the store"):
        training.prepare_training_store(refused)
