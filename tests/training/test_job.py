"""`train()`: the run directory's owner, exact resume, NaN, determinism,
step accounting and precision, in-process on a small corpus."""

from __future__ import annotations

import dataclasses
import errno
import json
import os
import shutil
import signal
from pathlib import Path

import keras
import numpy as np
import pytest

from keras_transformer import training
from keras_transformer.cli import main
from keras_transformer.data.text_files import ParallelCorpus
from keras_transformer.run import checkpoints
from keras_transformer.run import directory as run_directory
from keras_transformer.run.checkpoints import list_checkpoints
from keras_transformer.run.directory import RunBusy, RunConflict, RunDirectory
from keras_transformer.training import TrainingInterrupted, TrainOptions, memory, train
from keras_transformer.training.callbacks import TrainingDiverged
from keras_transformer.training.memory import TrainingOutOfMemory
from tests.helpers import TRAINING_MODEL, training_options, write_training_corpus
from tests.run.locking import run_directory_locked_by_child

pytestmark = pytest.mark.slow

# Marked backend_neutral (the torch suite alone): the run directory's
# mechanics (overwrite, a failed or refused train, the lock, a full disk, the
# log lines), the same code on every backend, where the few updates trained
# are only the means. The training itself, its checkpoints and exact resume
# are checked on every backend here: test_run_directory_contents,
# test_sigterm_mid_epoch_then_resume_equals_uninterrupted,
# test_nan_stops_naming_the_step_and_keeps_the_last_good_checkpoint.
run_directory_mechanics = pytest.mark.backend_neutral


# The helpers' small model with one encoder and one decoder layer: what
# this module checks (the run directory, exact resume, NaN, determinism, step
# accounting, precision) does not depend on depth, and every `train` call
# traces (TensorFlow) or compiles (JAX) its train step anew, at about twice
# the cost with two layers of each (TensorFlow: 15.7 s of CPU against 7.5).
MODEL = {**TRAINING_MODEL, "num_encoder_layers": 1, "num_decoder_layers": 1}


@pytest.fixture(scope="module")
def corpus_files(tmp_path_factory):
    return write_training_corpus(tmp_path_factory.mktemp("corpus"))


def options(run_dir, corpus_files, **changes):
    changes.setdefault("overrides", dict(MODEL))
    return training_options(run_dir, corpus_files, **changes)


def final_weights(run_dir):
    model = keras.saving.load_model(os.path.join(run_dir, "model.keras"))
    return [keras.ops.convert_to_numpy(w) for w in model.weights]


def tree_bytes(directory):
    return {
        path.relative_to(directory): path.read_bytes()
        for path in sorted(directory.rglob("*"))
        if path.is_file()
    }


class SignalAtBatch(keras.callbacks.Callback):
    def __init__(self, batch, signum=signal.SIGTERM):
        super().__init__()
        self.batch, self.signum, self.seen = batch, signum, 0

    def on_train_batch_end(self, batch, logs=None):
        self.seen += 1
        if self.seen == self.batch:
            os.kill(os.getpid(), self.signum)


class PoisonAtBatch(keras.callbacks.Callback):
    """Sets the shared embedding to Inf before batch `batch` (1-based)."""

    def __init__(self, batch):
        super().__init__()
        self.batch, self.seen = batch, 0

    def on_train_batch_begin(self, batch, logs=None):
        self.seen += 1
        if self.seen == self.batch:
            embedding = self.model.get_layer("shared_embedding").embeddings
            embedding.assign(np.full(embedding.shape, np.inf, "float32"))


@pytest.fixture(scope="module")
def reference(tmp_path_factory, corpus_files):
    """An uninterrupted run of 12 updates (dropout on): the yardstick. It
    translates its dev subset every 6 updates as it trains (dev BLEU reads
    the weights, and the runs compared with it, which do not translate,
    show that it changes nothing)."""
    run_dir = tmp_path_factory.mktemp("reference") / "run"
    result = train(options(run_dir, corpus_files, eval_every=6, dev_subset=12))
    return run_dir, result


