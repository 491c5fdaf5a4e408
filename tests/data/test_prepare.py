"""`prepare_store` and `keras-transformer prepare`: a corpus read once into a
token store; the store's round trip, its batches against the list path's,
reuse, and bad input found during the streaming passes."""

from __future__ import annotations

import dataclasses
import errno
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from keras_transformer import training
from keras_transformer.cli import main
from keras_transformer.data import digests, prepare, text_files, token_store
from keras_transformer.data import tokenizer as tokenizer_module
from keras_transformer.data.datasets import DatasetSpec
from keras_transformer.data.prepare import prepare_store
from keras_transformer.data.store_options import PrepareOptions
from keras_transformer.data.text_files import DataError, read_parallel_files
from keras_transformer.data.token_store import (
    StoreError,
    StoreWriteError,
    open_store,
)
from keras_transformer.data.tokenizer import train_tokenizer
from keras_transformer.run.directory import RunDirectory
from keras_transformer.training.options import TrainOptions
from tests.data.helpers import install_fake_tfds, write
from tests.helpers import write_training_corpus

pytestmark = pytest.mark.backend_neutral

MAX_LENGTH = 32


def noisy_corpus(directory):
    """The small training corpus with an empty pair, a blank source, an
    over-long pair and a CRLF line put in: (files, its source, its target)."""
    files = write_training_corpus(directory)
    source = read_parallel_files(*files["train"])
    lines = list(zip(source.source, source.target))
    lines[3] = ("", "")
    lines[10] = ("   ", "Ein Satz.")
    lines[20] = (" ".join(["word"] * 40), "kurz.")
    src = "".join(f"{s}\n" for s, _ in lines).replace("\n", "\r\n", 1)
    write(directory / "noisy.en", src.encode(), compress=True)
    write(directory / "noisy.de", "".join(f"{t}\n" for _, t in lines).encode())
    files["train"] = (str(directory / "noisy.en"), str(directory / "noisy.de"))
    return files, [s for s, _ in lines], [t for _, t in lines]


def options_for(files, out=None, **changes):
    values = dict(
        out=None if out is None else str(out),
        data=DatasetSpec(name="files", files=files),
        vocab_size=400,
        max_length=MAX_LENGTH,
        workers=1,
    )
    values.update(changes)
    return PrepareOptions(**values)


def quiet(_message):
    pass


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return noisy_corpus(tmp_path_factory.mktemp("corpus"))


@pytest.fixture(scope="module")
def store(corpus, tmp_path_factory):
    files, _, _ = corpus
    out = tmp_path_factory.mktemp("stores") / "noisy"
    return prepare_store(options_for(files, out), log=quiet)


def decoded(store, split="train"):
    """(source ids, target ids) of every pair, from the mapped files."""
    pairs = store.pairs(split)
    return [
        [
            np.asarray(pairs.tokens[side][a:b]).tolist()
            for a, b in zip(pairs.offsets[side][:-1], pairs.offsets[side][1:])
        ]
        for side in ("source", "target")
    ]


# --- the round trip and the batches -----------------------------------------------


def test_store_decodes_to_the_tokenized_corpus_pair_for_pair_with_lines(store, corpus):
    _, source, target = corpus
    tokenizer = store.tokenizer()
    lines = store.line_numbers("train")
    report = store.filter_report()
    # Lines 4 and 11 are empty on a side, line 21 (and a few others) long.
    assert report["empty_lines"] == [4, 11] and 21 in report["too_long_lines"]
    dropped = len(report["empty_lines"]) + len(report["too_long_lines"])
    assert len(lines) == report["kept"] == len(source) - dropped
    assert not {4, 11, 21} & set(lines.tolist())
    source_ids, target_ids = decoded(store)
    for index, line in enumerate(lines.tolist()):
        expected = (source[line - 1], target[line - 1])
        assert tokenizer.encode(list(expected)) == [
            source_ids[index],
            target_ids[index],
        ], line
        # SentencePiece is lossless: the ids give the line back.
        assert tokenizer.detokenize([source_ids[index]]) == [source[line - 1]]
    assert store.manifest["token_dtype"] == "uint16"
    assert store.pairs().tokens["source"].dtype == np.uint16


