"""Sampling (`decoding.sampling`): the draw against closed forms, the
settings' refusals, and seeded samples through `Translator`."""

from __future__ import annotations

import keras
import numpy as np
import pytest

from keras_transformer import build_transformer
from keras_transformer.data.tokenizer import train_tokenizer
from keras_transformer.decoding.sampling import (
    SamplingSettings,
    draw_tokens,
    uniform_numbers,
)
from keras_transformer.decoding.search import SUPPRESSED
from keras_transformer.decoding.translator import Translator
from tests.helpers import make_corpus, small_config, to_numpy

# --- The draw ---------------------------------------------------------------

PROBS = np.array([0.1, 0.5, 0.0, 0.3, 0.1])  # Sorted: 1, 3, then 0 and 4.


def _draw(uniform, **settings):
    log_probs = np.log(np.maximum(PROBS, 1e-30)).astype("float32")
    log_probs[2] = SUPPRESSED  # As the search suppresses an id.
    rows = np.tile(log_probs, (len(uniform), 1))
    options = {"top_k": None, "top_p": 1.0, "temperature": 1.0, **settings}
    tokens = draw_tokens(rows, np.asarray(uniform, "float32"), **options)
    return to_numpy(tokens).tolist()


def test_the_draw_inverts_the_sorted_cumulative_distribution():
    # Sorted by probability: token 1 (0.5), 3 (0.3), then 0 and 4 (0.1
    # each, in some order): u below 0.5 draws 1, below 0.8 draws 3.
    assert _draw([0.0, 0.49, 0.51, 0.79]) == [1, 1, 3, 3]
    assert set(_draw([0.81, 0.99])) <= {0, 4}


def test_draw_frequencies_match_the_probabilities():
    uniform = (np.arange(1000) + 0.5) / 1000  # An even grid over [0, 1).
    counts = np.bincount(_draw(uniform), minlength=5)
    np.testing.assert_allclose(counts / 1000, PROBS, atol=2e-3)


def test_top_k_keeps_the_k_most_probable_renormalised():
    uniform = (np.arange(1000) + 0.5) / 1000
    counts = np.bincount(_draw(uniform, top_k=2), minlength=5)
    np.testing.assert_allclose(counts / 1000, [0, 0.625, 0, 0.375, 0], atol=2e-3)
    assert _draw(uniform[::97], top_k=1) == [1] * len(uniform[::97])


def test_top_p_keeps_the_fewest_tokens_reaching_p():
    uniform = (np.arange(1000) + 0.5) / 1000
    # 0.5 < 0.6, so token 3 is needed too; 0.5 + 0.3 >= 0.6 ends the set.
    counts = np.bincount(_draw(uniform, top_p=0.6), minlength=5)
    np.testing.assert_allclose(counts / 1000, [0, 0.625, 0, 0.375, 0], atol=2e-3)
    # A p the most probable token reaches alone is the argmax.
    assert set(_draw(uniform, top_p=0.45)) == {1}


def _sorted_draw(log_probs, uniform, top_p, temperature):
    """Top-p by the closed form, over the whole sorted vocabulary (NumPy)."""
    scores = log_probs.astype(np.float64) / temperature
    order = np.argsort(-scores, axis=-1, kind="stable")
    probs = np.exp(np.take_along_axis(scores, order, -1))
    probs /= probs.sum(-1, keepdims=True)
    probs = np.where(np.cumsum(probs, -1) - probs < top_p, probs, 0.0)
    cdf = np.cumsum(probs, -1)
    index = (cdf <= uniform[:, None] * cdf[:, -1:]).sum(-1)
    return np.take_along_axis(order, index[:, None], -1)[:, 0].tolist()


