"""Pure greedy and beam search (`keras_transformer.decoding.search`) over toy step
functions: exhaustive-search optimality, beam vs greedy, output invariants."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from keras import ops

from keras_transformer.config import BOS_ID, EOS_ID, PAD_ID
from keras_transformer.decoding import search

SUPPRESSED = (PAD_ID, 1, BOS_ID)  # Never worth emitting in the toy tables.


def _log_softmax(logits):
    logits = np.asarray(logits, np.float64)
    shifted = logits - logits.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def random_table(seed, vocab_size, max_length, scale=2.0):
    """Next-token log-probs conditioned on (previous token, step): (V, L, V).
    PAD, UNK and BOS get ~-100 so only EOS and the other tokens compete."""
    rng = np.random.default_rng(seed)
    logits = rng.normal(size=(vocab_size, max_length, vocab_size)) * scale
    logits[:, :, SUPPRESSED] = -100.0
    return _log_softmax(logits)


def table_step_fn(tokens, step, tables):
    """step_fn whose logits are table[previous token, step], with each row's
    (V, L, V) table carried in the state (N, V, L, V), which beam search
    reorders along with the beams."""
    one_hot = ops.one_hot(tokens[:, 0], ops.shape(tables)[1])
    rows = ops.einsum("nv,nvlw->nlw", one_hot, tables)  # (N, L, V)
    return ops.take(rows, step, axis=1), tables


def _row_tables(tables, rows, copies):
    """One (V, L, V) table for all rows, or a list with one per row; each
    row repeated `copies` times (beam-major) -> (rows * copies, V, L, V)."""
    tables = np.asarray(tables, np.float32)
    if tables.ndim == 3:
        tables = np.broadcast_to(tables, (rows,) + tables.shape)
    return ops.convert_to_tensor(np.repeat(tables, copies, axis=0))


def run_beam(tables, limits, max_length, beam_size, alpha):
    limits = np.asarray(limits, np.int32)
    sequences, scores = search.beam_search(
        table_step_fn,
        _row_tables(tables, len(limits), beam_size),
        ops.convert_to_tensor(limits),
        max_length,
        beam_size=beam_size,
        alpha=alpha,
    )
    return ops.convert_to_numpy(sequences), ops.convert_to_numpy(scores)


def run_greedy(tables, limits, max_length):
    limits = np.asarray(limits, np.int32)
    tokens, scores = search.greedy_search(
        table_step_fn,
        _row_tables(tables, len(limits), 1),
        ops.convert_to_tensor(limits),
        max_length,
    )
    return ops.convert_to_numpy(tokens), ops.convert_to_numpy(scores)


def penalty(length, alpha):
    return ((5.0 + length) / 6.0) ** alpha


def sequence_log_prob(table, sequence):
    previous, total = BOS_ID, 0.0
    for step, token in enumerate(sequence):
        total += table[previous, step, token]
        previous = token
    return total


def exhaustive_best(table, limit, alpha):
    """Best (score, sequence) over every sequence beam search can return:
    ending in EOS within `limit` tokens, or cut at `limit` (then scored like
    beam_search does: log-prob / lp(limit), |Y| = limit)."""
    vocab_size = table.shape[-1]
    tokens = [t for t in range(vocab_size) if t not in SUPPRESSED]
    best = None
    for length in range(1, limit + 1):
        for sequence in itertools.product(tokens, repeat=length):
            if EOS_ID in sequence[:-1]:
                continue
            if sequence[-1] != EOS_ID and length < limit:
                continue
            score = sequence_log_prob(table, sequence) / penalty(length, alpha)
            if best is None or score > best[0]:
                best = (score, sequence)
    return best


def real_tokens(row):
    """Tokens up to and including the first EOS (or all up to the last
    non-PAD token when there is no EOS)."""
    row = [int(t) for t in row]
    if EOS_ID in row:
        return row[: row.index(EOS_ID) + 1]
    nonpad = [i for i, t in enumerate(row) if t != PAD_ID]
    return row[: nonpad[-1] + 1] if nonpad else []


def assert_well_formed(sequences, limits):
    """(B, k, L) or (B, L): PAD after EOS, nothing past the row's limit."""
    sequences = np.asarray(sequences)
    if sequences.ndim == 2:
        sequences = sequences[:, None]
    for row, limit in enumerate(np.asarray(limits)):
        for hyp in sequences[row]:
            kept = real_tokens(hyp)
            assert np.all(hyp[len(kept) :] == PAD_ID), (row, hyp)
            assert len(kept) <= limit, (row, int(limit), hyp)


