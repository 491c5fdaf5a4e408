"""`train --init-from`: LoRA and full fine-tuning of a trained run or preset,
its exact resume, and the bad inputs refused before anything is written."""

from __future__ import annotations

import os

import keras
import numpy as np
import pytest

from keras_transformer.config import TransformerConfig
from keras_transformer.data.datasets import DatasetSpec
from keras_transformer.data.prepare import prepare_store, store_location
from keras_transformer.data.store_options import PrepareOptions
from keras_transformer.data.token_pairs import TokenPairs
from keras_transformer.decoding.settings import SearchSettings
from keras_transformer.export.preset import export_preset
from keras_transformer.model import build_transformer
from keras_transformer.run import checkpoints
from keras_transformer.run.directory import RunConflict, RunDirectory
from keras_transformer.schedules import FineTuneSchedule
from keras_transformer.training import (
    TrainingInterrupted,
    TrainOptions,
    fine_tune,
    train,
)
from keras_transformer.training.fine_tune import (
    enable_lora,
    frequent_tokens,
    target_layers,
    vocabulary_layers,
)
from keras_transformer.training.model_setup import build_model, fine_tune_schedule
from keras_transformer.training.options import LORA_TARGETS
from tests.helpers import (
    predict_logits,
    small_config,
    training_options,
    write_training_corpus,
)
from tests.training.test_job import SignalAtBatch

pytestmark = pytest.mark.slow
# The TensorFlow suite is CI's longest: it trains the LoRA run and checks
# its factors and merge; resuming, accumulating and the other routes train
# in the JAX and torch suites (the same Keras code on every backend).
not_on_tensorflow = pytest.mark.skipif(
    keras.backend.backend() == "tensorflow",
    reason="trained in the JAX and torch suites (CI's TensorFlow suite is its longest)",
)
# Marked backend_neutral (the torch suite alone): which data and which
# config a fine-tune takes, the same code on every backend, where its one
# update is only the means. LoRA training itself is checked on every backend
# (lora_run: test_lora_changes_each_projection_by_a_low_rank_matrix_and_
# nothing_else, test_the_factors_trained_and_the_merged_model_gives_the_same_
# logits).
fine_tune_plumbing = pytest.mark.backend_neutral

RANK = 2


@pytest.fixture(scope="module")
def corpus_files(tmp_path_factory):
    return write_training_corpus(tmp_path_factory.mktemp("corpus"))


@pytest.fixture(scope="module")
def base_run(trained_run):
    """The trained run every fine-tune starts from: the session's
    (tests/shared_runs.py: the helpers' small model, vocabulary 400, trained
    on the same 240 pairs), shared with other modules instead of training
    one here. Read-only: each fine-tune writes its own run directory."""
    return trained_run


def fine_tune_options(run_dir, corpus_files, base, **changes):
    """A fine-tune of `base`: the model's sizes are its, so no size --set."""
    values = dict(overrides={}, vocab_size=4000, init_from=str(base))
    values.update(changes)
    return training_options(run_dir, corpus_files, **values)


def _target_count(model) -> int:
    """Attention: 4 per attention layer; feed-forward: 2 per block; the one
    shared and tied embedding table."""
    return 6 * len(model.encoder_blocks) + 10 * len(model.decoder_blocks) + 1


class KeepModel(keras.callbacks.Callback):
    """Keeps the trained model, and its weights when training begins."""

    def on_train_begin(self, logs=None):
        if not hasattr(self, "first_weights"):
            self.first_weights = _by_path(self.model)

    def on_train_end(self, logs=None):
        self.kept = self.model


def _by_path(model) -> dict[str, np.ndarray]:
    return {
        v.path: np.array(keras.ops.convert_to_numpy(v))
        for v in model.weights
        if "lora_" not in v.path
    }


def _lora_update(layer) -> np.ndarray:
    """A B of a LoRA layer (zero before training: one factor starts at 0)."""
    _, factor_a, factor_b = checkpoints.lora_variables(layer)
    return keras.ops.convert_to_numpy(factor_a) @ keras.ops.convert_to_numpy(factor_b)


def _load(path):
    return keras.saving.load_model(path, compile=False)