def test_top_p_looks_among_the_head_first_and_draws_as_over_all():
    """A large vocabulary: rows whose nucleus lies among the first
    NUCLEUS_HEAD tokens draw there, a batch with a flat row sorts it all;
    both draw what the whole sorted vocabulary gives."""
    from keras_transformer.decoding.sampling import NUCLEUS_HEAD

    rng = np.random.default_rng(3)
    vocab = 4 * NUCLEUS_HEAD
    peaked = rng.normal(size=(8, vocab)) * 4  # Most mass on a few tokens.
    flat = rng.normal(size=(1, vocab)) * 0.01  # Its nucleus: most of them.
    uniform = rng.random(9).astype("float32")
    for rows in (peaked, np.concatenate([peaked, flat])):
        log_probs = rows - np.log(np.exp(rows).sum(-1, keepdims=True))
        log_probs = log_probs.astype("float32")
        u = uniform[: len(rows)]
        for top_p, temperature in ((0.9, 1.0), (0.5, 0.7)):
            tokens = to_numpy(
                draw_tokens(log_probs, u, top_k=None, top_p=top_p,
                            temperature=temperature)
            ).tolist()  # fmt: skip
            assert tokens == _sorted_draw(log_probs, u, top_p, temperature)
    head = np.sort(np.exp(log_probs[-1]))[::-1][:NUCLEUS_HEAD].sum()
    assert head < 0.5  # The flat row's nucleus is past the head.


def test_temperature_flattens_or_sharpens():
    uniform = (np.arange(2000) + 0.5) / 2000
    for temperature in (0.5, 2.0):
        counts = np.bincount(_draw(uniform, temperature=temperature), minlength=5)
        expected = np.where(PROBS > 0, PROBS ** (1 / temperature), 0)
        np.testing.assert_allclose(counts / 2000, expected / expected.sum(), atol=2e-3)


def test_uniform_numbers_depend_on_the_seed_sentence_and_sample_only():
    numbers = uniform_numbers(3, [5, 5, -1, 2], [0, 1, 0, 0], 20)
    assert numbers.shape == (4, 20) and numbers.dtype == np.float32
    assert ((numbers[[0, 1, 3]] >= 0) & (numbers[[0, 1, 3]] < 1)).all()
    assert not numbers[2].any()  # A filler row.
    again = uniform_numbers(3, [2, 5], [0, 1], 12)  # Other batch and length.
    np.testing.assert_array_equal(again[0], numbers[3, :12])
    np.testing.assert_array_equal(again[1], numbers[1, :12])
    assert not np.array_equal(numbers[0], numbers[1])
    assert not np.array_equal(uniform_numbers(4, [5], [0], 20)[0], numbers[0])


# --- Settings -------------------------------------------------------------


@pytest.mark.parametrize(
    "values, message",
    [
        ({"sampling": "top-p", "top_p": 0.0}, r"top_p \(--top-p\) must be > 0"),
        ({"sampling": "top-p", "top_p": 1.5}, r"top_p \(--top-p\) must be <= 1"),
        ({"sampling": "top-k", "top_k": 0}, r"top_k \(--top-k\) must be >= 1"),
        (
            {"sampling": "top-k", "temperature": 0.0},
            r"--temperature\) must be > 0: at 0 every draw .* greedy decoding",
        ),
        ({"sampling": "top-k", "temperature": -1.0}, r"must be > 0"),
        ({"sampling": "top-p", "top_k": 5}, "--top-k applies to --sampling top-k"),
        ({"sampling": "top-k", "top_p": 0.5}, "--top-p applies to --sampling top-p"),
        ({"seed": 1}, "--seed applies to sampling only"),
        ({"num_samples": 2}, "--num-samples applies to sampling only"),
        ({"sampling": "beam"}, r"sampling \(--sampling\) must be one of"),
        ({"sampling": "top-k", "seed": 2**32}, r"seed \(--seed\) must be <="),
        (
            {"sampling": "top-k", "num_samples": 1001},
            r"num_samples \(--num-samples\) must be <= 1000",
        ),
    ],
)
def test_bad_settings_are_refused_naming_the_flag(values, message):
    with pytest.raises(ValueError, match=message):
        SamplingSettings(**values)


def test_unset_values_take_the_documented_defaults():
    top_k = SamplingSettings(sampling="top-k")
    assert (top_k.k, top_k.p, top_k.draw_temperature, top_k.samples) == (
        10,
        1.0,
        1.0,
        1,
    )
    assert SamplingSettings(sampling="top-p").p == 0.9
    assert not SamplingSettings().is_sampling


# --- Through Translator -------------------------------------------------------

TEXTS = ["the dog sleeps.", "", "the old man likes the garden.", "water."]


@pytest.fixture(scope="module")
def tokenizer():
    return train_tokenizer(make_corpus(), 300)


@pytest.fixture(scope="module")
def model(tokenizer):
    keras.utils.set_random_seed(4)
    return build_transformer(small_config(vocab_size=tokenizer.vocab_size))