# --- output_limits ---------------------------------------------------------------


def test_output_limits_real_length_plus_extra_and_one_for_empty_rows():
    source = np.array([[5, 6, 7, 0], [9, 0, 0, 0], [0, 0, 0, 0], [4, 4, 4, 4]])
    limits = ops.convert_to_numpy(search.output_limits(source, 3))
    np.testing.assert_array_equal(limits, [6, 4, 1, 7])


def test_length_penalty_is_gnmt_formula():
    values = ops.convert_to_numpy(search.length_penalty(np.array([1, 4, 10]), 0.6))
    np.testing.assert_allclose(values, penalty(np.array([1, 4, 10]), 0.6), rtol=1e-6)
    ones = ops.convert_to_numpy(search.length_penalty(np.array([1, 7]), 0.0))
    np.testing.assert_array_equal(ones, [1.0, 1.0])


# --- exhaustive search ------------------------------------------------------------

# (vocabulary, max_length, beam_size): beam >= vocabulary and wide enough
# that every prefix of real tokens survives, so beam search must be exact.
EXHAUSTIVE_CASES = [(6, 3, 6), (6, 4, 12)]
EXHAUSTIVE_SEEDS = [2, 7]  # 7: alpha 0.6 changes the winner.


def _limits(max_length):
    return [max_length, max_length - 1, 2, 1]


@pytest.mark.parametrize("alpha", [0.0, 0.6])
@pytest.mark.parametrize("vocab_size,max_length,beam_size", EXHAUSTIVE_CASES)
def test_wide_beam_finds_exhaustive_best(vocab_size, max_length, beam_size, alpha):
    # One row per (seed, limit), each with its seed's table.
    rows = [(seed, limit) for seed in EXHAUSTIVE_SEEDS for limit in _limits(max_length)]
    tables = {
        seed: random_table(seed, vocab_size, max_length) for seed in EXHAUSTIVE_SEEDS
    }
    sequences, scores = run_beam(
        [tables[seed] for seed, _ in rows],
        [limit for _, limit in rows],
        max_length,
        beam_size,
        alpha,
    )
    for row, (seed, limit) in enumerate(rows):
        best_score, best_sequence = exhaustive_best(tables[seed], limit, alpha)
        assert tuple(real_tokens(sequences[row, 0])) == best_sequence, (seed, limit)
        np.testing.assert_allclose(scores[row, 0], best_score, atol=1e-5)


def test_exhaustive_tables_exercise_penalty_and_both_endings():
    """Guard for the test above: with these tables the length penalty changes
    the winner somewhere, and winners end both in EOS before the limit and
    cut at the limit without EOS."""
    winners = {}
    for seed in EXHAUSTIVE_SEEDS:
        for vocab_size, max_length, _ in EXHAUSTIVE_CASES:
            table = random_table(seed, vocab_size, max_length)
            for limit in _limits(max_length):
                for alpha in (0.0, 0.6):
                    _, best = exhaustive_best(table, limit, alpha)
                    winners[seed, max_length, limit, alpha] = (best, limit)
    assert any(
        winners[key] != winners[key[:3] + (0.6,)] for key in winners if key[3] == 0.0
    )
    endings = {
        (best[-1] == EOS_ID, len(best) == limit) for best, limit in winners.values()
    }
    assert (True, False) in endings  # EOS before the limit.
    assert (False, True) in endings  # Cut at the limit.


# --- beam search vs greedy --------------------------------------------------------


def _trap_table(vocab_size=8, max_length=3):
    """Token 4 is the likeliest first token (0.6) but every continuation of
    it is poor (EOS 0.25); token 5 (0.4) is followed by EOS with 0.99."""
    probs = np.full((vocab_size, max_length, vocab_size), 1e-6)
    first = np.full(vocab_size, 1e-6)
    first[4], first[5] = 0.6, 0.4
    probs[BOS_ID, 0] = first
    after_4 = np.full(vocab_size, 1e-6)
    after_4[[EOS_ID, 4, 5, 6, 7]] = [0.25, 0.1875, 0.1875, 0.1875, 0.1875]
    after_5 = np.full(vocab_size, 1e-6)
    after_5[EOS_ID], after_5[6] = 0.99, 0.01
    probs[4, 1:] = after_4
    probs[5, 1:] = after_5
    probs[[3, 6, 7], 1:, EOS_ID] = 1.0
    probs /= probs.sum(axis=-1, keepdims=True)
    return np.log(probs)


