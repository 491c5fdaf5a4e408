"""`Ensemble`: several Transformers decoding as one (the mean of their
log-probabilities), through `SequenceGenerator` and `Translator`; the
constructor's checks; `open_ensemble` and the shared-tokenizer check."""

from __future__ import annotations

import shutil

import keras
import numpy as np
import pytest
from keras import ops

from keras_transformer import build_transformer
from keras_transformer.config import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from keras_transformer.data.tokenizer import RESERVED_TOKENS, WordTokenizer
from keras_transformer.decoding import generator as generator_module
from keras_transformer.decoding.compile import compile_function
from keras_transformer.decoding.ensemble import (
    Ensemble,
    check_same_tokenizer,
    open_ensemble,
    tokenizer_directory,
)
from keras_transformer.decoding.generator import SequenceGenerator, cached_step_fn
from keras_transformer.decoding.search import NEG_INF
from keras_transformer.decoding.translator import Translator
from keras_transformer.run.directory import RunDirectory
from tests.helpers import set_seeded_weights, small_config

# Rows of different real lengths and an all-pad row (batch completion).
SOURCE = np.array(
    [[5, 9, 12, 7, 30], [8, 4, 0, 0, 0], [11, 23, 6, 17, 0], [0, 0, 0, 0, 0]],
    np.int32,
)
MAX_EXTRA = 4
LIMITS = [5 + MAX_EXTRA, 2 + MAX_EXTRA, 4 + MAX_EXTRA, 1]
VOCAB = 40
# A decoder input per row (BOS, then non-PAD tokens) for teacher forcing.
STEP_TOKENS = np.array(
    [
        [BOS_ID, 7, 12, EOS_ID, 9, 30],
        [BOS_ID, 4, 4, 8, 21, 5],
        [BOS_ID, 6, 19, 25, 3, 3],
        [BOS_ID, 5, 5, 5, 5, 5],
    ],
    np.int32,
)


def seeded_model(seed: int, **changes):
    """A tiny model with weights from a NumPy seed (the same on every
    backend); PAD, UNK and BOS unlikely, EOS likely enough that some rows
    end before their limit."""
    values = dict(
        vocab_size=VOCAB,
        d_model=16,
        d_ff=32,
        num_heads=2,
        num_encoder_layers=1,
        num_decoder_layers=1,
        tie_output_projection=False,
    )
    model = build_transformer(small_config(**{**values, **changes}))
    set_seeded_weights(model, seed, eos_bias=2.0)
    return model


@pytest.fixture(scope="module")
def models():
    """a, b: different sizes (and layer and head counts); c: a's shape,
    other weights."""
    return {
        "a": seeded_model(0),
        "b": seeded_model(
            1, d_model=24, num_heads=3, num_encoder_layers=2, num_decoder_layers=2
        ),
        "c": seeded_model(2),
    }


@pytest.fixture(scope="module")
def decoded(models):
    """decoded(names, beam_size, cached=True, whole=False) -> (sequences,
    scores) of the model (one name) or ensemble (several) through a compiled
    SequenceGenerator, once per module: in segments that drop the rows that
    are done (the default), or with `whole` as one program (one compile
    instead of three, where the segments are not the point)."""
    results = {}

    def get(names, beam_size, cached=True, whole=False):
        key = (names, beam_size, cached, whole)
        if key not in results:
            members = [models[name] for name in names]
            model = members[0] if len(members) == 1 else Ensemble(members)
            generator = SequenceGenerator(
                model,
                beam_size=beam_size,
                max_extra_length=MAX_EXTRA,
                cached=cached,
                jit=True,
                drop_finished=not whole,
            )
            results[key] = generator(SOURCE)
        return results[key]

    return get