def test_evaluation_splits_keep_every_pair_and_their_text(store, corpus):
    files, _, _ = corpus
    valid = read_parallel_files(*files["valid"])
    text = store.eval_corpus("valid")
    assert (text.source, text.target) == (valid.source, valid.target)
    assert text.line_numbers == list(range(1, len(valid) + 1))
    source_ids, target_ids = decoded(store, "valid")
    tokenizer = store.tokenizer()
    assert source_ids == tokenizer.encode(valid.source)
    assert target_ids == tokenizer.encode(valid.target)
    assert store.eval_corpus("test") is None and "test" not in store.splits


def batch_arrays(batches):
    for index in range(len(batches)):
        inputs, labels, weights = batches[index]
        yield inputs["source_ids"], inputs["target_ids"], labels, weights


@pytest.mark.parametrize(
    "changes, plan",
    [
        (dict(seed=0), None),
        (dict(seed=5, accumulation_steps=3, tokens_per_batch=512), None),
        (dict(seed=2), training.DistributionPlan("x", 2, 1, 2)),
    ],
)
def test_store_batches_equal_the_list_paths(store, corpus, changes, plan):
    files, _, _ = corpus
    options = TrainOptions(
        data=DatasetSpec(name="files", files=files),
        vocab_size=400,
        max_length=MAX_LENGTH,
        **{"tokens_per_batch": 1024, **changes},
    )
    splits = {name: read_parallel_files(*files[name]) for name in ("train", "valid")}
    in_memory = training.prepare_batches(options, splits, store.tokenizer(), plan)
    mapped = training.store_batches(options, store, plan)
    assert len(mapped.train) > 3
    for which in ("train", "valid"):
        a, b = getattr(in_memory, which), getattr(mapped, which)
        assert len(a) == len(b)
        for _ in range(2):  # Two epochs: each re-planned.
            for got, expected in zip(batch_arrays(b), batch_arrays(a), strict=True):
                for x, y in zip(got, expected, strict=True):
                    assert x.dtype == y.dtype
                    np.testing.assert_array_equal(x, y)
            a.on_epoch_end()
            b.on_epoch_end()


def test_a_stores_pairs_pickle_as_their_path(store):
    import pickle

    pairs = store.pairs()
    data = pickle.dumps(pairs)
    assert len(data) < 1000  # The path, not the arrays.
    again = pickle.loads(data)
    members = np.arange(len(pairs))
    for side in ("source", "target"):
        np.testing.assert_array_equal(
            again.gather(side, members)[3], pairs.gather(side, members)[3]
        )


def test_pairs_unpickled_after_their_store_was_replaced_are_refused(
    store, corpus, tmp_path
):
    import pickle
    import shutil

    copy = shutil.copytree(store.path, tmp_path / "copy")
    data = pickle.dumps(open_store(copy).pairs())
    # What prepare --overwrite of other settings does: another whole store.
    files, _, _ = corpus
    other = prepare_store(
        options_for(files, tmp_path / "other", vocab_size=420), log=quiet
    )
    shutil.rmtree(copy)
    shutil.copytree(other.path, copy)
    with pytest.raises(StoreError, match=f"{copy} was replaced"):
        pickle.loads(data)


# --- the tokenizer's sample -----------------------------------------------------


def test_a_small_corpus_is_learned_whole_in_its_order_as_before(store, corpus):
    files, _, _ = corpus
    train = read_parallel_files(*files["train"])
    # What `train` learned its vocabulary from before stores: every
    # non-blank sentence, the sources then the targets.
    before = train_tokenizer(
        [text for text in train.source + train.target if text.strip()], 400
    )
    assert store.tokenizer().model_proto == before.model_proto
    options = TrainOptions(data=DatasetSpec(name="files", files=files), vocab_size=400)
    in_memory = training.prepare_tokenizer(options, {"train": train})
    assert in_memory.model_proto == before.model_proto


def test_a_treebank_store_and_train_in_memory_learn_the_targets_own_vocabulary(
    tmp_path,
):
    trees = tmp_path / "trees.mrg"
    trees.write_text(
        "( (S (NP (DT the) (NN dog)) (VP (VBD saw) (NP (NNP Anna))) (. .)) )\n"
        "( (S (NP (NNP Anna)) (VP (VBD left)) (. .)) )\n",
        encoding="utf-8",
    )
    data = DatasetSpec(name="treebank", files={"train": (str(trees),)})
    options = PrepareOptions(
        out=str(tmp_path / "store"), data=data, tokenizer="words", vocab_size=40
    )
    stored = prepare_store(options, log=lambda line: None).tokenizer()
    train = TrainOptions(task="parsing", data=data, vocab_size=40)
    in_memory = training.prepare_tokenizer(train, training.load_splits(train))
    # The targets' symbols first (the most frequent first), then the words.
    assert stored.target_vocabulary[4:] == [
        "(NP", ")NP", "(S", "(VP", "VBD", "NNP", ")VP", ".", ")S", "DT", "NN"
    ]  # fmt: skip
    assert stored.target_size == 15 and "dog" in stored.vocabulary[15:]
    assert in_memory.vocabulary == stored.vocabulary
    assert in_memory.target_size == stored.target_size


