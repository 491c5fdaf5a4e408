"""Constrained beam search (DBA) and forced prefixes: the search on a NumPy
step function and on a briefly trained tiny model (the file readers:
test_constraint_files.py)."""

from __future__ import annotations

import keras
import numpy as np
import pytest

from keras_transformer import build_transformer
from keras_transformer.config import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from keras_transformer.data.tokenizer import WordTokenizer
from keras_transformer.decoding import numpy_search
from keras_transformer.decoding.batching import pad_batch
from keras_transformer.decoding.compile import compilations
from keras_transformer.decoding.constraints import (
    ConstrainedGenerator,
    PhraseTracker,
    allocate,
    bank_sizes,
    check_requests,
    constrained_search,
)
from keras_transformer.decoding.generator import SequenceGenerator
from keras_transformer.decoding.settings import SearchSettings
from tests.helpers import make_corpus, predict_logits, small_config


def contains(ids, phrase) -> bool:
    ids, phrase = [int(i) for i in ids], list(phrase)
    return any(
        ids[i : i + len(phrase)] == phrase for i in range(len(ids) - len(phrase) + 1)
    )


# --- constraint progress and banks -------------------------------------------------


def test_a_phrase_left_midway_loses_its_progress():
    tracker = PhraseTracker([[5, 6, 7]])
    progress = tracker.start
    for token in (5, 6):
        progress = tracker.advance(progress, token)
    assert progress.tail == (5, 6) and tracker.tokens_met(progress) == 2
    progress = tracker.advance(progress, 9)  # Abandoned: back to bank 0.
    assert progress.tail == () and tracker.tokens_met(progress) == 0
    assert tracker.next_tokens(progress) == {5}
    assert tracker.unmet(progress) == [0]


def test_the_token_that_breaks_a_phrase_may_start_it_again():
    tracker = PhraseTracker([[5, 6], [8]])
    progress = tracker.start
    for token in (5, 5, 6):  # "a a b" holds "a b".
        progress = tracker.advance(progress, token)
    assert progress.met == 0b01 and tracker.unmet(progress) == [1]
    assert tracker.next_tokens(progress) == {8}
    progress = tracker.advance(progress, 8)
    assert tracker.is_met(progress) and tracker.tokens_met(progress) == 3


def test_a_phrase_inside_another_is_met_where_it_ends():
    tracker = PhraseTracker([[4, 5, 6], [5]])
    progress = tracker.advance(tracker.advance(tracker.start, 4), 5)
    assert progress.met == 0b10 and progress.tail == (4, 5)
    # Mid-phrase, both continuing and starting over are candidates.
    assert tracker.next_tokens(progress) == {6, 4}


def test_banks_share_the_beam_and_pass_on_what_they_cannot_fill():
    assert bank_sizes(3, 4, [9, 9, 9]) == [1, 1, 2]
    assert bank_sizes(3, 4, [9, 9, 0]) == [1, 3, 0]
    # More banks than slots: all to the top, passed down to where the
    # candidates are.
    assert bank_sizes(6, 4, [0, 0, 0, 9, 0, 0]) == [0, 0, 0, 4, 0, 0]
    # A slot no bank can use goes to the best candidate left.
    assert allocate([1, 1, 1, 1, 1], num_banks=3, beam_size=3) == [0, 1, 2]
    assert allocate([0, 0, 0, 2, 0], num_banks=3, beam_size=2) == [0, 3]


def test_malformed_requests_are_refused_naming_the_sentence():
    with pytest.raises(ValueError, match="2 entries for 3 sentences"):
        check_requests([[], []], None, 3, (PAD_ID, BOS_ID))
    with pytest.raises(ValueError, match="sentence 1, phrase 0 is empty"):
        check_requests([[], [[]]], None, 2, (PAD_ID, BOS_ID))
    with pytest.raises(ValueError, match=r"sentence 0, prefix holds ids \[3\]"):
        check_requests(None, [[7, EOS_ID]], 1, (PAD_ID, BOS_ID))
    with pytest.raises(ValueError, match=r"phrase 0 holds ids \[1\]"):
        check_requests([[[6, UNK_ID]]], None, 1, (PAD_ID, BOS_ID, UNK_ID))


# --- the search on a NumPy step function -------------------------------------------

V = 14
_RNG = np.random.default_rng(0)
TABLE = _RNG.normal(size=(2, V, V)).astype(np.float32) * 2


def numpy_step(tokens, step, state):
    """Logits from the last token and the row's history (so a wrong
    reorder shows); EOS grows likelier with the step."""
    logits = TABLE[0, tokens[:, 0]] + TABLE[1, state % V]
    logits[:, EOS_ID] += 0.4 * step
    return logits, (state * 3 + tokens[:, 0]) % 101


def numpy_reorder(state, rows):
    return state[rows]


def plain(beam_size, limits, alpha=0.6):
    """numpy_search's beam (or greedy) search on `numpy_step`."""
    rows = len(limits) * beam_size
    state = [np.zeros(rows, np.int64)]

    def step_fn(tokens, step, state, context):
        logits, history = numpy_step(tokens, step, state[0])
        return logits, [history]

    if beam_size == 1:
        return numpy_search.greedy_search(step_fn, state, [], limits, int(limits.max()))
    return numpy_search.beam_search(
        step_fn, state, [], limits, int(limits.max()), beam_size=beam_size, alpha=alpha
    )