def output_rows(sequences, scores):
    """(row, hypothesis, tokens up to EOS or the last real token) of every
    real hypothesis (a beam pool not filled holds about NEG_INF)."""
    for row in range(sequences.shape[0]):
        for rank in range(sequences.shape[1]):
            if rank and scores[row, rank] < NEG_INF / 2:
                continue
            tokens = [int(t) for t in sequences[row, rank]]
            if EOS_ID in tokens:
                yield row, rank, tokens[: tokens.index(EOS_ID) + 1]
            else:
                real = [i for i, t in enumerate(tokens) if t != PAD_ID]
                yield row, rank, tokens[: real[-1] + 1] if real else []


# --- the same model twice is the model --------------------------------------------


@pytest.mark.parametrize("beam_size", [1, 4], ids=["greedy", "beam4"])
def test_ensemble_of_a_model_with_itself_is_the_model(decoded, beam_size):
    tokens, scores = decoded(("a",), beam_size, whole=True)
    ensemble_tokens, ensemble_scores = decoded(("a", "a"), beam_size)
    np.testing.assert_array_equal(ensemble_tokens, tokens)
    np.testing.assert_allclose(ensemble_scores, scores, atol=1e-5, rtol=0)


# --- two different models ----------------------------------------------------------


@pytest.mark.parametrize("beam_size", [1, 4], ids=["greedy", "beam4"])
def test_ensemble_of_two_models_is_neither_and_valid(decoded, beam_size):
    tokens, scores = decoded(("a", "b"), beam_size, whole=beam_size == 1)
    for member in ("a", "b"):
        alone, _ = decoded((member,), beam_size, whole=True)
        assert not np.array_equal(tokens[:, 0], alone[:, 0]), member
    ended = 0
    for row, rank, output in output_rows(tokens, scores):
        what = f"row {row} hypothesis {rank}: {output}"
        assert PAD_ID not in output and BOS_ID not in output, what
        assert UNK_ID not in output, what  # Suppressed unless allowed.
        assert output[-1] == EOS_ID or len(output) == LIMITS[row], what
        assert len(output) <= LIMITS[row], what
        ended += output[-1] == EOS_ID
    assert ended  # Some rows end early: EOS is reached, not only limits.
    assert np.all(np.isfinite(scores[:, 0])) and np.all(scores[:, 0] <= 0)


@pytest.mark.parametrize("beam_size", [1, 4], ids=["greedy", "beam4"])
def test_cached_equals_uncached(decoded, beam_size):
    """The uncached search repeats and gathers the ensemble's memory (the
    models' encoder outputs side by side) where the cached one keeps each
    model's caches."""
    tokens, scores = decoded(("a", "b"), beam_size, whole=beam_size == 1)
    uncached_tokens, uncached_scores = decoded(
        ("a", "b"), beam_size, cached=False, whole=True
    )
    np.testing.assert_array_equal(uncached_tokens, tokens)
    np.testing.assert_allclose(uncached_scores, scores, atol=1e-4, rtol=0)


def test_segments_grow_and_gather_every_models_caches(models, monkeypatch):
    """Between segments a search pads the caches to more positions and
    keeps the rows not done (`SequenceGenerator._grow_cache`, `_keep_rows`,
    over `keras.tree`): each model's caches, of its own heads and width,
    follow. (A batch of at most `SMALL_BATCH` rows starts at the full
    length: here 4, so that this one of 6 starts short.)"""
    monkeypatch.setattr(generator_module, "SMALL_BATCH", 4)
    ensemble = Ensemble([models["a"], models["b"]])
    generator = SequenceGenerator(
        ensemble, beam_size=2, max_extra_length=MAX_EXTRA, segment_steps=2
    )
    source = np.concatenate([SOURCE, SOURCE[:2]])
    max_length = source.shape[1] + MAX_EXTRA
    carry = generator._start(ops.convert_to_tensor(source))  # 4 positions.
    carry = generator._grow_cache(carry, 6, max_length)
    cache = carry["loop"]["state"]
    heads = [(m.config.num_heads, m.config.head_dim) for m in ensemble.models]
    for model_cache, (h, k), model in zip(cache, heads, ensemble.models):
        assert len(model_cache) == model.config.num_decoder_layers
        for layer in model_cache:
            assert [tuple(x.shape) for x in layer] == [(12, h, 8, k)] * 2
    active = np.array([True, False, False, False, True, False])
    carry, rows = generator_module._keep_rows(carry, active, np.arange(6), 2)
    assert rows.tolist() == [0, 4]
    for model_cache, (h, k) in zip(carry["loop"]["state"], heads):
        assert {tuple(x.shape) for x in keras.tree.flatten(model_cache)} == {
            (4, h, 8, k)
        }
    # The cross-attention keys/values: one row per sentence.
    for model_keys_values, (h, _) in zip(carry["cross_key_values"], heads):
        shapes = {tuple(x.shape)[:2] for x in keras.tree.flatten(model_keys_values)}
        assert shapes == {(2, h)}