@pytest.fixture(scope="module")
def interrupted(tmp_path_factory, corpus_files):
    """The reference's settings stopped by SIGTERM: the signal arrives after
    batch 7 has been checked; update 8 finishes, is saved, and training
    stops. (run directory, the TrainingInterrupted raised). Tests read it;
    `resumed` resumes a copy."""
    run_dir = tmp_path_factory.mktemp("interrupted") / "run"
    with pytest.raises(TrainingInterrupted) as stop:
        train(options(run_dir, corpus_files), callbacks=[SignalAtBatch(7)])
    return run_dir, stop.value


@pytest.fixture(scope="module")
def resumed(tmp_path_factory, interrupted, corpus_files):
    """A copy of `interrupted`, resumed to the end: (run directory, result)."""
    run_dir = tmp_path_factory.mktemp("resumed") / "run"
    shutil.copytree(interrupted[0], run_dir)
    return run_dir, train(options(run_dir, corpus_files))


def test_run_directory_contents(reference):
    run_dir, result = reference
    assert result.steps == 12
    run = RunDirectory(run_dir)
    manifest = run.manifest()
    assert manifest["identity"]["vocab_size"] == 400
    assert len(manifest["identity"]["data"]["fingerprint"]) == 64
    assert [c.step for c in run.checkpoints()] == [4, 8, 12]
    history = json.loads(run.history_path.read_text())
    assert history["step"][-1] == 12
    assert all(np.isfinite(history["loss"])) and "val_perplexity" in history
    assert run.model_path.exists() and run.config_path.exists()
    # The curve of loss and dev BLEU, drawn by training/ and kept by the run.
    assert run.curve_path.read_bytes().startswith(b"\x89PNG")


def test_evaluate_split_scores_the_runs_own_held_out_data(
    reference, corpus_files, tmp_path, capsys, monkeypatch
):
    # The quick start's evaluate named files no step made (issue 51): a
    # run can be scored on the held-out split of its own data.
    run_dir = str(reference[0])
    flags = ["--beam-size", "1", "--max-extra-length", "4"]
    out = tmp_path / "valid.hyp"
    argv = ["evaluate", "--run-dir", run_dir, "--split", "valid", *flags]
    assert main([*argv, "--output", str(out)]) == 0
    scored = capsys.readouterr().out.strip()
    source, target = corpus_files["valid"]
    assert main(["evaluate", "--run-dir", run_dir, "--src", source, "--ref", target,
                 *flags]) == 0  # fmt: skip
    assert scored.startswith("sacreBLEU") and capsys.readouterr().out.strip() == scored
    assert len(out.read_text().splitlines()) == 12
    assert main([*argv, "--ref", target]) == 2
    assert "leave out --ref" in capsys.readouterr().err
    monkeypatch.setenv("KERAS_TRANSFORMER_CACHE", str(tmp_path / "elsewhere"))
    assert main(argv) == 2  # Its store is not on this "machine".
    error = capsys.readouterr().err
    assert "which is not on this machine" in error and "--src and --ref" in error


def test_dev_bleu_during_training_logs_scores_and_training_time(reference):
    # The reference translates its dev subset every 6 of its 12 updates.
    lines = RunDirectory(reference[0]).dev_bleu_path.read_text().splitlines()
    entries = [json.loads(line) for line in lines]
    assert [e["step"] for e in entries] == [6, 12]
    assert all(0 <= e["dev_bleu"] <= 100 and e["eval_seconds"] > 0 for e in entries)
    assert 0 <= entries[0]["train_seconds"] <= entries[1]["train_seconds"]


def test_epochs_cross_and_updates_count_with_accumulation(tmp_path, corpus_files):
    result = train(
        options(tmp_path / "run", corpus_files, accumulation_steps=2, max_steps=6,
                checkpoint_every=2)
    )  # fmt: skip
    run = RunDirectory(tmp_path / "run")
    history = json.loads(run.history_path.read_text())
    assert result.steps == 6
    assert [c.step for c in run.checkpoints()] == [2, 4, 6]
    final = keras.saving.load_model(run.model_path)
    assert int(keras.ops.convert_to_numpy(final.optimizer.iterations)) == 6
    assert history["step"][-1] == 6


