"""NumPy search (the ONNX translator's and the constrained search's): the
same hypotheses and scores as `decoding.search` on the same step function,
whatever the settings.

On every backend: each side is the other's oracle, and `decoding.search`
runs in the suite's backend (a few seconds a suite).
"""

from __future__ import annotations

import numpy as np
import pytest
from keras import ops

from keras_transformer.config import EOS_ID, UNK_ID
from keras_transformer.decoding import numpy_search, search

VOCAB, SENTENCES = 12, 5
LIMITS = np.array([3, 7, 1, 5, 9], np.int32)  # One ends at once.
MAX_LENGTH = 10


@pytest.fixture(scope="module")
def tables():
    """A random step function's tables: logits = W[token] + P[step] + h * u
    + the sentence's own bias, h a running state that beams carry."""
    rng = np.random.default_rng(7)
    values = {
        "W": rng.normal(size=(VOCAB, VOCAB)),
        "P": rng.normal(size=(MAX_LENGTH, VOCAB)),
        "u": rng.normal(size=(VOCAB,)),
        "bias": rng.normal(size=(SENTENCES, VOCAB)),
    }
    values["W"][:, EOS_ID] += 1.0  # Hypotheses end at many lengths.
    return {name: value.astype(np.float32) for name, value in values.items()}


def keras_search(tables, beam_size, **settings):
    k = beam_size
    tensors = {name: ops.convert_to_tensor(value) for name, value in tables.items()}
    bias = ops.repeat(tensors["bias"], k, axis=0)

    def step_fn(tokens, step, state):
        logits = ops.take(tensors["W"], tokens[:, 0], axis=0)
        logits = logits + ops.take(tensors["P"], step, axis=0)[None]
        logits = logits + state * tensors["u"][None] + bias
        return logits, state + ops.cast(tokens, "float32") * 0.25

    state = ops.zeros((SENTENCES * k, 1), "float32")
    limits = ops.convert_to_tensor(LIMITS)
    if k == 1:
        found = search.greedy_search(step_fn, state, limits, MAX_LENGTH, **settings)
        found = found[0][:, None], found[1][:, None]
    else:
        found = search.beam_search(
            step_fn, state, limits, MAX_LENGTH, beam_size=k, **settings
        )
    return tuple(ops.convert_to_numpy(x) for x in found)


def numpy_search_of(tables, beam_size, **settings):
    def step_fn(tokens, step, state, context):
        bias = np.repeat(context[0], len(tokens) // len(context[0]), axis=0)
        logits = tables["W"][tokens[:, 0]] + tables["P"][step][None]
        logits = logits + state[0] * tables["u"][None] + bias
        return logits, [state[0] + tokens.astype(np.float32) * np.float32(0.25)]

    state = [np.zeros((SENTENCES * beam_size, 1), np.float32)]
    arguments = (step_fn, state, [tables["bias"]], LIMITS, MAX_LENGTH)
    if beam_size == 1:
        return numpy_search.greedy_search(*arguments, **settings)
    return numpy_search.beam_search(*arguments, beam_size=beam_size, **settings)


@pytest.mark.parametrize(
    "beam_size, settings",
    [
        (1, {}),
        (1, {"suppressed_ids": (0, 2, UNK_ID)}),
        (3, {"alpha": 0.6}),
        (3, {"alpha": 0.0}),
        (4, {"alpha": 1.0, "early_stopping": True}),
        (2, {"alpha": 0.6, "suppressed_ids": (0, 2, UNK_ID)}),
    ],
)
def test_the_same_hypotheses_and_scores_as_decoding_search(tables, beam_size, settings):
    expected = keras_search(tables, beam_size, **settings)
    sequences, scores = numpy_search_of(tables, beam_size, **settings)
    np.testing.assert_array_equal(sequences, expected[0])
    np.testing.assert_allclose(scores, expected[1], rtol=1e-5)
    lengths = np.sum(sequences[:, 0] != 0, axis=1)
    assert len(set(lengths.tolist())) > 1  # Not all cut at one length.


def test_constants_are_decoding_search_s():
    assert numpy_search.NEG_INF == search.NEG_INF
    assert numpy_search.SUPPRESSED == search.SUPPRESSED
    assert numpy_search.ALWAYS_SUPPRESSED == search.ALWAYS_SUPPRESSED


def test_top_k_ranks_equal_values_by_lower_index():
    values = np.array([[1, 3, 3, 2, 3], [5, 5, 5, 5, 5]], np.float32)
    top, indices = numpy_search.top_k(values, 2)
    np.testing.assert_array_equal(indices, [[1, 2], [0, 1]])
    np.testing.assert_array_equal(top, [[3, 3], [5, 5]])
    _, everything = numpy_search.top_k(values, 5)
    np.testing.assert_array_equal(everything[0], [1, 2, 4, 3, 0])


def test_output_limits_give_an_empty_source_one_step():
    source = np.array([[5, 6, 0], [0, 0, 0]], np.int32)
    np.testing.assert_array_equal(numpy_search.output_limits(source, 4), [6, 1])


def test_beams_move_in_place_as_a_gather_would():
    rng = np.random.default_rng(0)
    for rows in ([0, 0, 0, 3], [1, 0, 2, 2], [0, 1, 2, 3], [3, 3, 1, 1]):
        rows = np.array(rows)
        arrays = [rng.normal(size=(4, 2, 3)).astype(np.float32) for _ in range(2)]
        expected = [array[rows] for array in arrays]
        moved = numpy_search._move_rows([array.copy() for array in arrays], rows)
        for found, want in zip(moved, expected):
            np.testing.assert_array_equal(found, want)