def _sampler(model, tokenizer, **values):
    return Translator(
        model, tokenizer, beam_size=1, sampling=SamplingSettings(**values)
    )


def test_top_k_1_is_greedy_search(model, tokenizer):
    greedy = Translator(model, tokenizer, beam_size=1).search(TEXTS)
    sampled = _sampler(model, tokenizer, sampling="top-k", top_k=1).search(TEXTS)
    for (ids, scores), (expected_ids, expected_scores) in zip(sampled, greedy):
        np.testing.assert_array_equal(ids, expected_ids)
        np.testing.assert_allclose(scores, expected_scores, atol=1e-6)


def test_a_seed_gives_the_same_samples_and_another_seed_others(model, tokenizer):
    first = _sampler(model, tokenizer, sampling="top-p", top_p=0.95, seed=7)
    # On first's program (a new Translator with a seed draws as `resampled`
    # with it: the test below), so that only the seed differs; each new
    # Translator compiles its own search (~10 s on TensorFlow).
    again = first.resampled(seed=7, num_samples=None)
    other = first.resampled(seed=8, num_samples=None)
    assert first.translate(TEXTS) == again.translate(TEXTS)
    assert first.translate(TEXTS) != other.translate(TEXTS)
    # A sentence draws the same whatever else is in its batch.
    alone = Translator(
        model,
        tokenizer,
        beam_size=1,
        batch_size=1,
        sampling=SamplingSettings(sampling="top-p", top_p=0.95, seed=7),
    )
    assert alone.translate(TEXTS) == first.translate(TEXTS)


@pytest.mark.backend_neutral  # Bookkeeping over the drawn rows; CI time.
def test_several_samples_per_text_with_their_scores(model, tokenizer):
    sampler = _sampler(model, tokenizer, sampling="top-k", top_k=20, num_samples=3)
    records = sampler.generate(TEXTS)
    assert len(records) == len(TEXTS)
    for record, text in zip(records, TEXTS):
        assert len(record["samples"]) == 3
        assert record["samples"][0] == {
            k: v for k, v in record.items() if k != "samples"
        }
        if not text:
            continue
        assert len({s["translation"] for s in record["samples"]}) > 1
        for sample in record["samples"]:
            assert sample["normalization"] == "log-probability (none)"
            assert sum(sample["token_scores"]) == pytest.approx(
                sample["score"], abs=1e-4
            )


def test_resampled_draws_as_a_new_translator_on_the_same_program(model, tokenizer):
    """A server's seed and samples per request: `resampled` gives what a
    Translator made with them gives, and compiles nothing new."""
    from keras_transformer.decoding.compile import compilations

    base = _sampler(model, tokenizer, sampling="top-k", top_k=20)
    base.search(TEXTS)  # Compiles.
    compiled = compilations()
    resampled = base.resampled(seed=9, num_samples=2)
    made = _sampler(model, tokenizer, sampling="top-k", top_k=20, seed=9, num_samples=2)
    assert resampled.nbest(TEXTS) == made.nbest(TEXTS)
    assert base.sampling.seed is None and resampled.sampling.samples == 2
    assert resampled.generator is base.generator
    if keras.backend.backend() != "torch":  # Torch runs eagerly: counts 0.
        assert compilations() > compiled  # `made` compiled its own ...
    before = compilations()
    base.resampled(seed=10, num_samples=1).search(TEXTS)
    assert compilations() == before  # ... `resampled` nothing.
    with pytest.raises(ValueError, match="does not sample"):
        Translator(model, tokenizer, beam_size=1).resampled(1, 1)


def test_sampling_with_a_beam_is_refused(model, tokenizer):
    with pytest.raises(ValueError, match="needs --beam-size 1"):
        Translator(
            model, tokenizer, beam_size=4, sampling=SamplingSettings(sampling="top-k")
        )


def test_constraints_with_sampling_are_refused(model, tokenizer):
    sampler = _sampler(model, tokenizer, sampling="top-k")
    with pytest.raises(ValueError, match="work with the search, not sampling"):
        sampler.generate(TEXTS, prefixes=[[5]] * len(TEXTS))


def test_constraints_for_another_number_of_texts_are_refused(model, tokenizer):
    translator = Translator(model, tokenizer, beam_size=1)
    with pytest.raises(ValueError, match="constraints holds 1 entries for 4 texts"):
        translator.generate(TEXTS, constraints=[[]])