def _numpy_log_softmax(logits):
    logits = np.asarray(logits, np.float64)
    shifted = logits - logits.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def _step_by_step(model, source_ids, tokens):
    """The cached step function fed one token of `tokens` (B, T) per step:
    (B, T, V), as the search sees each step."""
    batch_size, steps = ops.shape(tokens)
    step_fn = cached_step_fn(model, source_ids, model.encode(source_ids))

    def body(step, carry):
        cache, out = carry
        current = ops.slice(tokens, [0, step], [batch_size, 1])
        scores, cache = step_fn(current, step, cache)
        return cache, ops.slice_update(out, [0, step, 0], scores[:, None])

    out = ops.zeros((batch_size, steps, model.config.output_vocab_size), "float32")
    carry = (model.init_decode_cache(batch_size, steps), out)
    return ops.fori_loop(0, steps, body, carry)[1]


def test_step_log_probs_are_the_mean_of_the_models_log_softmax(models):
    ensemble = Ensemble([models["a"], models["b"]])

    def run(source_ids, tokens):
        memory = ensemble.encode(source_ids)
        return (
            ensemble.decode(tokens, memory, source_ids),
            _step_by_step(ensemble, source_ids, tokens),
            [
                m.decode(tokens, m.encode(source_ids), source_ids)
                for m in ensemble.models
            ],
        )

    if keras.backend.backend() == "jax":  # Its eager mode compiles every op.
        run = compile_function(run, ensemble)
    whole, steps, each = keras.tree.map_structure(
        ops.convert_to_numpy, run(SOURCE, STEP_TOKENS)
    )
    expected = np.mean([_numpy_log_softmax(logits) for logits in each], axis=0)
    assert whole.dtype == steps.dtype == np.float32
    assert whole.shape == STEP_TOKENS.shape + (VOCAB,)
    np.testing.assert_allclose(whole, expected, atol=1e-5, rtol=0)
    np.testing.assert_allclose(steps, expected, atol=1e-4, rtol=0)
    # The models disagree, so the mean is neither's.
    assert np.abs(_numpy_log_softmax(each[0]) - expected).max() > 1e-2


def test_attention_weights_are_the_mean_or_the_first_models(models):
    """The mean over the models when their layer and head counts agree
    (a, c), else the first model's (a, b)."""
    a, b, c = models["a"], models["b"], models["c"]

    def run(source, target):
        return [
            model.attention_weights(source, target)
            for model in (Ensemble([a, c]), a, c, Ensemble([a, b]))
        ]

    if keras.backend.backend() == "jax":  # Its eager mode compiles every op.
        run = compile_function(run, Ensemble([a, b, c]))
    same_shape, *each, mixed = keras.tree.map_structure(
        ops.convert_to_numpy, run(SOURCE[:2], STEP_TOKENS[:2])
    )
    assert same_shape.keys() == each[0].keys() == mixed.keys()
    for name, layers in same_shape.items():
        assert len(layers) == len(each[0][name])
        for layer, weights in enumerate(layers):
            expected = (each[0][name][layer] + each[1][name][layer]) / 2
            np.testing.assert_allclose(weights, expected, atol=1e-6, err_msg=name)
        assert np.abs(each[0][name][0] - each[1][name][0]).max() > 1e-3, name
        for weights, expected in zip(mixed[name], each[0][name], strict=True):
            np.testing.assert_array_equal(weights, expected)