def _target_paths(model) -> set[str]:
    """The adapted weights of the default targets: kernels and the table."""
    layers = target_layers(model, ",".join(LORA_TARGETS))
    return {
        (layer.embeddings if hasattr(layer, "embeddings") else layer.kernel).path
        for layer in layers
    }


@pytest.fixture(scope="module")
def lora_run(tmp_path_factory, corpus_files, base_run):
    run_dir = tmp_path_factory.mktemp("lora") / "run"
    keep = KeepModel()
    train(fine_tune_options(run_dir, corpus_files, base_run, lora_rank=RANK),
          callbacks=[keep])  # fmt: skip
    return run_dir, keep


# --- LoRA ------------------------------------------------------------------------


def test_lora_changes_each_projection_by_a_low_rank_matrix_and_nothing_else(
    base_run, lora_run
):
    run_dir, keep = lora_run
    initial = _by_path(_load(RunDirectory(base_run).model_path))
    final_model = _load(RunDirectory(run_dir).model_path)
    assert not checkpoints.lora_layers(final_model)  # A plain model.
    final = _by_path(final_model)
    targets = _target_paths(final_model)
    assert len(targets) == _target_count(final_model)
    assert "shared_embedding/embeddings" in targets
    assert keep.first_weights.keys() == initial.keys() == final.keys()
    for path, value in initial.items():
        np.testing.assert_array_equal(keep.first_weights[path], value, err_msg=path)
        if path not in targets:
            np.testing.assert_array_equal(final[path], value, err_msg=path)
            continue
        delta = final[path].astype(np.float64) - value
        assert np.abs(delta).max() > 0, path
        rank = np.linalg.matrix_rank(delta, tol=1e-4 * np.abs(delta).max())
        assert rank <= RANK, (path, rank)


def test_the_factors_trained_and_the_merged_model_gives_the_same_logits(lora_run):
    run_dir, keep = lora_run
    trained = keep.kept
    assert [v.path for v in trained.trainable_weights if "lora" not in v.path] == []
    for layer in checkpoints.lora_layers(trained):
        assert np.abs(_lora_update(layer)).max() > 0, layer.path
    rng = np.random.default_rng(0)
    source = rng.integers(4, 400, size=(2, 9))
    target = rng.integers(4, 400, size=(2, 7))
    merged = _load(RunDirectory(run_dir).model_path)
    np.testing.assert_allclose(
        predict_logits(merged, source, target),
        predict_logits(trained, source, target),
        atol=1e-5,
        rtol=0,
    )


def test_each_checkpoint_has_its_lora_sidecar_and_translation_loads_it(lora_run):
    run_dir, _ = lora_run
    run = RunDirectory(run_dir)
    saved = run.checkpoints()
    assert [c.step for c in saved] == [4, 8, 12]
    assert all(c.lora_sha256 and c.lora_path.is_file() for c in saved)
    inference = run.open_for_inference(saved[-1].path)  # Merged, plain.
    assert not checkpoints.lora_layers(inference.model)


@pytest.mark.parametrize(
    "changes",
    [
        dict(lora_rank=RANK + 1),
        dict(lora_rank=RANK, lora_embedding_rank=5),
        dict(lora_rank=RANK, lora_token_rows=5),
    ],
)
def test_resume_with_other_lora_settings_is_refused(
    lora_run, corpus_files, base_run, changes
):
    run_dir, _ = lora_run
    with pytest.raises(RunConflict):
        train(fine_tune_options(run_dir, corpus_files, base_run, **changes))