def test_sigterm_mid_epoch_then_resume_equals_uninterrupted(
    reference, interrupted, resumed
):
    ref_dir, ref_result = reference
    run_dir, stop = interrupted
    # The signal arrived after batch 7 had been checked; update 8 finished,
    # was saved, and training stopped.
    assert "SIGTERM: saved a checkpoint" in str(stop)
    run = RunDirectory(run_dir)
    saved = run.checkpoints()[-1]
    assert saved.step == 8 and saved.position.index > 0  # Mid-epoch.
    assert not run.model_path.exists()
    resumed_dir, result = resumed
    assert result.steps == ref_result.steps == 12
    for got, expected in zip(final_weights(resumed_dir), final_weights(ref_dir)):
        np.testing.assert_allclose(got, expected, atol=1e-6, rtol=0)


def test_a_prepared_store_trains_and_resumes_mid_epoch_like_the_text_it_holds(
    reference, tmp_path, corpus_files
):
    """`--dataset store:DIR`, stopped mid-epoch and resumed, ends with the
    weights of the uninterrupted run on the text files (whose store `train`
    prepared into the cache: the same content, so the same batches)."""
    from keras_transformer.data.datasets import DatasetSpec
    from keras_transformer.data.prepare import prepare_store
    from keras_transformer.data.store_options import PrepareOptions

    text = options(tmp_path / "unused", corpus_files)
    prepared = prepare_store(
        PrepareOptions(
            out=str(tmp_path / "store"), data=text.data, vocab_size=400, max_length=32
        )
    )
    assert (
        prepared.fingerprint
        == RunDirectory(reference[0]).manifest()["identity"]["data"]["fingerprint"]
    )
    store = DatasetSpec(name=f"store:{prepared.path}")
    run_dir = tmp_path / "run"
    # The store fixes the vocabulary and the length filter: not repeated.
    stored = options(run_dir, corpus_files, data=store, vocab_size=4000)
    stored = dataclasses.replace(stored, max_length=128)
    with pytest.raises(TrainingInterrupted):
        train(stored, callbacks=[SignalAtBatch(7)])
    saved = RunDirectory(run_dir).checkpoints()[-1]
    assert saved.step == 8 and saved.position.index > 0  # Mid-epoch.
    assert train(stored).steps == 12
    for got, expected in zip(final_weights(run_dir), final_weights(reference[0])):
        np.testing.assert_allclose(got, expected, atol=1e-6, rtol=0)


def test_nan_stops_naming_the_step_and_keeps_the_last_good_checkpoint(
    reference, tmp_path, corpus_files
):
    run_dir = tmp_path / "run"
    with pytest.raises(TrainingDiverged, match="at step 10;") as error:
        train(options(run_dir, corpus_files), callbacks=[PoisonAtBatch(10)])
    assert error.value.step == 10
    run = RunDirectory(run_dir)
    assert [c.step for c in run.checkpoints()] == [4, 8]
    good = tree_bytes(run.checkpoint_dir)
    assert not run.model_path.exists()
    # Resuming from the last good checkpoint finishes like the reference.
    result = train(options(run_dir, corpus_files))
    assert result.steps == 12
    for name, content in good.items():
        assert (run.checkpoint_dir / name).read_bytes() == content
    for got, expected in zip(final_weights(run_dir), final_weights(reference[0])):
        np.testing.assert_allclose(got, expected, atol=1e-6, rtol=0)


def test_conflicting_rerun_refuses_and_touches_nothing(reference, corpus_files):
    run_dir, _ = reference
    before = tree_bytes(run_dir)
    with pytest.raises(RunConflict) as error:
        train(options(run_dir, corpus_files, vocab_size=420))
    assert "vocab_size: stored 400, requested 420" in str(error.value)
    with pytest.raises(RunConflict, match="seed: stored 0, requested 1"):
        train(options(run_dir, corpus_files, seed=1))
    assert tree_bytes(run_dir) == before


def test_rerun_of_a_finished_run_trains_nothing(reference, corpus_files):
    run_dir, _ = reference
    checkpoints = tree_bytes(RunDirectory(run_dir).checkpoint_dir)
    result = train(options(run_dir, corpus_files))
    assert result.steps == 12
    assert tree_bytes(RunDirectory(run_dir).checkpoint_dir) == checkpoints