LIMITS = np.array([9, 6, 12, 1], np.int32)


def search(beam_size, limits=LIMITS, **requests):
    rows = len(limits) * beam_size
    return constrained_search(
        numpy_step,
        numpy_reorder,
        np.zeros(rows, np.int64),
        limits,
        beam_size=beam_size,
        **requests,
    )


def strip(row):
    return [int(t) for t in row if t != PAD_ID]


@pytest.mark.parametrize("beam_size", [4, 1], ids=["beam4", "greedy"])
def test_without_constraints_the_search_is_numpy_searchs(beam_size):
    sequences, scores = plain(beam_size, LIMITS)
    results = search(beam_size)
    for row, result in enumerate(results):
        assert result.satisfied and result.unmet == []
        assert [int(t) for t in result.ids] == strip(sequences[row, 0])
        expected = scores[row, 0]
        if beam_size == 1:  # Greedy scores are total log-probabilities.
            expected /= numpy_search.length_penalty(len(result.ids), 0.6)
        assert result.score == pytest.approx(float(expected), abs=1e-6)


@pytest.mark.parametrize("beam_size", [4, 1], ids=["beam4", "greedy"])
def test_random_phrases_and_prefixes_are_all_met(beam_size):
    rng = np.random.default_rng(1)
    limits = np.full(6, 12, np.int32)
    constraints = [
        [list(rng.integers(4, V, size=rng.integers(1, 4))) for _ in range(count)]
        for count in (1, 2, 2, 1, 2, 0)
    ]
    prefixes = [[], [], [9, 4], [], [5], [7, 7]]
    results = search(beam_size, limits, constraints=constraints, prefixes=prefixes)
    for result, phrases, prefix in zip(results, constraints, prefixes):
        assert result.satisfied, (phrases, result)
        assert all(contains(result.ids, phrase) for phrase in phrases)
        assert [int(t) for t in result.ids[: len(prefix)]] == prefix
        # Ended by EOS, or (this step function is no translator) the limit.
        assert int(result.ids[-1]) == EOS_ID or len(result.ids) == 12
        assert EOS_ID not in result.ids[:-1]


# --- a briefly trained tiny model --------------------------------------------------

SETTINGS = SearchSettings(beam_size=4, max_extra_length=6)
SOURCES = [
    "the dog sees a cat.",
    "a big man likes the red ball.",
    "the child sleeps.",
    "old woman eats water.",
]