@pytest.mark.parametrize("share_embeddings", [True, False])
def test_the_vocabulary_layers_take_their_own_rank(share_embeddings):
    """--lora-embedding-rank: the tables (one when shared) and an untied
    output projection get its rank, every other target --lora-rank's; a
    rank over a table's smaller side is refused naming the flag."""
    config = small_config(
        share_embeddings=share_embeddings,
        tie_output_projection=share_embeddings,
        num_encoder_layers=1,
        num_decoder_layers=1,
    )
    model = build_transformer(config)
    layers = enable_lora(model, 2, ",".join(LORA_TARGETS), embedding_rank=6)
    vocabulary = vocabulary_layers(model)
    assert len(vocabulary) == (1 if share_embeddings else 3)
    assert {layer.lora_rank for layer in vocabulary} == {6}
    others = [layer for layer in layers if layer not in vocabulary]
    assert len(others) + len(vocabulary) == len(layers) > len(vocabulary)
    assert {layer.lora_rank for layer in others} == {2}
    table = model._parts.target_embedding
    assert [tuple(v.shape) for v in checkpoints.lora_variables(table)[1:]] == [
        (config.vocab_size, 6),
        (6, config.d_model),
    ]
    wide = config.d_model + 1
    with pytest.raises(ValueError, match=rf"--lora-embedding-rank {wide}: .*embedding"):
        enable_lora(
            build_transformer(config), 2, "value,embeddings", embedding_rank=wide
        )


@not_on_tensorflow
def test_an_interrupted_lora_run_resumes_exactly(
    lora_run, tmp_path, corpus_files, base_run
):
    run_dir = tmp_path / "run"
    options = fine_tune_options(run_dir, corpus_files, base_run, lora_rank=RANK)
    with pytest.raises(TrainingInterrupted):
        train(options, callbacks=[SignalAtBatch(7)])
    run = RunDirectory(run_dir)
    assert run.checkpoints()[-1].step == 8 and not run.model_path.exists()
    assert train(options).steps == 12
    reference = RunDirectory(lora_run[0])
    for got, expected in zip(run.checkpoints(), reference.checkpoints()):
        with np.load(got.lora_path) as mine, np.load(expected.lora_path) as theirs:
            assert mine.files == theirs.files
            for name in mine.files:
                np.testing.assert_array_equal(mine[name], theirs[name], err_msg=name)
    final, uninterrupted = _load(run.model_path), _load(reference.model_path)
    for got, expected in zip(final.weights, uninterrupted.weights):
        np.testing.assert_array_equal(
            keras.ops.convert_to_numpy(got), keras.ops.convert_to_numpy(expected)
        )


def test_a_lora_checkpoint_restores_factors_not_zeros(lora_run):
    """`load_weights` alone zeroes the factors; the sidecar puts them back."""
    run_dir, keep = lora_run
    run = RunDirectory(run_dir)
    options = TrainOptions(overrides={}, init_from=str(run_dir), lora_rank=RANK)
    model = build_model(
        options,
        run.load_config(),
        before_compile=lambda m: enable_lora(m, RANK, options.lora_targets),
    )
    checkpoints.restore_checkpoint(model, run.checkpoints()[-1])
    for got, expected in zip(model.weights, keep.kept.weights):
        np.testing.assert_array_equal(
            keras.ops.convert_to_numpy(got), keras.ops.convert_to_numpy(expected)
        )


@fine_tune_plumbing
def test_the_most_frequent_pieces_of_both_sides_are_chosen(monkeypatch):
    monkeypatch.setattr(fine_tune, "_COUNT_BLOCK", 3)  # Counted in blocks.
    pairs = TokenPairs.from_lists(
        [[5, 5, 9], [7, 5]], [[9, 9, 4], [5, 7, 3, 3]], vocab_size=12
    )
    # 5: 4 times, 9: 3, 3 and 7: 2 (3 first: ties by id), 4: 1.
    assert frequent_tokens(pairs, 4).tolist() == [3, 5, 7, 9]
    assert frequent_tokens(pairs, 1).tolist() == [5]
    assert frequent_tokens(pairs, 12).tolist() == [3, 4, 5, 7, 9]  # What occurs.


