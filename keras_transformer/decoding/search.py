"""Greedy and beam-search decoding as pure functions over a step callable.

The search functions know nothing about the model. They take

    step_fn(tokens (N, 1) int32, step scalar, state) -> (logits (N, V), state)

where `state` is any nested structure of tensors whose leading axis is N
(the model's per-layer key/value caches, or a token buffer for uncached
decoding). Everything has a fixed shape, and the loop is a
`keras.ops.while_loop` that stops as soon as every row is done, so the whole
search compiles once per input shape (XLA on TensorFlow, jit on JAX; see
`keras_transformer.decoding.compile`).

Each search is also split in three (`*_start`, `*_advance` up to a step index,
`*_result`), with `*_active` telling which rows are not done yet, so that a
caller can run it in segments and drop the rows that are done between them
(`SequenceGenerator` does).

Beam search follows the GNMT recipe used by the paper (§6.1): beam size k,
length penalty lp(Y) = ((5 + |Y|) / 6)^alpha, hypotheses that emit EOS move to
a pool of finished hypotheses and are frozen, and the search ends when no live
hypothesis can still beat the worst finished one. As in fairseq, only an EOS
ranked among the top k candidates finishes a hypothesis, which makes beam
size 1 without length penalty exactly greedy decoding.

Legend: B batch, k beam size, N = B * k rows, L maximum output length,
V vocabulary. Output rows hold the tokens up to and including EOS, then PAD.

Reserved ids are never generated: PAD and BOS always get a log-probability
far below any real token's (`suppressed_ids`), and callers add UNK unless
they allow it (`SequenceGenerator(allow_unk=...)`). Scores stay the model's
log-probabilities of the chosen tokens; nothing is renormalised.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from keras import ops, tree

from keras_transformer.config import BOS_ID, EOS_ID, PAD_ID
from keras_transformer.decoding.settings import SearchSettings

# The defaults of the pure functions below are the settings' own (§6.1).
PAPER = SearchSettings()

NEG_INF = -1.0e9  # Finite, so sums of "impossible" scores never become NaN.
# Below every other candidate, dead-beam placeholders (about NEG_INF) and
# ended candidates (2 * NEG_INF) included, so a suppressed id never wins.
SUPPRESSED = 4 * NEG_INF
ALWAYS_SUPPRESSED = (PAD_ID, BOS_ID)


def suppress(log_probs, token_ids: Sequence[int]):
    """Set the log-probs of `token_ids` to SUPPRESSED. (N, V) -> (N, V)."""
    if not token_ids:
        return log_probs
    vocab = ops.arange(ops.shape(log_probs)[-1], dtype="int32")
    banned = ops.convert_to_tensor(list(token_ids), "int32")
    is_banned = ops.any(ops.equal(vocab[:, None], banned[None, :]), axis=1)
    return ops.where(is_banned[None, :], SUPPRESSED, log_probs)


def output_limits(source_ids, max_extra_length: int):
    """Per-row maximum output length: real source length + extra. (B,)

    An empty (all-pad) source row, used to fill a batch to a fixed size,
    gets a limit of 1 so it finishes at once.
    """
    real = ops.sum(ops.cast(ops.not_equal(source_ids, PAD_ID), "int32"), axis=1)
    return ops.where(real > 0, real + max_extra_length, 1)


def greedy_search(
    step_fn: Callable,
    state,
    limits,
    max_length: int,
    *,
    bos_id: int = BOS_ID,
    eos_id: int = EOS_ID,
    suppressed_ids: Sequence[int] = ALWAYS_SUPPRESSED,
):
    """Greedy decoding. Returns ((B, L) int32 tokens, (B,) float32 log-probs).

    Args:
        step_fn: see the module docstring (N = B).
        state: initial decoder state.
        limits: (B,) int maximum output length of each row (<= max_length).
        max_length: L, a Python int.
        suppressed_ids: ids never generated (default PAD and BOS).
    """
    loop = greedy_start(state, limits, max_length, bos_id=bos_id)
    loop = greedy_advance(
        step_fn,
        loop,
        limits,
        max_length,
        eos_id=eos_id,
        suppressed_ids=suppressed_ids,
    )
    return greedy_result(loop)


def greedy_start(state, limits, max_length: int, *, bos_id: int = BOS_ID):
    """The loop state of `greedy_search` before its first step."""
    batch_size = ops.shape(limits)[0]
    return {
        "step": ops.convert_to_tensor(0, "int32"),
        "tokens": ops.full((batch_size, 1), bos_id, "int32"),
        "outputs": ops.full((batch_size, max_length), PAD_ID, "int32"),
        "scores": ops.zeros((batch_size,), "float32"),
        "finished": ops.zeros((batch_size,), "bool"),
        "state": state,
    }


def sampling_start(state, limits, max_length: int, uniform, *, bos_id: int = BOS_ID):
    """The loop state of a sampling search: greedy's, with the (N, L)
    float32 numbers in [0, 1) that step t of row n draws with."""
    loop = greedy_start(state, limits, max_length, bos_id=bos_id)
    return {**loop, "uniform": ops.cast(uniform, "float32")}


def greedy_active(loop):
    """(B,) bool: the rows that still decode."""
    return ops.logical_not(loop["finished"])


def greedy_result(loop):
    """((B, L) int32 tokens, (B,) float32 log-probs) of a greedy loop state."""
    return loop["outputs"], loop["scores"]


def greedy_advance(
    step_fn: Callable,
    loop,
    limits,
    max_length: int,
    *,
    stop_step=None,
    eos_id: int = EOS_ID,
    suppressed_ids: Sequence[int] = ALWAYS_SUPPRESSED,
    draw: Callable | None = None,
):
    """Run greedy steps from `loop` until every row finished, or the step
    index reaches `max_length` or `stop_step` (a scalar, for searches run in
    segments). Returns the new loop state.

    `draw(log_probs (N, V), uniform (N,)) -> (N,) int32` replaces the argmax
    to sample (see `decoding.sampling`); the loop then needs its "uniform"
    numbers (`sampling_start`). Scores stay the model's log-probabilities
    of the tokens chosen."""
    last_step = _last_step(max_length, stop_step)

    def cond(loop):
        return ops.logical_and(loop["step"] < last_step, ops.any(greedy_active(loop)))

    def body(loop):
        step, finished = loop["step"], loop["finished"]
        logits, state = step_fn(loop["tokens"], step, loop["state"])
        log_probs = ops.log_softmax(ops.cast(logits, "float32"), axis=-1)
        log_probs = suppress(log_probs, suppressed_ids)
        if draw is None:
            best = ops.cast(ops.argmax(log_probs, axis=-1), "int32")
            best_log_prob = ops.max(log_probs, axis=-1)
        else:
            best = draw(log_probs, ops.take(loop["uniform"], step, axis=1))
            best_log_prob = ops.take_along_axis(log_probs, best[:, None], 1)[:, 0]
        tokens = ops.where(finished, PAD_ID, best)
        scores = loop["scores"] + ops.where(finished, 0.0, best_log_prob)
        outputs = ops.slice_update(loop["outputs"], [0, step], tokens[:, None])
        done = ops.logical_or(ops.equal(tokens, eos_id), step + 1 >= limits)
        return (
            {
                **loop,
                "step": step + 1,
                "tokens": tokens[:, None],
                "outputs": outputs,
                "scores": scores,
                "finished": ops.logical_or(finished, done),
                "state": state,
            },
        )

    return ops.while_loop(cond, body, (loop,))[0]


def _last_step(max_length: int, stop_step):
    if stop_step is None:
        return max_length
    return ops.minimum(ops.cast(stop_step, "int32"), max_length)


def length_penalty(length, alpha: float):
    """GNMT length penalty ((5 + length) / 6) ** alpha (Wu et al. 2016)."""
    return ops.power((5.0 + ops.cast(length, "float32")) / 6.0, alpha)


def _gather_beams(tensor, beam_indices, batch_size: int, beam_size: int):
    """Pick rows of a flattened (B * k_in, ...) tensor: beam_indices (B, k)
    index beams within each batch row -> (B * k, ...)."""
    offsets = ops.arange(batch_size, dtype="int32")[:, None] * beam_size
    flat = ops.reshape(beam_indices + offsets, (-1,))
    return ops.take(tensor, flat, axis=0)


def _take(tensor, indices):
    """tensor (B, n, ...) and indices (B, m) -> (B, m, ...)."""
    expand = ops.reshape(indices, tuple(ops.shape(indices)) + (1,) * (tensor.ndim - 2))
    return ops.take_along_axis(tensor, expand, axis=1)


def beam_search(
    step_fn: Callable,
    state,
    limits,
    max_length: int,
    *,
    beam_size: int = PAPER.beam_size,
    alpha: float = PAPER.alpha,
    early_stopping: bool = PAPER.early_stopping,
    bos_id: int = BOS_ID,
    eos_id: int = EOS_ID,
    suppressed_ids: Sequence[int] = ALWAYS_SUPPRESSED,
):
    """Batched beam search with a finished-hypothesis pool.

    Args:
        step_fn: see the module docstring (N = B * k).
        state: initial decoder state with N = B * k rows (beam-major within
            each batch row, e.g. from `ops.repeat(x, k, axis=0)`).
        limits: (B,) int maximum output length per row (<= max_length).
        max_length: L, a Python int.
        beam_size: k.
        alpha: length-penalty exponent; 0 ranks by total log-probability.
        early_stopping: see `beam_active`. Defaults to False (the paper's
            search).
        suppressed_ids: ids never generated (default PAD and BOS).

    Returns:
        (sequences (B, k, L) int32, scores (B, k) float32), best first;
        scores are log P(Y) / lp(|Y|), with |Y| counting EOS.
    """
    loop = beam_start(state, limits, max_length, beam_size=beam_size, bos_id=bos_id)
    loop = beam_advance(
        step_fn,
        loop,
        limits,
        max_length,
        beam_size=beam_size,
        alpha=alpha,
        early_stopping=early_stopping,
        eos_id=eos_id,
        suppressed_ids=suppressed_ids,
    )
    return beam_result(loop)


def beam_start(
    state,
    limits,
    max_length: int,
    *,
    beam_size: int = PAPER.beam_size,
    bos_id: int = BOS_ID,
):
    """The loop state of `beam_search` before its first step."""
    batch_size = ops.shape(limits)[0]
    k = beam_size
    # Only beam 0 is live at first: the k copies of BOS are the same prefix.
    first_beam = ops.convert_to_tensor([0.0] + [NEG_INF] * (k - 1), "float32")
    return {
        "step": ops.convert_to_tensor(0, "int32"),
        "tokens": ops.full((batch_size * k, 1), bos_id, "int32"),
        "alive_seq": ops.full((batch_size, k, max_length), PAD_ID, "int32"),
        "alive_log_probs": ops.tile(first_beam[None], (batch_size, 1)),
        "finished_seq": ops.full((batch_size, k, max_length), PAD_ID, "int32"),
        "finished_scores": ops.full((batch_size, k), NEG_INF, "float32"),
        "finished_flags": ops.zeros((batch_size, k), "bool"),
        "state": state,
    }


def beam_active(
    loop, limits, alpha: float, early_stopping: bool = PAPER.early_stopping
):
    """(B,) bool: the rows whose best live hypothesis can still beat their
    worst finished one. A row that is not active never changes again: its
    live scores only fall and its pool only improves.

    With `early_stopping`, a row also stops once it has k finished
    hypotheses (fairseq's rule; Hugging Face's `early_stopping=True`): much
    sooner, and its result is the paper's search's pool at that step, which
    a longer search could still have improved.
    """
    # Scores can only fall as a hypothesis grows; with alpha >= 0 the most a
    # live one can still reach is its log-prob over the largest penalty.
    best_alive = loop["alive_log_probs"][:, 0] / length_penalty(limits, alpha)
    worst_finished = ops.min(
        ops.where(loop["finished_flags"], loop["finished_scores"], NEG_INF),
        axis=1,
    )
    active = best_alive > worst_finished
    if early_stopping:
        active = ops.logical_and(
            active, ops.logical_not(ops.all(loop["finished_flags"], axis=1))
        )
    return active


def beam_advance(
    step_fn: Callable,
    loop,
    limits,
    max_length: int,
    *,
    beam_size: int = PAPER.beam_size,
    alpha: float = PAPER.alpha,
    early_stopping: bool = PAPER.early_stopping,
    stop_step=None,
    eos_id: int = EOS_ID,
    suppressed_ids: Sequence[int] = ALWAYS_SUPPRESSED,
):
    """Run beam-search steps from `loop` until no row is active (see
    `beam_active`), or the step index reaches `max_length` or `stop_step` (a
    scalar, for searches run in segments). Returns the new loop state."""
    batch_size = ops.shape(limits)[0]
    k = beam_size
    last_step = _last_step(max_length, stop_step)

    def cond(loop):
        improvable = ops.any(beam_active(loop, limits, alpha, early_stopping))
        return ops.logical_and(loop["step"] < last_step, improvable)

    def body(loop):
        step = loop["step"]
        logits, state = step_fn(loop["tokens"], step, loop["state"])
        log_probs = ops.log_softmax(ops.cast(logits, "float32"), axis=-1)
        log_probs = suppress(log_probs, suppressed_ids)
        vocab_size = ops.shape(log_probs)[-1]
        log_probs = ops.reshape(log_probs, (batch_size, k, vocab_size))
        candidates = loop["alive_log_probs"][:, :, None] + log_probs  # (B,k,V)
        flat = ops.reshape(candidates, (batch_size, k * vocab_size))
        # 2k candidates: at most k end in EOS, so k live ones always remain.
        top_log_probs, top_indices = ops.top_k(flat, 2 * k)  # (B, 2k)
        top_beams = top_indices // vocab_size
        top_tokens = ops.cast(top_indices % vocab_size, "int32")
        top_seq = _take(loop["alive_seq"], top_beams)  # (B, 2k, L)
        top_seq = ops.slice_update(
            top_seq,
            [0, 0, step],
            ops.reshape(top_tokens, (batch_size, 2 * k, 1)),
        )
        at_limit = (step + 1 >= limits)[:, None]  # (B, 1)
        ends = ops.logical_or(ops.equal(top_tokens, eos_id), at_limit)

        # Live hypotheses: the best k candidates that did not end. Ended ones
        # rank below even the placeholder candidates of dead beams (about
        # NEG_INF), which fill live slots when k is large for the vocabulary.
        alive_scores = ops.where(ends, 2 * NEG_INF, top_log_probs)
        alive_log_probs, alive_rank = ops.top_k(alive_scores, k)
        alive_seq = _take(top_seq, alive_rank)
        alive_beams = _take(top_beams, alive_rank)
        alive_tokens = _take(top_tokens, alive_rank)

        # Finished pool: EOS (or limit) among the top k ranks, penalised by
        # length, merged with the pool so far; the best k stay.
        # Rows past their limit add nothing; candidates that do not finish
        # never displace the pool's entries, placeholders included.
        rank = ops.arange(2 * k)[None, :]
        finishing = ops.logical_and(ends, rank < k)
        finishing = ops.logical_and(finishing, (step < limits)[:, None])
        if early_stopping:
            # Stopped rows could still improve: freeze their pools, so a
            # row's result does not depend on what else is in the batch.
            open_rows = beam_active(loop, limits, alpha, early_stopping)
            finishing = ops.logical_and(finishing, open_rows[:, None])
        new_scores = top_log_probs / length_penalty(step + 1, alpha)
        new_scores = ops.where(finishing, new_scores, 2 * NEG_INF)
        pool_scores = ops.concatenate([loop["finished_scores"], new_scores], 1)
        pool_seq = ops.concatenate([loop["finished_seq"], top_seq], 1)
        pool_flags = ops.concatenate([loop["finished_flags"], finishing], 1)
        finished_scores, keep = ops.top_k(pool_scores, k)

        state = tree.map_structure(
            lambda t: _gather_beams(t, alive_beams, batch_size, k), state
        )
        return (
            {
                "step": step + 1,
                "tokens": ops.reshape(alive_tokens, (batch_size * k, 1)),
                "alive_seq": alive_seq,
                "alive_log_probs": alive_log_probs,
                "finished_seq": _take(pool_seq, keep),
                "finished_scores": finished_scores,
                "finished_flags": _take(pool_flags, keep),
                "state": state,
            },
        )

    return ops.while_loop(cond, body, (loop,))[0]


def beam_result(loop):
    """(sequences (B, k, L), scores (B, k)) of a beam loop state: the
    finished hypotheses, or the live ones for a row that finished none."""
    any_finished = ops.any(loop["finished_flags"], axis=1)  # (B,)
    sequences = ops.where(
        any_finished[:, None, None], loop["finished_seq"], loop["alive_seq"]
    )
    scores = ops.where(
        any_finished[:, None], loop["finished_scores"], loop["alive_log_probs"]
    )
    return sequences, scores