@run_directory_mechanics
def test_overwrite_moves_the_old_run_aside(tmp_path, corpus_files):
    run_dir = tmp_path / "run"
    train(options(run_dir, corpus_files, max_steps=2))
    old = tree_bytes(run_dir)
    old_id = RunDirectory(run_dir).run_id
    train(options(run_dir, corpus_files, max_steps=2, vocab_size=420, overwrite=True))
    backups = list(tmp_path.glob("run.backup-*"))
    assert len(backups) == 1
    assert tree_bytes(backups[0]) == old
    run = RunDirectory(run_dir)
    assert run.run_id != old_id
    assert run.manifest()["identity"]["vocab_size"] == 420
    # Only the new run's checkpoints are listed.
    assert [c.run_id for c in run.checkpoints()] == [run.run_id]


def test_old_unmanaged_directory_is_refused(tmp_path, corpus_files):
    run_dir = tmp_path / "run"
    (run_dir / "checkpoints").mkdir(parents=True)
    (run_dir / "config.json").write_text("{}")
    with pytest.raises(RunConflict, match="no manifest.json"):
        train(options(run_dir, corpus_files))


def checkpoint_weights(run_dir, step):
    path = RunDirectory(run_dir).checkpoint_dir / f"ckpt-{step:08d}.keras"
    return [
        keras.ops.convert_to_numpy(w) for w in keras.saving.load_model(path).weights
    ]


def test_same_seed_is_bit_identical_and_another_seed_differs(
    reference, interrupted, tmp_path, corpus_files
):
    # Step 4 is the first checkpoint of both runs of the reference's
    # settings: the reference and the one stopped at step 8 (`interrupted`).
    expected = checkpoint_weights(reference[0], 4)
    again = checkpoint_weights(interrupted[0], 4)
    for got, want in zip(again, expected, strict=True):
        np.testing.assert_array_equal(got, want)
    train(options(tmp_path / "other", corpus_files, seed=1, max_steps=4))
    other = final_weights(tmp_path / "other")
    assert any(not np.array_equal(o, e) for o, e in zip(other, expected))


@pytest.mark.parametrize("precision", ["mixed_bfloat16", "mixed_float16"])
def test_mixed_precision_loss_is_finite_and_falls(precision, tmp_path, corpus_files):
    result = train(
        options(tmp_path / "run", corpus_files, precision=precision, max_steps=24,
                checkpoint_every=0, learning_rate_scale=2.0)
    )  # fmt: skip
    history = json.loads((tmp_path / "run" / "history.json").read_text())
    losses = history["loss"]
    assert all(np.isfinite(losses))
    assert losses[-1] < losses[0]
    assert np.isfinite(result.final_loss)
    assert keras.config.dtype_policy().name == "float32"  # Restored.


def test_float16_with_accumulation_is_refused():
    with pytest.raises(ValueError, match="mixed_float16 with --accumulation-steps"):
        TrainOptions(precision="mixed_float16", accumulation_steps=2)


def test_public_steps_compose_around_a_users_fit(corpus_files):
    opts = options("unused", corpus_files)
    splits = training.load_splits(opts)
    tokenizer = training.prepare_tokenizer(opts, splits)
    data = training.prepare_batches(opts, splits, tokenizer)
    model = training.build_model(opts, training.model_config(opts, tokenizer))
    history = model.fit(
        data.train.for_fit(training.DataPosition()),
        steps_per_epoch=len(data.train),
        epochs=2,
        validation_data=data.valid.for_fit(),
        verbose=0,
    )
    assert set(history.history) >= {"loss", "val_loss", "perplexity"}
    assert history.history["loss"][1] < history.history["loss"][0]
    assert not os.path.exists("unused")
    assert list_checkpoints("unused") == []