def test_prepare_samples_at_most_tokenizer_sample_sentences(
    corpus, tmp_path, monkeypatch
):
    files, _, _ = corpus
    seen = []
    real = tokenizer_module.train_tokenizer

    def spy(texts, *args, **kwargs):
        seen.append(list(texts))
        return real(texts, *args, **kwargs)

    monkeypatch.setattr(tokenizer_module, "train_tokenizer", spy)
    for number, seed in enumerate((0, 0, 1)):
        options = options_for(
            files, tmp_path / f"s{number}", tokenizer_sample=300, seed=seed
        )
        prepare_store(options, log=quiet)
    assert [len(texts) for texts in seen] == [300, 300, 300]
    assert seen[0] == seen[1] and seen[0] != seen[2]


# --- reuse, workers, the cache -------------------------------------------------------


def test_prepare_again_reuses_the_store_and_says_so(store, corpus):
    files, _, _ = corpus
    before = {p.name: p.stat().st_mtime_ns for p in store.path.iterdir()}
    messages = []
    again = prepare_store(options_for(files, store.path), log=messages.append)
    assert again.fingerprint == store.fingerprint
    assert any("reusing the prepared store" in m for m in messages), messages
    assert {p.name: p.stat().st_mtime_ns for p in store.path.iterdir()} == before


def test_a_store_found_by_content_says_which_files_it_was_made_from(
    store, corpus, tmp_path
):
    # Issue 50: it was logged under the other files' names, silently.
    files, _, _ = corpus
    renamed = {}
    for split, paths in files.items():
        renamed[split] = tuple(str(tmp_path / f"renamed-{Path(p).name}") for p in paths)
        for old, new in zip(paths, renamed[split]):
            shutil.copyfile(old, new)
    messages = []
    again = prepare_store(options_for(renamed, store.path), log=messages.append)
    assert again.fingerprint == store.fingerprint
    told = [m for m in messages if "split of this store was made from" in m]
    assert len(told) == len(files), messages
    train = next(m for m in told if m.startswith("the train split"))
    assert renamed["train"][0] in train and store.origin("train") in train
    messages.clear()
    prepare_store(options_for(files, store.path), log=messages.append)
    assert not any("was made from" in m for m in messages), messages


def test_two_workers_write_the_same_store_as_one(store, corpus, tmp_path, monkeypatch):
    files, _, _ = corpus
    pools = []
    real = prepare.EncoderPool

    def counted(*args, **kwargs):
        pools.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(prepare, "EncoderPool", counted)
    # Blocks of a few hundred bytes: many blocks, shared by the workers.
    monkeypatch.setattr(text_files, "_BLOCK_BYTES", 300)
    options = options_for(files, tmp_path / "two", workers=2)
    assert prepare_store(options, log=quiet).fingerprint == store.fingerprint
    assert len(pools) == 1 and pools[0][1] == 2
    pools.clear()
    monkeypatch.setattr(text_files, "_BLOCK_BYTES", 1 << 22)  # One block:
    prepare_store(options_for(files, tmp_path / "one", workers=2), log=quiet)
    assert pools == []  # encoded here, without starting workers.


def test_without_out_the_store_goes_to_the_cache_by_key(store, corpus):
    files, _, _ = corpus
    cached = prepare_store(options_for(files), log=quiet)
    assert cached.path == prepare.default_store_path(store.key)
    assert str(cached.path).startswith(os.environ["KERAS_TRANSFORMER_CACHE"])
    assert cached.fingerprint == store.fingerprint  # Same content, same print.


@pytest.mark.parametrize("out", ["file", "file/store"])
def test_an_out_that_is_or_lies_in_a_file_is_refused_naming_it(corpus, tmp_path, out):
    files, _, _ = corpus
    (tmp_path / "file").write_text("mine")
    with pytest.raises(StoreError) as error:
        prepare_store(options_for(files, tmp_path / out), log=quiet)
    within = "" if out == "file" else f" ({tmp_path / 'file'} is a file)"
    assert str(error.value).startswith(
        f"--out {tmp_path / out}: a store is a directory{within}; name a new"
    )
    assert (tmp_path / "file").read_text() == "mine"