@not_on_tensorflow
def test_lora_token_rows_train_the_most_frequent_rows_in_full(
    tmp_path, corpus_files, base_run
):
    keep = KeepModel()
    options = fine_tune_options(
        tmp_path / "run", corpus_files, base_run, lora_rank=RANK, lora_token_rows=20
    )
    train(options, callbacks=[keep])
    table = keep.kept._parts.target_embedding
    ids = keras.ops.convert_to_numpy(table.lora_row_ids)
    tokenizer = RunDirectory(base_run).load_tokenizer()
    sides = [open(path, encoding="utf-8").read().splitlines()
             for path in corpus_files["train"]]  # fmt: skip
    pairs = TokenPairs.from_lists(
        tokenizer.encode(sides[0]), tokenizer.encode_target(sides[1]),
        vocab_size=tokenizer.vocab_size,
    )  # fmt: skip
    np.testing.assert_array_equal(ids, frequent_tokens(pairs, 20))
    assert np.abs(keras.ops.convert_to_numpy(table.lora_rows)).min(axis=1).all()
    # The checkpoint's sidecar holds the ids: a model whose table trains
    # other rows is restored to these.
    run = RunDirectory(tmp_path / "run")
    model = build_model(
        options,
        run.load_config(),
        before_compile=lambda m: enable_lora(
            m, RANK, options.lora_targets, token_rows=range(20)
        ),
    )
    checkpoints.restore_checkpoint(model, run.checkpoints()[-1])
    for got, expected in zip(model.weights, keep.kept.weights):
        np.testing.assert_array_equal(
            keras.ops.convert_to_numpy(got), keras.ops.convert_to_numpy(expected)
        )


@not_on_tensorflow
def test_lora_with_gradient_accumulation(base_run, tmp_path, corpus_files):
    keep = KeepModel()
    result = train(
        fine_tune_options(tmp_path / "run", corpus_files, base_run, lora_rank=1,
                          accumulation_steps=2, max_steps=2, checkpoint_every=1),
        callbacks=[keep],
    )  # fmt: skip
    assert result.steps == 2
    assert int(keras.ops.convert_to_numpy(keep.kept.optimizer.iterations)) == 2
    layers = checkpoints.lora_layers(keep.kept)
    assert all(np.abs(_lora_update(layer)).max() > 0 for layer in layers)
    assert [c.step for c in RunDirectory(tmp_path / "run").checkpoints()] == [1, 2]


# --- full fine-tuning, presets -------------------------------------------------


@not_on_tensorflow
def test_full_fine_tune_starts_from_the_trained_weights(
    base_run, tmp_path, corpus_files
):
    keep = KeepModel()
    result = train(
        fine_tune_options(tmp_path / "run", corpus_files, base_run, max_steps=4,
                          overrides={"warmup_steps": 10}),
        callbacks=[keep],
    )  # fmt: skip
    assert result.steps == 4
    initial = _by_path(_load(RunDirectory(base_run).model_path))
    final = _by_path(_load(RunDirectory(tmp_path / "run").model_path))
    changed = 0
    for path, value in initial.items():
        np.testing.assert_array_equal(keep.first_weights[path], value, err_msg=path)
        changed += not np.array_equal(final[path], value)
    assert changed == len(initial)
    identity = RunDirectory(tmp_path / "run").manifest()["identity"]
    assert identity["init_from"]["kind"] == "run" and identity["lora"] is None


@not_on_tensorflow
def test_lora_from_a_preset_of_a_lora_run(lora_run, tmp_path, corpus_files):
    preset = export_preset(lora_run[0], tmp_path / "preset", SearchSettings())
    keep = KeepModel()
    result = train(
        fine_tune_options(tmp_path / "run", corpus_files, preset, max_steps=4,
                          lora_rank=1, lora_targets="value,feed_forward"),
        callbacks=[keep],
    )  # fmt: skip
    assert result.steps == 4
    initial = _by_path(_load(RunDirectory(lora_run[0]).model_path))
    for path, value in initial.items():
        np.testing.assert_array_equal(keep.first_weights[path], value, err_msg=path)
    final = _by_path(_load(RunDirectory(tmp_path / "run").model_path))
    changed = {
        path for path in initial if not np.array_equal(final[path], initial[path])
    }
    assert changed and all(
        "value_projection" in path or "feed_forward" in path for path in changed
    )