@pytest.mark.skipif(keras.backend.backend() != "torch", reason="torch's loader")
def test_torch_epoch_loader_has_its_length_and_plans_the_next_epoch(corpus_files):
    """Keras stops after len(loader) batches (it warns when it has to run
    into the end instead), so the next epoch's plan is made by then."""
    opts = options("unused", corpus_files)
    splits = training.load_splits(opts)
    data = training.prepare_batches(
        opts, splits, training.prepare_tokenizer(opts, splits)
    )
    train = data.train
    expected = []  # Each epoch's first labels.
    for epoch in (0, 1):
        first = next(train.batches_from(training.DataPosition(epoch, 0)))
        expected.append(np.asarray(first[1]))
    assert expected[0].shape != expected[1].shape or (expected[0] != expected[1]).any()
    loader = train.for_fit()
    assert len(loader) == len(train) > 1
    for epoch in (0, 1):
        iterator = iter(loader)
        batches = [next(iterator) for _ in range(len(loader))]  # As Keras takes them.
        np.testing.assert_array_equal(np.asarray(batches[0][1]), expected[epoch])
    assert train.epoch == 2


class WordTokenizer:
    """One id per whitespace-separated word: lengths are easy to set."""

    vocab_size = 100

    def encode(self, texts):
        return [[5] * len(text.split()) for text in texts]


def corpus(lengths, origin):
    text = [" ".join(["w"] * n) for n in lengths]
    return ParallelCorpus(text, text, origin, list(range(1, len(text) + 1)))


@pytest.mark.parametrize(
    ("max_length", "valid_lengths", "longest_bucket"),
    [
        (128, [3, 10, 34], 40),  # 35 tokens with the end token: bucket 40.
        (128, [3, 10, 39], 40),  # Exactly a bucket.
        (32, [3, 10, 49], 50),  # Past --max-length: the pair's own length.
    ],
)
def test_validation_pads_to_the_smallest_bucket_holding_its_longest_pair(
    max_length, valid_lengths, longest_bucket
):
    splits = {
        "train": corpus([3, 5, 9, 12] * 4, "train"),
        "valid": corpus(valid_lengths, "valid"),
    }
    opts = TrainOptions(max_length=max_length, tokens_per_batch=256)
    data = training.prepare_batches(opts, splits, WordTokenizer())
    lengths = sorted(length for _, length in data.valid.shapes())
    assert lengths[-1] == longest_bucket
    # Every validation pair is there once.
    assert sum(data.valid.real_tokens_per_batch()) == sum(n + 1 for n in valid_lengths)


# --- the batch budget is bounded by the training set ------------------------------


@pytest.mark.parametrize("budget", [10**6, 10**12])
def test_a_budget_the_training_set_cannot_fill_is_refused_naming_flag_and_size(
    budget,
):
    # 16 pairs padded to --max-length 32 are 512 tokens: no batch of the
    # budget can ever be filled (10**6 on 3,000 pairs grew to 23 GiB).
    splits = {"train": corpus([3, 5, 9, 12] * 4, "train.en | train.de")}
    opts = TrainOptions(max_length=32, tokens_per_batch=budget)
    with pytest.raises(ValueError) as info:
        training.prepare_batches(opts, splits, WordTokenizer())
    message = str(info.value)
    assert f"--tokens-per-batch {budget:,}" in message
    assert "train.en | train.de has 16 pairs" in message and "512 tokens" in message
    assert "at most --tokens-per-batch 512" in message


@pytest.mark.parametrize("budget", [1, 31])
def test_a_budget_under_one_padded_pair_is_refused_naming_the_least(budget):
    # Every batch holds at least one pair: with 1 token per batch it trained
    # one sentence per batch, over the budget, without a word.
    splits = {"train": corpus([3, 5, 9, 12] * 4, "train")}
    opts = TrainOptions(max_length=32, tokens_per_batch=budget)
    with pytest.raises(ValueError) as info:
        training.prepare_batches(opts, splits, WordTokenizer())
    message = str(info.value)
    assert f"--tokens-per-batch {budget} is less than one pair" in message
    assert "--max-length 32" in message
    assert "at least --tokens-per-batch 32" in message
    exact = TrainOptions(max_length=32, tokens_per_batch=32)
    assert len(training.prepare_batches(exact, splits, WordTokenizer()).train)