# --- through Translator ------------------------------------------------------------


def word_tokenizer(words) -> WordTokenizer:
    return WordTokenizer([*RESERVED_TOKENS, *words])


# One word per id of the models' vocabulary.
WORDS = [f"w{i}" for i in range(len(RESERVED_TOKENS), VOCAB)]


@pytest.fixture(scope="module")
def tokenizer():
    return word_tokenizer(WORDS)


def test_translator_with_an_ensemble_of_one_model_twice(models, decoded, tokenizer):
    """Translator (texts sorted, padded to 8, the batch completed, a blank
    text not searched) with the ensemble of `a` with itself finds what
    `SequenceGenerator` finds with `a` alone for SOURCE's rows."""
    texts = [" ".join(tokenizer.id_to_piece(i) for i in row if i) for row in SOURCE]
    assert tokenizer.encode(texts) == [[int(i) for i in row if i] for row in SOURCE]
    translator = Translator(
        Ensemble([models["a"], models["a"]]),
        tokenizer,
        beam_size=4,
        max_extra_length=MAX_EXTRA,
        batch_size=4,
        drop_finished=False,
    )
    results = translator.search(texts)
    tokens, scores = decoded(("a",), 4, whole=True)
    assert texts[3] == "" and results[3][0].shape == (4, 0)
    for row in range(3):
        ids, found = results[row]
        real = scores[row] > NEG_INF / 2  # Hypotheses of a filled pool.
        np.testing.assert_array_equal(found > NEG_INF / 2, real)
        np.testing.assert_allclose(found[real], scores[row][real], atol=1e-5, rtol=0)
        for rank in np.flatnonzero(real):
            expected = tokens[row, rank]
            np.testing.assert_array_equal(
                ids[rank][ids[rank] != PAD_ID], expected[expected != PAD_ID]
            )
    assert translator.translate(texts[:1]) == tokenizer.detokenize(tokens[:1, 0])


# --- the constructor's checks ------------------------------------------------------


def test_ensemble_refuses_no_model_and_other_vocabularies(models):
    with pytest.raises(ValueError, match="at least one model"):
        Ensemble([])
    unshared = dict(share_embeddings=False, num_encoder_layers=1)
    other_output = build_transformer(
        small_config(vocab_size=VOCAB, target_vocab_size=VOCAB + 1, **unshared)
    )
    with pytest.raises(ValueError, match="must share their vocabularies") as refused:
        Ensemble([models["a"], other_output])
    assert "has output vocabulary size 41 (model 0: 40)," in str(refused.value)
    other_source = build_transformer(
        small_config(vocab_size=VOCAB + 2, target_vocab_size=VOCAB, **unshared)
    )
    with pytest.raises(ValueError, match="must share their vocabularies") as refused:
        Ensemble([models["a"], other_source])
    assert "has source vocabulary size 42 (model 0: 40)," in str(refused.value)
    with pytest.raises(TypeError, match="model 1 is a str"):
        Ensemble([models["a"], "model.keras"])


def test_ensemble_takes_models_of_other_sizes(models):
    ensemble = Ensemble([models["a"], models["b"]])
    assert ensemble.config is models["a"].config
    assert len(ensemble) == 2
    assert len(ensemble.variables) == len(models["a"].variables) + len(
        models["b"].variables
    )
    # A model given twice shares its variables: each is a compiled input once.
    assert len(Ensemble([models["a"]] * 2).variables) == len(models["a"].variables)


# --- open_ensemble: runs, .keras files, the shared tokenizer -----------------------


def _tiny(vocab_size: int, seed: int):
    keras.utils.set_random_seed(seed)
    return build_transformer(
        small_config(
            vocab_size=vocab_size,
            d_model=16,
            d_ff=32,
            num_heads=2,
            num_encoder_layers=1,
            num_decoder_layers=1,
        )
    )