def test_other_settings_into_the_same_out_are_refused_then_replaced(
    store, corpus, tmp_path
):
    files, _, _ = corpus
    out = tmp_path / "store"
    prepare_store(options_for(files, out), log=quiet)
    with pytest.raises(StoreError) as error:
        prepare_store(options_for(files, out, vocab_size=420), log=quiet)
    assert "vocab_size: stored 400, requested 420" in str(error.value)
    assert "--overwrite" in str(error.value)
    assert open_store(out).fingerprint == store.fingerprint  # Untouched.
    replaced = prepare_store(
        options_for(files, out, vocab_size=420, overwrite=True), log=quiet
    )
    assert replaced.vocab_size == 420 and replaced.path == out
    # Moved aside, as `train --overwrite` moves a run: nothing is lost.
    (backup,) = tmp_path.glob("store.backup-*")
    assert open_store(backup, check_sources=False).fingerprint == store.fingerprint
    other = tmp_path / "mine"
    other.mkdir()
    (other / "notes.txt").write_text("keep me")
    with pytest.raises(StoreError, match="holds no token store"):
        prepare_store(options_for(files, other, overwrite=True), log=quiet)
    assert (other / "notes.txt").read_text() == "keep me"


@pytest.mark.parametrize("overwrite", [False, True])
def test_a_training_run_is_never_replaced_by_a_store(corpus, tmp_path, overwrite):
    files, _, _ = corpus
    run_dir = tmp_path / "run"
    RunDirectory(run_dir).create({"preset": "tiny"}, {})
    (run_dir / "checkpoints").mkdir()
    (run_dir / "checkpoints" / "ckpt-40.keras").write_bytes(b"weights")
    (run_dir / "model.keras").write_bytes(b"model")
    before = sorted(p.relative_to(run_dir) for p in run_dir.rglob("*"))
    options = options_for(files, run_dir, overwrite=overwrite)
    with pytest.raises(StoreError, match="holds a training run") as error:
        prepare_store(options, log=quiet)
    assert "Pass --overwrite" not in str(error.value)
    assert sorted(p.relative_to(run_dir) for p in run_dir.rglob("*")) == before
    assert (run_dir / "model.keras").read_bytes() == b"model"
    assert not list(tmp_path.glob("run.backup-*"))


def test_a_foreign_manifest_is_refused_without_suggesting_overwrite(corpus, tmp_path):
    files, _, _ = corpus
    out = tmp_path / "other"
    out.mkdir()
    (out / "manifest.json").write_text('{"format": "something else"}')
    with pytest.raises(StoreError, match="is not a store's manifest") as error:
        prepare_store(options_for(files, out, overwrite=True), log=quiet)
    assert "Pass --overwrite" not in str(error.value)
    assert (out / "manifest.json").read_text() == '{"format": "something else"}'


def test_a_carriage_return_inside_an_evaluation_line_stays_text(corpus, tmp_path):
    files, _, _ = corpus
    valid = (
        str(write(tmp_path / "v.en", b"one\rtwo\nthree\n")),
        str(write(tmp_path / "v.de", b"eins\nzwei\n")),
    )
    store = prepare_store(
        options_for({**files, "valid": valid}, tmp_path / "out"), log=quiet
    )
    assert store.eval_corpus("valid").source == ["one\rtwo", "three"]


@pytest.mark.parametrize("side", ["src", "tgt"])
def test_a_pipe_is_refused_in_words_naming_its_flag(corpus, tmp_path, side):
    # `--train-src <(cat a.en)` failed with "[Errno 2] No such file or
    # directory: '/proc/<pid>/fd/pipe:[...]'". A FIFO is the same stream; it
    # is refused before anything opens it (opening would block).
    files, _, _ = corpus
    fifo = tmp_path / "stream"
    os.mkfifo(fifo)
    pair = list(files["train"])
    pair[0 if side == "src" else 1] = str(fifo)
    options = options_for({**files, "train": tuple(pair)}, tmp_path / "out")
    with pytest.raises(DataError) as info:
        prepare_store(options, log=quiet)
    message = str(info.value)
    assert f"--train-{side} {fifo} is a pipe or another stream, not a file" in message
    assert "Save it to a file first" in message
    assert not (tmp_path / "out").exists()


# --- bad input, found during the streaming passes ----------------------------------