def test_a_budget_the_training_set_just_fills_is_accepted():
    splits = {"train": corpus([3, 5, 9, 12] * 4, "train")}
    opts = TrainOptions(max_length=32, tokens_per_batch=512)
    data = training.prepare_batches(opts, splits, WordTokenizer())
    assert sum(data.train.real_tokens_per_batch()) == 16 + (3 + 5 + 9 + 12) * 4
    assert all(rows <= 16 for rows, _ in data.train.shapes())


# --- run lifecycle: resumed history, failed runs, full disk, partial files --------


def test_history_after_a_mid_epoch_resume_equals_uninterrupted(
    reference, interrupted, resumed
):
    # Stopped at step 8 (epoch 2, batch 1: `interrupted`) and resumed: epoch
    # 2's loss, perplexity and accuracy cover all its batches, as in the
    # reference.
    saved = RunDirectory(interrupted[0]).checkpoints()[-1]
    assert saved.step == 8 and saved.position.index == 1
    expected = json.loads(RunDirectory(reference[0]).history_path.read_text())
    history = json.loads(RunDirectory(resumed[0]).history_path.read_text())
    assert history.keys() == expected.keys()
    assert history["step"] == expected["step"] == [7, 12]
    for key in ("loss", "perplexity", "token_accuracy", "val_loss"):
        np.testing.assert_allclose(history[key], expected[key], rtol=1e-6, err_msg=key)


def write_blank_training_files(directory, corpus_files):
    source, target = directory / "blank.en", directory / "blank.de"
    source.write_text("\n \n\n", encoding="utf-8")
    target.write_text(" \n\n\n", encoding="utf-8")
    return {**corpus_files, "train": (str(source), str(target))}


@run_directory_mechanics
def test_failed_train_leaves_no_run_and_the_corrected_command_trains(
    tmp_path, corpus_files
):
    run_dir = tmp_path / "run"
    blank = write_blank_training_files(tmp_path, corpus_files)
    failures = [
        (dict(files=blank), "empty"),
        (dict(vocab_size=10), "too small"),
        (dict(max_length=2), "no training pairs left"),
        # The final test decode's beam: refused before the first step, not after.
        (dict(beam_size=100_000), "use a beam of at most"),
    ]
    for changes, message in failures:
        spec = options(run_dir, corpus_files).data
        if "files" in changes:
            spec = dataclasses.replace(spec, files=changes.pop("files"))
        with pytest.raises(ValueError, match=message):
            train(options(run_dir, corpus_files, data=spec, **changes))
        assert not run_dir.exists(), changes
    # Not refused as "a run with other settings".
    assert train(options(run_dir, corpus_files, max_steps=2)).steps == 2


class RaiseAtBatch(keras.callbacks.Callback):
    def on_train_batch_begin(self, batch, logs=None):
        raise RuntimeError("out of memory in the first step")


@run_directory_mechanics
def test_overwrite_that_fails_before_a_checkpoint_puts_the_old_run_back(
    reference, tmp_path, corpus_files
):
    run_dir = tmp_path / "run"
    shutil.copytree(reference[0], run_dir)
    before = tree_bytes(run_dir)
    with pytest.raises(RuntimeError, match="out of memory"):
        train(
            options(run_dir, corpus_files, vocab_size=420, overwrite=True),
            callbacks=[RaiseAtBatch()],
        )
    assert tree_bytes(run_dir) == before
    assert not list(tmp_path.glob("run.backup-*"))


class ResourceExhaustedError(Exception):
    """Named as TensorFlow's is."""


class ExhaustAtBatch(keras.callbacks.Callback):
    def on_train_batch_begin(self, batch, logs=None):
        raise ResourceExhaustedError("OOM when allocating tensor with shape[9,9]")


def test_a_real_out_of_memory_is_a_sentence_and_leaves_no_run(tmp_path, corpus_files):
    # It was a traceback after the allocation failed.
    run_dir = tmp_path / "run"
    with pytest.raises(TrainingOutOfMemory) as info:
        train(options(run_dir, corpus_files), callbacks=[ExhaustAtBatch()])
    message = str(info.value)
    assert "out of memory in training step 1 with --tokens-per-batch 1,024" in message
    assert "to 512" in message and "was removed" in message
    assert not run_dir.exists()