# --- bad input: a clear error, nothing written ---------------------------------


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        (dict(lora_rank=0), "--lora-rank"),
        (dict(lora_rank=2, init_from=None), "--lora-rank fine-tunes a trained model"),
        (dict(lora_targets="query,bias"), "--lora-targets"),
        (dict(lora_embedding_rank=0), "--lora-embedding-rank"),
        (
            dict(lora_rank=None, lora_embedding_rank=16),
            "--lora-embedding-rank applies to LoRA: add --lora-rank",
        ),
        (
            dict(lora_targets="query,value", lora_embedding_rank=16),
            "--lora-targets query,value leaves the table out",
        ),
        (dict(lora_token_rows=0), "--lora-token-rows"),
        (
            dict(lora_rank=None, lora_token_rows=16),
            "--lora-token-rows applies to LoRA: add --lora-rank",
        ),
        (
            dict(lora_targets="query,value", lora_token_rows=16),
            "--lora-token-rows 16 sets the embedding table's rows trained in "
            "full, but --lora-targets query,value leaves the table out",
        ),
        (dict(overrides={"d_model": 64}), "--set d_model=64"),
        (dict(preset="base"), "--preset base"),
        (
            dict(lora_rank=None, init_from=None, learning_rate=1e-3),
            "--learning-rate fine-tunes a trained model",
        ),
        (
            dict(lora_rank=None, init_from=None, fine_tune_schedule="constant"),
            "--fine-tune-schedule fine-tunes a trained model",
        ),
        (dict(learning_rate=0.0), "--learning-rate"),
        (dict(fine_tune_schedule="cosine"), "--fine-tune-schedule"),
        (
            dict(fine_tune_schedule="paper", learning_rate=1e-3),
            "--fine-tune-schedule paper is scaled by --learning-rate-scale",
        ),
        (
            dict(learning_rate_scale=2.0),
            "--learning-rate-scale 2 multiplies the paper's schedule",
        ),
    ],
)
def test_bad_fine_tune_options_are_refused(tmp_path, corpus_files, changes, message):
    values = dict(overrides={}, vocab_size=4000, init_from=str(tmp_path), lora_rank=2)
    values.update(changes)
    with pytest.raises(ValueError, match=message):
        training_options(tmp_path / "run", corpus_files, **values)


@fine_tune_plumbing
@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        (dict(lora_rank=2), {"peak": 3e-3, "warmup_steps": 5, "total_steps": 100}),
        ({}, {"peak": 3e-4, "warmup_steps": 5, "total_steps": 100}),
        (
            dict(learning_rate=5e-4, overrides={"warmup_steps": 7}),
            {"peak": 5e-4, "warmup_steps": 7, "total_steps": 100},
        ),
        (
            dict(fine_tune_schedule="constant"),
            {"peak": 3e-4, "warmup_steps": 5, "total_steps": None},
        ),
        (
            dict(max_steps=None),
            {"peak": 3e-4, "warmup_steps": 100, "total_steps": None},
        ),
        (dict(max_steps=2), {"peak": 3e-4, "warmup_steps": 1, "total_steps": 2}),
    ],
)
def test_a_fine_tune_has_its_own_schedule(tmp_path, corpus_files, changes, expected):
    """Warmup over 5% of --max-steps, peak 3e-4 (full) or 3e-3 (LoRA), a
    linear decay to the last update; the paper's for training from scratch
    or when asked for."""
    values = {"max_steps": 100, **changes}
    options = fine_tune_options(tmp_path / "run", corpus_files, tmp_path, **values)
    assert fine_tune_schedule(options).get_config() == expected
    paper = fine_tune_options(
        tmp_path / "run", corpus_files, tmp_path, fine_tune_schedule="paper"
    )
    assert fine_tune_schedule(paper) is None
    scratch = training_options(tmp_path / "run", corpus_files)
    assert fine_tune_schedule(scratch) is None


def test_the_lora_run_trained_under_the_fine_tuning_schedule(lora_run):
    _, keep = lora_run
    schedule = keep.kept.optimizer._learning_rate
    assert isinstance(schedule, FineTuneSchedule) and schedule.peak() == 3e-3
    manifest = RunDirectory(lora_run[0]).manifest()
    assert manifest["identity"]["schedule"] == schedule.get_config()


def _refused(options, error, message):
    with pytest.raises(error, match=message):
        train(options)
    assert not os.path.exists(options.run_dir)


