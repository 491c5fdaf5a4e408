"""`SequenceGenerator` on a tiny Transformer: cached vs full recomputation,
compiled vs eager, beam size 1 vs greedy, output invariants."""

from __future__ import annotations

import keras
import numpy as np
import pytest
from keras import ops

from keras_transformer import build_transformer
from keras_transformer.config import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from keras_transformer.decoding import generator as generator_module
from keras_transformer.decoding import search
from keras_transformer.decoding.compile import compilations, compile_function
from keras_transformer.decoding.generator import (
    SequenceGenerator,
    cached_step_fn,
    uncached_step_fn,
)
from tests.helpers import set_seeded_weights, small_config

# Rows of different real lengths, and an all-pad row (batch completion).
SOURCE = np.array([[5, 9, 12, 7, 30], [8, 4, 0, 0, 0], [0, 0, 0, 0, 0]], np.int32)
MAX_EXTRA = 4
MAX_LENGTH = SOURCE.shape[1] + MAX_EXTRA
LIMITS = [5 + MAX_EXTRA, 2 + MAX_EXTRA, 1]
EOS_BIAS = 2.0  # With seed 0: greedy ends row 1 with EOS, cuts row 0.


@pytest.fixture(scope="module")
def model():
    config = small_config(
        vocab_size=40,
        d_model=16,
        d_ff=32,
        num_heads=2,
        num_encoder_layers=1,
        num_decoder_layers=2,
        tie_output_projection=False,
    )
    model = build_transformer(config)
    set_seeded_weights(model, seed=0, eos_bias=EOS_BIAS)
    return model


@pytest.fixture(scope="module")
def decoded(model):
    """decoded(beam_size, cached, jit) -> (sequences, scores), computed once
    per module (each compiled variant compiles once)."""
    results = {}

    def get(beam_size, cached, jit):
        key = (beam_size, cached, jit)
        if key not in results:
            generator = SequenceGenerator(
                model,
                beam_size=beam_size,
                max_extra_length=MAX_EXTRA,
                cached=cached,
                jit=jit,
            )
            results[key] = generator(SOURCE)
        return results[key]

    return get


def real_tokens(row):
    row = [int(t) for t in row]
    if EOS_ID in row:
        return row[: row.index(EOS_ID) + 1]
    nonpad = [i for i, t in enumerate(row) if t != PAD_ID]
    return row[: nonpad[-1] + 1] if nonpad else []


# --- step functions: cached vs full recomputation ----------------------------------

# A fixed decoder input per row: BOS, then arbitrary non-PAD tokens (a live
# hypothesis never feeds PAD), EOS included.
STEP_TOKENS = np.array(
    [
        [BOS_ID, 7, 12, EOS_ID, 9, 30, 30, 4, 11],
        [BOS_ID, 4, 4, 8, 21, 5, 6, 7, 8],
        [BOS_ID, 6, 19, 25, 3, 3, 4, 5, 39],
    ],
    np.int32,
)


def _teacher_forced_logits(model, source_ids, tokens):
    """Logits for every position of `tokens` (B, T) three ways: the cached
    step_fn and the uncached step_fn fed one token per step, and the decoder
    run once on the whole input. Three (B, T, V) tensors."""
    batch_size, steps = tokens.shape
    memory = model.encode(source_ids)
    cached = cached_step_fn(model, source_ids, memory)
    uncached = uncached_step_fn(model, source_ids, memory)
    vocab_size = model.config.output_vocab_size

    def body(step, carry):
        cache, buffer, cached_out, uncached_out = carry
        current = ops.slice(tokens, [0, step], [batch_size, 1])
        logits, cache = cached(current, step, cache)
        cached_out = ops.slice_update(cached_out, [0, step, 0], logits[:, None])
        logits, buffer = uncached(current, step, buffer)
        uncached_out = ops.slice_update(uncached_out, [0, step, 0], logits[:, None])
        return cache, buffer, cached_out, uncached_out

    empty = ops.zeros((batch_size, steps, vocab_size), "float32")
    carry = (
        model.init_decode_cache(batch_size, steps),
        ops.full((batch_size, steps + 1), BOS_ID, "int32"),
        empty,
        empty,
    )
    _, _, cached_out, uncached_out = ops.fori_loop(0, steps, body, carry)
    return cached_out, uncached_out, model.decode(tokens, memory, source_ids)