def test_beam_search_beats_greedy_when_greedy_first_step_is_a_trap():
    table = _trap_table()
    greedy_tokens, greedy_scores = run_greedy(table, [3], 3)
    beam_sequences, beam_scores = run_beam(table, [3], 3, beam_size=2, alpha=0.0)
    assert real_tokens(greedy_tokens[0]) == [4, EOS_ID]
    assert real_tokens(beam_sequences[0, 0]) == [5, EOS_ID]
    np.testing.assert_allclose(greedy_scores[0], np.log(0.6 * 0.25), atol=1e-4)
    np.testing.assert_allclose(beam_scores[0, 0], np.log(0.4 * 0.99), atol=1e-4)
    assert beam_scores[0, 0] > greedy_scores[0]


def test_beam_size_one_without_penalty_is_greedy_on_toy_tables():
    tables = [random_table(seed, 7, 5, scale=1.0) for seed in (0, 1, 2, 0)]
    limits = [5, 4, 3, 1]
    greedy_tokens, greedy_scores = run_greedy(tables, limits, 5)
    beam_sequences, beam_scores = run_beam(tables, limits, 5, beam_size=1, alpha=0.0)
    np.testing.assert_array_equal(beam_sequences[:, 0], greedy_tokens)
    np.testing.assert_allclose(beam_scores[:, 0], greedy_scores, atol=1e-5)


# --- invariants -------------------------------------------------------------------


@pytest.mark.parametrize("alpha", [0.0, 0.6])
@pytest.mark.parametrize("beam_size", [3, 12])
def test_beam_outputs_are_well_formed(beam_size, alpha):
    """PAD after EOS in all k hypotheses, no hypothesis longer than its row's
    limit (all-pad row: 1), scores sorted best first. beam_size 12 exceeds
    the vocabulary (6), so some rows run out of real hypotheses."""
    max_extra, vocab_size = 2, 6
    source = np.array([[4, 5, 6, 0], [7, 0, 0, 0], [0, 0, 0, 0], [4, 4, 4, 4]])
    max_length = source.shape[1] + max_extra
    limits = ops.convert_to_numpy(search.output_limits(source, max_extra))
    np.testing.assert_array_equal(limits, [5, 3, 1, 6])
    table = random_table(3, vocab_size, max_length, scale=1.0)
    sequences, scores = run_beam(table, limits, max_length, beam_size, alpha)
    assert sequences.shape == (4, beam_size, max_length)
    assert scores.shape == (4, beam_size)
    assert_well_formed(sequences, limits)
    assert np.all(np.diff(scores, axis=1) <= 0), scores
    # The all-pad row stops after one token.
    assert np.all(sequences[2, :, 1:] == PAD_ID)
    # Every real hypothesis' score is its own penalised log-prob.
    for row in range(4):
        for hyp, score in zip(sequences[row], scores[row]):
            # Skip placeholders (fewer real hypotheses than k) and hypotheses
            # through a suppressed token (~-100; PAD would be invisible).
            if score < -50:
                continue
            kept = real_tokens(hyp)
            expected = sequence_log_prob(table, kept) / penalty(len(kept), alpha)
            np.testing.assert_allclose(score, expected, atol=1e-4)


def test_greedy_outputs_are_well_formed_and_scored():
    table = random_table(4, 6, 6, scale=1.0)
    limits = [6, 3, 1]
    tokens, scores = run_greedy(table, limits, 6)
    assert tokens.shape == (3, 6)
    assert_well_formed(tokens, limits)
    for row in range(3):
        kept = real_tokens(tokens[row])
        np.testing.assert_allclose(
            scores[row], sequence_log_prob(table, kept), atol=1e-5
        )
        # Greedy: each token is the argmax given the previous one.
        previous = BOS_ID
        for step, token in enumerate(kept):
            assert token == int(np.argmax(table[previous, step]))
            previous = token