def test_a_rank_larger_than_a_projection_is_refused(tmp_path, corpus_files, base_run):
    options = fine_tune_options(tmp_path / "run", corpus_files, base_run, lora_rank=33)
    _refused(options, ValueError, r"--lora-rank 33: .*query_projection is 32x32")


def test_init_from_neither_a_run_nor_a_preset_is_refused(tmp_path, corpus_files):
    (tmp_path / "model.keras").write_text("not a model")
    options = fine_tune_options(tmp_path / "run", corpus_files, tmp_path)
    _refused(options, ValueError, "is neither a training run .* nor a preset")
    missing = fine_tune_options(tmp_path / "run", corpus_files, tmp_path / "nothing")
    _refused(missing, FileNotFoundError, "--init-from .*nothing: no such directory")


def test_a_vocabulary_flag_that_disagrees_is_refused(tmp_path, corpus_files, base_run):
    options = fine_tune_options(
        tmp_path / "run", corpus_files, base_run, vocab_size=300
    )
    _refused(options, ValueError, "--vocab-size 300: --init-from")


def test_a_store_of_another_tokenizer_is_refused(tmp_path, corpus_files, base_run):
    text = training_options(tmp_path / "unused", corpus_files)
    store = prepare_store(
        PrepareOptions(out=str(tmp_path / "store"), data=text.data, vocab_size=350)
    )
    options = fine_tune_options(
        tmp_path / "run", corpus_files, base_run,
        data=DatasetSpec(name=f"store:{store.path}"),
    )  # fmt: skip
    _refused(options, ValueError, f"store:{store.path} was encoded with .*{base_run}")
    # Text encoded with either tokenizer goes to a store of its own.
    trained = RunDirectory(base_run).tokenizer_dir
    where = {
        store_location(PrepareOptions(data=text.data, tokenizer_from=str(given)))
        for given in (trained, store.tokenizer_dir, trained)
    }
    assert len(where) == 2


@fine_tune_plumbing
def test_a_store_prepared_with_the_trained_tokenizer_is_taken(
    tmp_path, corpus_files, base_run
):
    text = training_options(tmp_path / "unused", corpus_files)
    tokenizer = RunDirectory(base_run).tokenizer_dir
    store = prepare_store(
        PrepareOptions(out=str(tmp_path / "store"), data=text.data,
                       tokenizer_from=str(tokenizer), max_length=32)
    )  # fmt: skip
    assert store.settings["vocab_size"] == 400
    options = fine_tune_options(
        tmp_path / "run", corpus_files, base_run, max_steps=1, lora_rank=1,
        data=DatasetSpec(name=f"store:{store.path}"),
    )  # fmt: skip
    assert train(options).steps == 1


@fine_tune_plumbing
def test_the_trained_config_comes_from_the_init_run(base_run, tmp_path, corpus_files):
    train(fine_tune_options(tmp_path / "run", corpus_files, base_run, max_steps=1,
                            lora_rank=1, overrides={"dropout_rate": 0.0}))  # fmt: skip
    config = RunDirectory(tmp_path / "run").load_config()
    expected = RunDirectory(base_run).load_config().replace(dropout_rate=0.0)
    assert isinstance(config, TransformerConfig) and config == expected


def test_pruning_removes_the_sidecars_and_a_missing_one_is_damage(tmp_path):
    from keras_transformer import build_transformer
    from keras_transformer.data.pipeline import DataPosition
    from tests.helpers import small_config

    model = build_transformer(small_config())
    enable_lora(model, 2, "query,value")
    model.compile(optimizer="adam")
    model.optimizer.build(model.trainable_variables)
    for step in (1, 2, 3):
        checkpoints.save_checkpoint(
            model, tmp_path, step=step, run_id="r", position=DataPosition()
        )
    checkpoints.prune_checkpoints(tmp_path, "r", keep=1)
    names = sorted(path.name for path in tmp_path.iterdir())
    assert names == [f"ckpt-00000003.{end}" for end in ("json", "keras", "lora.npz")]
    (kept,) = checkpoints.list_checkpoints(tmp_path)
    assert checkpoints.is_intact(kept)
    kept.lora_path.unlink()
    assert not checkpoints.is_intact(kept)