@pytest.fixture(scope="module")
def fast(model):
    """fast(fn)(*arrays) -> NumPy outputs, run the cheap way for the backend:
    compiled on JAX (whose eager mode compiles every op), eager on TensorFlow
    (where XLA compilation costs more than the run)."""

    def wrap(fn):
        if keras.backend.backend() == "jax":
            fn = compile_function(fn, model)

        def call(*arrays):
            tensors = [ops.convert_to_tensor(np.asarray(a, np.int32)) for a in arrays]
            return [ops.convert_to_numpy(x) for x in keras.tree.flatten(fn(*tensors))]

        return call

    return wrap


def test_cached_step_logits_match_full_recomputation(model, fast):
    run = fast(lambda source, tokens: _teacher_forced_logits(model, source, tokens))
    cached, uncached, full = run(SOURCE, STEP_TOKENS)
    assert cached.shape == STEP_TOKENS.shape + (40,)
    assert np.all(np.isfinite(cached))
    for step in range(STEP_TOKENS.shape[1]):
        np.testing.assert_allclose(
            cached[:, step], uncached[:, step], atol=1e-4, rtol=0, err_msg=f"{step}"
        )
    np.testing.assert_allclose(uncached, full, atol=1e-4, rtol=0)
    # The logits depend on the prefix, so the cache is really read.
    assert np.abs(cached[:, 1:] - cached[:, :1]).max() > 1e-2


# --- whole searches: cached/uncached x compiled/eager ------------------------------


@pytest.mark.parametrize("beam_size", [1, 3], ids=["greedy", "beam3"])
def test_cached_uncached_compiled_eager_give_same_output(decoded, beam_size):
    reference_tokens, reference_scores = decoded(beam_size, True, True)
    assert reference_tokens.shape == (3, beam_size, MAX_LENGTH)
    assert reference_scores.shape == (3, beam_size)
    for cached, jit in [(False, True), (True, False), (False, False)]:
        tokens, scores = decoded(beam_size, cached, jit)
        what = f"cached={cached} jit={jit}"
        np.testing.assert_array_equal(tokens, reference_tokens, err_msg=what)
        np.testing.assert_allclose(
            scores, reference_scores, atol=1e-4, rtol=0, err_msg=what
        )


@pytest.mark.parametrize("drop_finished", [True, False])
def test_an_alpha_given_at_the_call_is_a_search_built_with_it_and_compiles_nothing(
    model, drop_finished
):
    # Issue 50: each allowed alpha was its own set of compiled programs.
    def generator(alpha):
        return SequenceGenerator(
            model,
            beam_size=3,
            alpha=alpha,
            max_extra_length=MAX_EXTRA,
            drop_finished=drop_finished,
        )

    shared = generator(0.6)
    reference = shared(SOURCE)
    before = compilations()
    tokens, scores = shared(SOURCE, alpha=2.5)
    assert compilations() == before  # The same programs whatever the alpha.
    expected_tokens, expected_scores = generator(2.5)(SOURCE)
    np.testing.assert_array_equal(tokens, expected_tokens)
    np.testing.assert_allclose(scores, expected_scores, atol=1e-5, rtol=0)
    # The alpha reached the programs: the scores it normalises differ.
    assert not np.allclose(scores, reference[1])


def test_model_outputs_exercise_eos_and_limit(decoded):
    """Guard: greedy ends one row with EOS before its limit and cuts another
    at its limit, and beam search finds a better hypothesis than greedy."""
    tokens, _ = decoded(1, True, True)
    row0, row1 = real_tokens(tokens[0, 0]), real_tokens(tokens[1, 0])
    assert row0[-1] != EOS_ID and len(row0) == LIMITS[0]
    assert row1[-1] == EOS_ID and 1 < len(row1) < LIMITS[1]
    beam_tokens, _ = decoded(3, True, True)
    assert real_tokens(beam_tokens[1, 0]) != row1