def test_a_budget_the_machine_cannot_hold_is_refused_before_anything_is_built(
    tmp_path, corpus_files, monkeypatch
):
    run_dir = tmp_path / "run"
    limit = (2 * 2**30 + 10**6, "its address-space limit (ulimit)")
    monkeypatch.setattr(memory, "memory_limit", lambda: limit)
    with pytest.raises(ValueError, match="--tokens-per-batch 1,024 would need about"):
        train(options(run_dir, corpus_files))
    assert not run_dir.exists()


def _cli_train(run_dir, corpus_files, max_steps):
    return [
        "train",
        "--dataset", "files",
        "--train-src", corpus_files["train"][0],
        "--train-tgt", corpus_files["train"][1],
        "--valid-src", corpus_files["valid"][0],
        "--valid-tgt", corpus_files["valid"][1],
        "--run-dir", str(run_dir),
        "--vocab-size", "400",
        "--tokens-per-batch", "1024",
        "--max-length", "32",
        "--max-steps", str(max_steps),
        "--checkpoint-every", "4",
        "--eval-every", "0",
        "--verbose", "0",
        *[f"--set={key}={value}" for key, value in MODEL.items()],
    ]  # fmt: skip


def _full_disk_at(monkeypatch, name):
    """The next atomic write of a file called `name` fills the disk halfway."""
    from keras_transformer.utils import atomic_files

    real = atomic_files.atomic_write_with

    def write(path, writer):
        if Path(path).name != name:
            return real(path, writer)

        def half_then_full(partial):
            Path(partial).write_bytes(b"PK\x03\x04 half a zip")
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

        return real(path, half_then_full)

    for module in (checkpoints, run_directory):
        monkeypatch.setattr(module, "atomic_write_with", write)


@run_directory_mechanics
def test_full_disk_names_file_and_step_exits_74_and_resumes(
    tmp_path, corpus_files, monkeypatch, capsys
):
    from keras_transformer.cli import main

    run_dir = tmp_path / "run"
    run = RunDirectory(run_dir)
    argv = _cli_train(run_dir, corpus_files, max_steps=8)
    # The checkpoint of step 8: exit 74, the partial file removed.
    with monkeypatch.context() as patch:
        _full_disk_at(patch, "ckpt-00000008.keras")
        assert main(argv) == training.EXIT_WRITE_FAILED
    err = capsys.readouterr().err
    assert "ckpt-00000008.keras at step 8" in err and "disk is full" in err
    assert [c.step for c in run.checkpoints()] == [4]
    assert not [p for p in run_dir.rglob("*") if ".partial" in p.name]
    # The final model, written atomically: no file rather than half of one.
    with monkeypatch.context() as patch:
        _full_disk_at(patch, "model.keras")
        assert main(argv) == training.EXIT_WRITE_FAILED
    err = capsys.readouterr().err
    assert f"the final model {run.model_path} at step 8" in err
    assert not run.model_path.exists()
    assert [c.step for c in run.checkpoints()] == [4, 8]
    # Leftovers of a killed writer are removed when the run resumes.
    leftovers = [
        run.checkpoint_dir / ".ckpt-00000099.partial.keras",
        run_dir / ".model.partial.keras",
    ]
    for path in leftovers:
        path.write_bytes(b"half")
    assert main(argv) == 0
    assert run.model_path.exists()
    assert not any(path.exists() for path in leftovers)


@run_directory_mechanics
def test_resumed_run_logs_the_steps_of_this_call_and_in_all(
    tmp_path, corpus_files, capsys
):
    run_dir = tmp_path / "run"
    train(options(run_dir, corpus_files, max_steps=2, checkpoint_every=0))
    assert "trained 2 steps (" in capsys.readouterr().out
    train(options(run_dir, corpus_files, max_steps=3, checkpoint_every=0))
    assert "trained 1 step this time, 3 in all (" in capsys.readouterr().out


@run_directory_mechanics
def test_a_running_train_holds_the_run_directory(tmp_path, corpus_files):
    run_dir = tmp_path / "run"
    with run_directory_locked_by_child(run_dir) as child:
        with pytest.raises(RunBusy, match=f"pid {child.pid} "):
            train(options(run_dir, corpus_files))
    assert not run_dir.exists()