@pytest.mark.parametrize(
    "source, target, expected",
    [
        (b"a b\nc d\ne f\n", b"x\ny\n", r"3 lines.*2 lines.*Line 3 of .*a\.en"),
        (b"a b\nc\xff d\n", b"x\ny\n", r"a\.en: invalid UTF-8 at line 2, byte 2"),
        (b"a b\nc d\n", b"x\ny\x00\n", r"b\.de: NUL byte .* line 2, byte 2"),
        (b" \n\n", b"\n  \n", r"training text from .*a\.en.* is empty"),
        # Equal line counts: a CR inside a training line was trained on as text.
        (b"a b\nc\rd\n", b"x\ny\n", r"a\.en: line 2 holds a bare carriage"),
        (b"a b\nc d\n", b"x\ny\rz\n", r"b\.de: line 2 holds a bare carriage"),
    ],
)
def test_bad_text_is_refused_naming_file_and_line(tmp_path, source, target, expected):
    files = {
        "train": (
            str(write(tmp_path / "a.en", source)),
            str(write(tmp_path / "b.de", target)),
        )
    }
    with pytest.raises(DataError, match=expected):
        prepare_store(options_for(files, tmp_path / "out"), log=quiet)
    assert not (tmp_path / "out").exists()
    assert not list(tmp_path.glob(".out.partial*"))


def test_nothing_left_after_the_filter_names_the_lines(tmp_path):
    long = " ".join(["w"] * 50)
    files = {
        "train": (
            str(write(tmp_path / "a.en", f"a b\n{long}\nc\n".encode())),
            str(write(tmp_path / "b.de", b"\nx\n  \n")),
        )
    }
    with pytest.raises(DataError) as error:
        prepare_store(options_for(files, tmp_path / "out", vocab_size=268), log=quiet)
    message = str(error.value)
    assert "no training pairs left" in message and "a.en" in message
    assert "2 empty" in message and "lines 1, 3" in message
    assert "1 over-long pair (line 2)" in message


def _full_disk_at(monkeypatch, name):
    """The first write to the store file `name` writes half, then fills the
    disk (as tests/run/test_checkpoints.py simulates a full disk)."""
    real = token_store._HashedFile.write

    def write(self, data):
        if self.path.name != name:
            return real(self, data)
        with open(self.path, "ab") as handle:
            handle.write(bytes(memoryview(data).cast("B"))[:5])
        raise StoreWriteError(
            self.path, OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)), self._out
        )

    monkeypatch.setattr(token_store._HashedFile, "write", write)


def test_full_disk_during_prepare_leaves_nothing_and_exits_74(
    corpus, tmp_path, monkeypatch, capsys
):
    files, _, _ = corpus
    out = tmp_path / "store"
    argv = [
        "prepare", "--dataset", "files",
        "--train-src", files["train"][0], "--train-tgt", files["train"][1],
        "--vocab-size", "400", "--max-length", str(MAX_LENGTH),
        "--workers", "1", "--out", str(out),
    ]  # fmt: skip
    with monkeypatch.context() as patch:
        _full_disk_at(patch, "train.target.tokens")
        assert main(argv) == training.EXIT_WRITE_FAILED
    err = capsys.readouterr().err
    assert "train.target.tokens" in err and "disk is full" in err
    assert f"{out} is as it was" in err
    assert not out.exists() and not list(tmp_path.glob(".store.partial*"))
    assert main(argv) == 0  # Space freed: the same command prepares it.
    assert "train on it with: keras-transformer train --dataset store:" in (
        capsys.readouterr().out
    )
    assert open_store(out).manifest["splits"]["train"]["pairs"] > 200


def test_an_interrupted_prepare_leaves_nothing_training_accepts(
    corpus, tmp_path, monkeypatch
):
    files, _, _ = corpus
    out = tmp_path / "store"

    def killed(*args, **kwargs):
        raise KeyboardInterrupt

    with monkeypatch.context() as patch:
        patch.setattr(token_store, "write_manifest", killed)
        patch.setattr(prepare, "write_manifest", killed)
        with pytest.raises(KeyboardInterrupt):
            prepare_store(options_for(files, out), log=quiet)
    assert not out.exists()
    # What a SIGKILL would leave: a staging directory beside the store.
    leftover = tmp_path / ".store.partial-killed"
    leftover.mkdir()
    (leftover / "train.source.tokens").write_bytes(b"\x01\x02")
    with pytest.raises(StoreError, match="is not a prepared token store"):
        open_store(out)
    prepare_store(options_for(files, out), log=quiet)
    assert not leftover.exists() and open_store(out).splits == ["train", "valid"]