@pytest.fixture(scope="module")
def trained():
    """A 1 + 1 layer model that has learnt, in 100 Adam steps, to copy toy
    sentences roughly and end them with EOS; its word tokenizer."""
    texts = make_corpus(400, seed=1)
    tokenizer = WordTokenizer.train(texts, 64)
    keras.utils.set_random_seed(0)
    config = small_config(
        vocab_size=tokenizer.vocab_size, num_encoder_layers=1, num_decoder_layers=1
    )
    model = build_transformer(config)
    model.compile(
        optimizer=keras.optimizers.Adam(1e-2),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    sources, _ = tokenizer.tokenize(texts)
    targets, _ = tokenizer.tokenize(texts, add_eos=True)
    bos = np.full((len(texts), 1), BOS_ID, np.int32)
    inputs = np.concatenate([bos, targets[:, :-1]], axis=1)
    for step in range(100):
        batch = slice(step * 50 % len(texts), step * 50 % len(texts) + 50)
        model.train_on_batch(
            {"source_ids": sources[batch], "target_ids": inputs[batch]},
            targets[batch],
            sample_weight=(targets[batch] != PAD_ID).astype(np.float32),
        )
    return model, tokenizer


@pytest.fixture(scope="module")
def generators(trained):
    """One generator per beam size, so each compiles its programs once."""
    model, _ = trained
    made = {}

    def get(beam_size):
        if beam_size not in made:
            settings = SETTINGS.replace(beam_size=beam_size)
            made[beam_size] = ConstrainedGenerator(model, settings)
        return made[beam_size]

    return get


def encode(tokenizer, texts):
    return tokenizer.encode(list(texts))


def source_batch(tokenizer, texts=SOURCES):
    return pad_batch(encode(tokenizer, texts))


def forced_scores(model, source_ids, outputs):
    """log P(output) / lp(|output|) of each output, from the whole decoder
    run once with teacher forcing."""
    width = max(len(ids) for ids in outputs)
    targets = np.zeros((len(outputs), width), np.int32)
    for row, ids in enumerate(outputs):
        targets[row, : len(ids)] = ids
    inputs = np.concatenate([np.full((len(outputs), 1), BOS_ID), targets[:, :-1]], 1)
    log_probs = numpy_search.log_softmax(predict_logits(model, source_ids, inputs))
    chosen = np.take_along_axis(log_probs, targets[..., None], axis=2)[..., 0]
    totals = np.where(targets != PAD_ID, chosen, 0).sum(axis=1)
    lengths = [len(ids) for ids in outputs]
    return totals / numpy_search.length_penalty(lengths, SETTINGS.alpha)


@pytest.mark.parametrize("beam_size", [4, 1], ids=["beam4", "greedy"])
def test_every_phrase_appears_in_the_output(trained, generators, beam_size):
    model, tokenizer = trained
    phrases = [["garden"], ["small house", "tree"], ["big red"], ["bird", "runs"]]
    constraints = [encode(tokenizer, texts) for texts in phrases]
    results = generators(beam_size)(source_batch(tokenizer), constraints)
    for result, wanted in zip(results, constraints):
        assert result.satisfied and result.unmet == [] and result.prefix_complete
        assert all(contains(result.ids, phrase) for phrase in wanted), result
        assert int(result.ids[-1]) == EOS_ID and EOS_ID not in result.ids[:-1]
    # The scores are the model's log-probabilities of the tokens chosen.
    expected = forced_scores(model, source_batch(tokenizer), [r.ids for r in results])
    np.testing.assert_allclose([r.score for r in results], expected, atol=1e-4)


def test_the_prefix_is_forced_and_the_rest_continues_it(trained, generators):
    model, tokenizer = trained
    prefixes = encode(tokenizer, ["a bird", "house garden tree", "", "the"])
    constraints = [[], encode(tokenizer, ["cat."]), [], []]
    sources = source_batch(tokenizer)
    results = generators(4)(sources, constraints, prefixes)
    limits = numpy_search.output_limits(sources, SETTINGS.max_extra_length)
    for result, prefix, limit in zip(results, prefixes, limits):
        ids = [int(t) for t in result.ids]
        assert result.satisfied and ids[: len(prefix)] == prefix
        assert ids[-1] == EOS_ID and EOS_ID not in ids[:-1]
        assert len(ids) <= limit and not {PAD_ID, BOS_ID, UNK_ID} & set(ids)
    assert contains(results[1].ids, constraints[1][0])
    expected = forced_scores(model, sources, [r.ids for r in results])
    np.testing.assert_allclose([r.score for r in results], expected, atol=1e-4)


def test_an_unsatisfiable_sentence_is_reported_and_spares_the_others(
    trained, generators
):
    _, tokenizer = trained
    long_phrase = "the dog sees a cat the bird likes the old red garden"
    constraints = [
        encode(tokenizer, [long_phrase]),  # Longer than the limit.
        encode(tokenizer, ["big ball"]),
        encode(tokenizer, ["tree"]),
        [],
    ]
    too_long = encode(tokenizer, [" ".join(["water"] * 12)])[0]
    prefixes = [[], [], [], too_long]
    sources = source_batch(tokenizer)
    limits = numpy_search.output_limits(sources, SETTINGS.max_extra_length)
    results = generators(4)(sources, constraints, prefixes)
    first, last = results[0], results[3]
    assert not first.satisfied and first.unmet == [0] and len(first.ids) == limits[0]
    assert not last.satisfied and not last.prefix_complete and last.unmet == []
    assert [int(t) for t in last.ids] == too_long[: limits[3]]
    assert results[1].satisfied and results[2].satisfied
    # The satisfied sentence, decoded alone, gives the same result.
    alone = generators(4)(sources[1:2], constraints[1:2])[0]
    np.testing.assert_array_equal(alone.ids, results[1].ids)
    assert alone.score == pytest.approx(results[1].score, abs=1e-4)


@pytest.mark.parametrize("beam_size", [4, 1], ids=["beam4", "greedy"])
def test_sentences_without_constraints_get_the_plain_search(
    trained, generators, beam_size
):
    model, tokenizer = trained
    sources = source_batch(tokenizer)
    settings = SETTINGS.replace(beam_size=beam_size)
    plain_search = SequenceGenerator(model, settings, drop_finished=False)
    sequences, scores = plain_search(sources)
    # Then sentence 0 constrained: the others must not notice.
    for constraints in (None, [encode(tokenizer, ["tree"]), [], [], []]):
        results = generators(beam_size)(sources, constraints)
        for row, result in enumerate(results):
            if constraints and constraints[row]:
                assert contains(result.ids, constraints[row][0])
                continue
            np.testing.assert_array_equal(result.ids, strip(sequences[row, 0]))
            expected = scores[row, 0]
            if beam_size == 1:  # Greedy scores are total log-probabilities.
                expected /= numpy_search.length_penalty(len(result.ids), SETTINGS.alpha)
            assert result.score == pytest.approx(float(expected), abs=1e-4)


def test_a_search_compiles_one_start_and_one_step_program(trained):
    model, tokenizer = trained
    generator = ConstrainedGenerator(model, SETTINGS)
    sources = source_batch(tokenizer, SOURCES[:1])
    before = compilations()
    generator(sources)
    # Compiled backends trace the start and the step once each (torch: none).
    traced = 0 if keras.backend.backend() == "torch" else 2
    assert compilations() == before + traced
    generator(sources, [encode(tokenizer, ["big tree"])], [encode(tokenizer, ["a"])[0]])
    assert compilations() == before + traced