@pytest.fixture(scope="module")
def runs(tmp_path_factory, tokenizer):
    """main and member: runs with the same tokenizer (member also with a
    checkpoint); other: a run with another tokenizer of the same size;
    loose/: .keras files in no run, of the main vocabulary and another."""
    root = tmp_path_factory.mktemp("runs")
    other_tokenizer = word_tokenizer(WORDS[::-1])  # Same size, other ids.
    vocab = tokenizer.vocab_size
    paths = {name: root / name for name in ("main", "member", "other")}
    RunDirectory(paths["main"]).save_model(_tiny(vocab, 0), tokenizer)
    RunDirectory(paths["member"]).save_model(_tiny(vocab, 1), tokenizer)
    RunDirectory(paths["other"]).save_model(_tiny(vocab, 2), other_tokenizer)
    (paths["member"] / "checkpoints").mkdir()
    paths["checkpoint"] = paths["member"] / "checkpoints" / "ckpt-4.keras"
    shutil.copy(paths["member"] / "model.keras", paths["checkpoint"])
    (root / "loose").mkdir()
    paths["loose"] = root / "loose" / "same_vocab.keras"
    shutil.copy(paths["member"] / "model.keras", paths["loose"])
    paths["loose_other"] = root / "loose" / "other_vocab.keras"
    _tiny(vocab + 1, 3).save(paths["loose_other"])
    paths["not_a_run"] = root / "loose"
    paths["text"] = root / "loose" / "notes.txt"
    paths["text"].write_text("not a model\n", encoding="utf-8")
    return paths


@pytest.fixture(scope="module")
def main_run(runs):
    return RunDirectory(runs["main"]).open_for_inference()


def test_open_ensemble_takes_runs_and_their_model_files(runs, main_run):
    specs = [runs["member"], runs["member"] / "model.keras", runs["checkpoint"]]
    ensemble = open_ensemble(main_run, [str(spec) for spec in specs])
    assert isinstance(ensemble, Ensemble) and len(ensemble) == 4
    assert ensemble.models[0] is main_run.model
    member = RunDirectory(runs["member"]).load_model()
    for loaded in ensemble.models[1:]:
        for mine, theirs in zip(loaded.get_weights(), member.get_weights()):
            np.testing.assert_array_equal(mine, theirs)
    replaced = open_ensemble(main_run, [], model=member)
    assert replaced.models == (member,)


def test_a_model_file_in_no_run_needs_the_same_vocabulary(runs, main_run):
    with pytest.warns(UserWarning, match="in no run directory"):
        ensemble = open_ensemble(main_run, [str(runs["loose"])])
    assert len(ensemble) == 2
    with pytest.raises(ValueError, match="in no run directory") as refused:
        open_ensemble(main_run, [str(runs["loose_other"])])
    assert str(runs["loose_other"]) in str(refused.value)
    assert "vocabulary sizes" in str(refused.value)


def test_another_tokenizer_is_refused_naming_both_directories(runs, main_run):
    directories = [
        tokenizer_directory(runs["main"]),
        tokenizer_directory(runs["other"]),
    ]
    assert directories[0] == RunDirectory(runs["main"]).tokenizer_dir
    for attempt in (
        lambda: check_same_tokenizer(runs["main"], runs["other"]),
        lambda: open_ensemble(main_run, [str(runs["other"])]),
        lambda: open_ensemble(main_run, [str(runs["other"] / "model.keras")]),
    ):
        with pytest.raises(ValueError, match="must share the tokenizer") as refused:
            attempt()
        assert all(str(path) in str(refused.value) for path in directories)
    check_same_tokenizer(runs["main"], RunDirectory(runs["member"]).tokenizer_dir)


@pytest.mark.parametrize("name", ["absent", "not_a_run", "text"])
def test_a_path_that_is_neither_a_run_nor_a_model_is_refused(runs, main_run, name):
    path = runs.get(name, runs["main"] / "absent")
    with pytest.raises(ValueError, match="expected a run directory") as refused:
        open_ensemble(main_run, [str(path)])
    assert str(path) in str(refused.value)