def test_cli_prepare_bad_input_exits_2_naming_the_file(tmp_path, capsys):
    source = write(tmp_path / "s.en", b"a\nb\nc\n")
    target = write(tmp_path / "t.de", b"x\n")
    code = main([
        "prepare", "--dataset", "files", "--train-src", str(source),
        "--train-tgt", str(target), "--out", str(tmp_path / "out"),
    ])  # fmt: skip
    assert code == 2
    err = capsys.readouterr().err
    assert "keras-transformer prepare: error" in err and str(target) in err
    missing = tmp_path / "missing.de"
    code = main([
        "prepare", "--dataset", "files", "--train-src", str(source),
        "--train-tgt", str(missing), "--out", str(tmp_path / "out"),
    ])  # fmt: skip
    assert code == 2
    assert f"File not found: {missing}" in capsys.readouterr().err


def test_prepare_options_are_checked_naming_the_flag():
    with pytest.raises(ValueError, match=r"workers \(--workers\) must be >= 1"):
        PrepareOptions(workers=0)
    with pytest.raises(ValueError, match="already a store"):
        PrepareOptions(data=DatasetSpec(name="store:somewhere"))


def test_prepare_flags_come_from_prepare_options():
    from keras_transformer.cli import build_parser

    args = build_parser().parse_args(["prepare"])
    for field in dataclasses.fields(PrepareOptions):
        if field.metadata.get("flag", True):
            assert getattr(args, field.name) == field.default, field.name


def test_a_failure_while_workers_encode_stops_them_and_keeps_nothing(
    corpus, tmp_path, monkeypatch
):
    files, _, _ = corpus
    pools = []
    real = prepare.EncoderPool

    def kept(*args, **kwargs):
        pools.append(real(*args, **kwargs))
        return pools[-1]

    monkeypatch.setattr(prepare, "EncoderPool", kept)
    monkeypatch.setattr(text_files, "_BLOCK_BYTES", 300)  # Many blocks.
    _full_disk_at(monkeypatch, "train.target.tokens")  # At the first block.
    out = tmp_path / "store"
    with pytest.raises(StoreWriteError, match="disk is full"):
        prepare_store(options_for(files, out, workers=2), log=quiet)
    assert not out.exists() and not list(tmp_path.glob(".store.partial*"))
    assert len(pools) == 1
    for process in pools[0]._processes:
        assert process.poll() is not None  # No worker is left running.


def test_the_two_directions_of_a_tfds_corpus_are_two_stores(monkeypatch):
    install_fake_tfds(monkeypatch)

    def key(**languages):
        spec = DatasetSpec(name="tfds:wmt14_translate/de-en", **languages)
        return prepare._Inputs.of(PrepareOptions(data=spec)).key

    de_en = key()  # The dataset's own order: de to en.
    assert key(source_lang="de", target_lang="en") == de_en
    assert key(source_lang="en", target_lang="de") != de_en


def test_sources_are_hashed_once_per_version_of_the_file(tmp_path, monkeypatch):
    """`train` on text finds its store at every start (and in every process)
    by the files' SHA-256: after the first, a stat finds it again."""
    files = write_training_corpus(tmp_path)
    hashed = []
    real = digests.sha256_file
    monkeypatch.setattr(digests, "sha256_file", lambda p: hashed.append(p) or real(p))
    options = options_for(files)
    first = prepare._Inputs.of(options).key
    assert len(hashed) == 4  # train and valid, two sides each.
    assert prepare._Inputs.of(options).key == first
    assert len(hashed) == 4
    source = tmp_path / "train.en"
    source.write_text(source.read_text(encoding="utf-8") + "One more.\n", "utf-8")
    assert prepare._Inputs.of(options).key != first
    assert [str(path) for path in hashed[4:]] == [str(source)]  # Only the changed one.


@pytest.mark.parametrize(
    "flag, value",
    [
        ("vocab_size", 123),
        ("tokenizer_sample", 7),
        ("seed", 3),
        ("tokenizer", "wordpiece"),
    ],
)
def test_tokenizer_from_refuses_the_flags_of_learning_one(tmp_path, flag, value):
    with pytest.raises(ValueError) as caught:
        PrepareOptions(tokenizer_from=str(tmp_path), **{flag: value})
    dashed = "--" + flag.replace("_", "-")
    assert f"{dashed} {value} sets how a tokenizer is learned" in str(caught.value)
    assert f"--tokenizer-from {tmp_path}" in str(caught.value)