@pytest.mark.parametrize("beam_size", [1, 3], ids=["greedy", "beam3"])
def test_outputs_end_at_eos_and_respect_row_limits(decoded, beam_size):
    tokens, scores = decoded(beam_size, True, True)
    for row, limit in enumerate(LIMITS):
        for hypothesis in tokens[row]:
            kept = real_tokens(hypothesis)
            assert 1 <= len(kept) <= limit, (row, hypothesis)
            assert np.all(hypothesis[len(kept) :] == PAD_ID), (row, hypothesis)
        assert np.all(np.diff(scores[row]) <= 0), scores[row]
    assert np.all(tokens[2, :, 1:] == PAD_ID)  # All-pad row: one token.
    assert np.all(np.isfinite(scores))


def test_beam_scores_are_penalised_log_probs_of_their_sequences(model, decoded, fast):
    """Each returned score equals log P(Y | X) / lp(|Y|) recomputed by the
    teacher-forced decoder on the row's own source (beams see their source)."""
    alpha = 0.6  # SequenceGenerator's default.
    tokens, scores = decoded(3, True, True)
    batch, k, length = tokens.shape
    hypotheses = tokens.reshape(batch * k, length)
    inputs = np.concatenate([np.full((batch * k, 1), BOS_ID), hypotheses[:, :-1]], 1)
    sources = np.repeat(SOURCE, k, axis=0)
    decode = fast(lambda src, tgt: model.decode(tgt, model.encode(src), src))
    (logits,) = decode(sources, inputs)
    log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    for n, hypothesis in enumerate(hypotheses):
        kept = real_tokens(hypothesis)
        total = sum(log_probs[n, i, t] for i, t in enumerate(kept))
        expected = total / ((5 + len(kept)) / 6) ** alpha
        np.testing.assert_allclose(scores[n // k, n % k], expected, atol=1e-4)


# --- beam size 1 is greedy ----------------------------------------------------------


def test_beam_size_one_without_length_penalty_equals_greedy_search(model):
    source = ops.convert_to_tensor(SOURCE)
    limits = search.output_limits(source, MAX_EXTRA)
    memory = model.encode(source)
    step_fn = cached_step_fn(model, source, memory)

    def fresh_cache():
        return model.init_decode_cache(SOURCE.shape[0], MAX_LENGTH)

    greedy_tokens, greedy_scores = search.greedy_search(
        step_fn, fresh_cache(), limits, MAX_LENGTH
    )
    beam_tokens, beam_scores = search.beam_search(
        step_fn, fresh_cache(), limits, MAX_LENGTH, beam_size=1, alpha=0.0
    )
    greedy_tokens = ops.convert_to_numpy(greedy_tokens)
    beam_tokens = ops.convert_to_numpy(beam_tokens)
    assert beam_tokens.shape == (3, 1, MAX_LENGTH)
    np.testing.assert_array_equal(beam_tokens[:, 0], greedy_tokens)
    np.testing.assert_allclose(
        ops.convert_to_numpy(beam_scores)[:, 0],
        ops.convert_to_numpy(greedy_scores),
        atol=1e-5,
    )
    # The rows really differ: different lengths, different outputs.
    assert len(real_tokens(greedy_tokens[0])) != len(real_tokens(greedy_tokens[1]))


# --- dropping finished rows between segments ---------------------------------------

# Nine sentences of different lengths (two empty ones, as batch completion
# adds): rows end at different steps, so the batch shrinks 9 -> 3 -> 1.
MANY_SOURCES = np.array(
    [
        [5, 9, 12, 7, 30, 4, 8, 6],
        [8, 4, 0, 0, 0, 0, 0, 0],
        [0, 0, 0, 0, 0, 0, 0, 0],
        [11, 0, 0, 0, 0, 0, 0, 0],
        [21, 22, 23, 24, 0, 0, 0, 0],
        [6, 6, 6, 6, 6, 6, 0, 0],
        [33, 7, 19, 0, 0, 0, 0, 0],
        [0, 0, 0, 0, 0, 0, 0, 0],
        [9, 8, 7, 6, 5, 4, 3, 0],
    ],
    np.int32,
)


def test_a_small_batch_gets_the_limits_cache_at_once(model):
    generator = SequenceGenerator(
        model, beam_size=1, max_extra_length=6, jit=False, segment_steps=1
    )
    small = generator.start(MANY_SOURCES[:4], growing_cache=True)
    large = generator.start(MANY_SOURCES, growing_cache=True)
    assert ops.shape(small["loop"]["state"][0][0])[2] == 8 + 6
    assert ops.shape(large["loop"]["state"][0][0])[2] == 2


# Compiled beam search on every backend; the eager runs and compiled greedy
# search (the same row bookkeeping) in the neutral suite, for CI time.
@pytest.mark.parametrize(
    ("beam_size", "jit"),
    [
        pytest.param(1, False, marks=pytest.mark.backend_neutral),
        pytest.param(4, False, marks=pytest.mark.backend_neutral),
        pytest.param(1, True, marks=pytest.mark.backend_neutral),
        (4, True),
    ],
)
def test_dropping_finished_rows_keeps_the_whole_batch_results(
    model, beam_size, jit, monkeypatch
):
    shrinks = []
    keep_rows = generator_module._keep_rows

    def recording_keep_rows(carry, active, rows, size):
        shrinks.append((len(rows), size))
        return keep_rows(carry, active, rows, size)

    monkeypatch.setattr(generator_module, "_keep_rows", recording_keep_rows)
    settings = {"beam_size": beam_size, "max_extra_length": 6, "jit": jit}
    whole = SequenceGenerator(model, drop_finished=False, **settings)
    segmented = SequenceGenerator(model, segment_steps=1, **settings)
    cache_lengths = []  # (sentences, steps run before the segment, positions)
    run_segment = segmented._segment

    def recording_segment(carry, stop_step):
        cache = carry["loop"]["state"][0][0]
        sentences = ops.shape(carry["limits"])[0]
        cache_lengths.append((sentences, int(stop_step) - 1, ops.shape(cache)[2]))
        return run_segment(carry, stop_step)

    segmented._segment = recording_segment
    expected_sequences, expected_scores = whole(MANY_SOURCES)
    sequences, scores = segmented(MANY_SOURCES)
    np.testing.assert_array_equal(sequences, expected_sequences)
    np.testing.assert_allclose(scores, expected_scores, rtol=1e-6, atol=1e-6)
    # The batch really shrank, 4x at a time, and the rows ended unevenly.
    assert shrinks and shrinks[0][0] == len(MANY_SOURCES)
    assert all(size == -(-count // 4) for count, size in shrinks), shrinks
    lengths = {len(real_tokens(row)) for row in sequences[:, 0]}
    assert len(lengths) >= 3, sequences[:, 0]
    # The caches grew with the search (2 x segment_steps, doubling, at most
    # the limit 14 = 8 + 6), always ahead of the step being run; once the
    # batch holds at most SMALL_BATCH sentences, at the limit.
    max_length = MANY_SOURCES.shape[1] + 6
    lengths_run = [length for _, _, length in cache_lengths]
    assert lengths_run == sorted(lengths_run), cache_lengths
    assert lengths_run[0] == 2 and len(set(lengths_run)) >= 3, cache_lengths
    assert set(lengths_run) <= {2, 4, 8, max_length}, cache_lengths
    for sentences, steps, length in cache_lengths:
        assert steps < length
        if sentences <= generator_module.SMALL_BATCH:
            assert length == max_length, cache_lengths


def test_early_stopping_decodes_fewer_rows(model):
    early_work = _active_row_steps(model, MANY_SOURCES, early_stopping=True)
    paper_work = _active_row_steps(model, MANY_SOURCES, early_stopping=False)
    assert early_work < paper_work


def _active_row_steps(model, sources, early_stopping):
    """Sum over the steps of the beam-4 search of the rows still active."""
    source = ops.convert_to_tensor(sources)
    max_length = sources.shape[1] + 6
    limits = search.output_limits(source, 6)
    repeated = ops.repeat(source, 4, axis=0)
    step_fn = cached_step_fn(model, repeated, ops.repeat(model.encode(source), 4, 0))
    cache = model.init_decode_cache(sources.shape[0] * 4, max_length)

    def advance(loop, stop_step):  # One step, compiled once.
        loop = search.beam_advance(
            step_fn,
            loop,
            limits,
            max_length,
            beam_size=4,
            early_stopping=early_stopping,
            stop_step=stop_step,
        )
        return loop, search.beam_active(loop, limits, 0.6, early_stopping)

    advance = compile_function(advance, model)
    loop = search.beam_start(cache, limits, max_length, beam_size=4)
    total = 0
    for step in range(1, max_length + 1):
        loop, active = advance(loop, np.int32(step))
        total += int(np.sum(ops.convert_to_numpy(active)))
    return total


def test_early_stopping_ends_sentences_with_beam_size_finished_hypotheses(model):
    settings = {"beam_size": 4, "max_extra_length": 6}
    paper = SequenceGenerator(model, drop_finished=False, **settings)
    early = SequenceGenerator(model, early_stopping=True, segment_steps=1, **settings)
    early_whole = SequenceGenerator(
        model, early_stopping=True, drop_finished=False, **settings
    )
    _, paper_scores = paper(MANY_SOURCES)
    sequences, scores = early(MANY_SOURCES)
    # A stopped sentence is frozen: the same result whatever else is in its
    # batch and whenever it leaves it.
    whole_sequences, whole_scores = early_whole(MANY_SOURCES)
    np.testing.assert_array_equal(sequences, whole_sequences)
    np.testing.assert_allclose(scores, whole_scores, rtol=1e-6, atol=1e-6)
    # Every hypothesis kept is a finished one: it ends in EOS or at the limit.
    limits = ops.convert_to_numpy(search.output_limits(MANY_SOURCES, 6))
    for row, limit in zip(sequences, limits):
        for hypothesis in row:
            kept = real_tokens(hypothesis)
            assert kept[-1:] == [EOS_ID] or len(kept) == limit, hypothesis
    # The paper's search is the longer one: its best is never worse.
    assert np.all(scores[:, 0] <= paper_scores[:, 0] + 1e-5)


@pytest.mark.parametrize(
    ("rows", "active", "expected"),
    [
        (64, 64, 64),
        (64, 17, 64),
        (64, 16, 16),
        (64, 5, 16),
        (64, 4, 4),
        (64, 1, 1),
        (9, 3, 3),
        (9, 1, 1),
        (3, 2, 3),
        (1, 1, 1),
    ],
)
def test_smaller_batch_size_shrinks_by_fours(rows, active, expected):
    assert generator_module.smaller_batch_size(rows, active) == expected


@pytest.mark.parametrize(
    ("batch_size", "sentences", "expected"),
    [(8, 1, 8), (8, 3, 8), (4, 1, 4), (9, 1, 1), (9, 3, 3), (64, 5, 16), (64, 1, 1)],
)
def test_a_small_batch_is_searched_whole(batch_size, sentences, expected):
    """Up to SMALL_BATCH rows (the server's batches) a batch is completed
    to its size: one start program per source length; a larger one to the
    smallest size the search shrinks to."""
    assert generator_module.padded_batch_size(batch_size, sentences) == expected


def test_sources_pad_to_powers_of_two():
    from keras_transformer.decoding.batching import ladder_length, ladder_lengths

    lengths = [ladder_length(n) for n in (1, 8, 9, 16, 17, 33, 64, 65, 256, 257)]
    assert lengths == [8, 8, 16, 16, 32, 64, 64, 128, 256, 512]
    assert ladder_lengths(256) == [8, 16, 32, 64, 128, 256]


# --- arguments ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs",
    [
        {"beam_size": 0},
        {"beam_size": 2.0},
        {"alpha": -0.1},
        {"max_extra_length": 0},
        {"segment_steps": 0},
        {"segment_steps": 2.5},
    ],
)
def test_generator_rejects_bad_arguments(model, kwargs):
    with pytest.raises(ValueError, match=next(iter(kwargs))):
        SequenceGenerator(model, jit=False, **kwargs)


# --- reserved ids are never generated ------------------------------------------------


@pytest.fixture(scope="module")
def reserved_model(model):
    """The module's model, other weights, PAD, UNK and BOS made the likeliest
    tokens: unsuppressed, a search would emit them (PAD is masked as a key
    in the uncached path but not in the KV cache, so the two would
    disagree)."""
    reserved = build_transformer(model.config)
    set_seeded_weights(reserved, seed=1, eos_bias=-1.0)
    bias = reserved.get_layer("output_projection").bias
    values = keras.ops.convert_to_numpy(bias).copy()
    values[[PAD_ID, UNK_ID, BOS_ID]] = 6.0
    bias.assign(values)
    return reserved


@pytest.mark.parametrize("beam_size", [1, 4])
def test_pad_bos_unk_are_never_generated_and_cached_equals_uncached(
    reserved_model, beam_size
):
    outputs = []
    for cached in (True, False):
        generator = SequenceGenerator(
            reserved_model,
            beam_size=beam_size,
            max_extra_length=MAX_EXTRA,
            cached=cached,
            jit=False,
        )
        sequences, scores = generator(SOURCE[:2])
        for row in sequences[:, 0]:
            kept = row[: list(row).index(EOS_ID) + 1] if EOS_ID in row else row
            kept = kept[kept != PAD_ID] if not (row == PAD_ID).all() else kept[:0]
            assert len(kept) > 0
            assert not np.isin(kept, [PAD_ID, UNK_ID, BOS_ID]).any(), row
            # No PAD before the end of the hypothesis.
            end = len(kept)
            assert (row[:end] != PAD_ID).all(), row
        outputs.append((sequences[:, 0], scores[:, 0]))
    np.testing.assert_array_equal(outputs[0][0], outputs[1][0])
    np.testing.assert_allclose(outputs[0][1], outputs[1][1], atol=1e-4)


def test_allow_unk_lets_the_search_generate_unk(reserved_model):
    generator = SequenceGenerator(
        reserved_model,
        beam_size=1,
        max_extra_length=MAX_EXTRA,
        jit=False,
        allow_unk=True,
    )
    sequences, _ = generator(SOURCE[:2])
    assert (sequences == UNK_ID).any()
    assert not np.isin(sequences[sequences != PAD_ID], [BOS_ID]).any()


@pytest.mark.skipif(
    keras.backend.backend() == "torch",
    reason="torch runs the search eagerly: it compiles no programs to count",
)
@pytest.mark.parametrize("beam_size", [1, 3])
def test_warm_up_compiles_every_program_its_batch_shape_can_run(beam_size):
    """After `warm_up` on (6, 24) ids, searches of that shape whose rows
    finish at different steps (caches growing, the batch shrinking to 2,
    then 1, or at once to 1) compile nothing more."""
    from keras_transformer.decoding.compile import compilations
    from tests.helpers import no_eos_model

    generator = SequenceGenerator(
        no_eos_model(40), beam_size=beam_size, max_extra_length=40
    )
    generator.warm_up(np.full((6, 24), 9, np.int32))
    warm = compilations()
    rng = np.random.default_rng(0)
    # Without EOS each row runs to its own limit, source length + 40.
    for lengths in ([1, 2, 3, 4, 20, 24], [24, 1, 1, 1, 1, 1], [5, 24, 9, 1, 24, 2]):
        ids = np.zeros((6, 24), np.int32)
        for row, length in enumerate(lengths):
            ids[row, :length] = rng.integers(4, 40, size=length)
        generator(ids)
    assert compilations() == warm > 0


@pytest.mark.parametrize("beam_size", [1, 2])
def test_abandoned_rows_leave_the_batch_as_finished_ones_do(beam_size):
    """Rows marked abandoned count as done between segments: with all but
    one gone the batch shrinks to it, whose output is unchanged; with all
    gone the search ends at once."""
    from tests.helpers import no_eos_model

    generator = SequenceGenerator(
        no_eos_model(40), beam_size=beam_size, max_extra_length=40
    )
    ids = np.random.default_rng(1).integers(4, 40, size=(6, 8)).astype(np.int32)
    whole, whole_scores = generator(ids)
    for gone, segments in ((range(5), 6), (range(6), 2)):
        asked = []

        def abandoned(gone=gone, asked=asked):
            asked.append(True)
            return [len(asked) > 1 and row in gone for row in range(6)]

        cut, cut_scores = generator(ids, abandoned)
        # 48 steps are 6 segments of 8; all gone after the second: 2.
        assert len(asked) == segments
        if 5 not in gone:
            np.testing.assert_array_equal(cut[5], whole[5])
            # A smaller batch may sum in another order (torch): 1 ulp.
            np.testing.assert_allclose(cut_scores[5], whole_scores[5], rtol=1e-6)
