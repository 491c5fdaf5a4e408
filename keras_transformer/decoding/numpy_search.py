"""Greedy and beam search in NumPy, step for step as `decoding.search` searches.

The ONNX translator (`export.onnx_translator`) searches with these functions, so
that an export translates without Keras: `decoding.search` is written in
`keras.ops` and importing it starts Keras and its backend. The rules are the
same, in the same float32 arithmetic, and so are the outputs:

- the output limit of a sentence is its real length + `max_extra_length`;
- PAD and BOS, and UNK unless allowed, get a log-probability of
  `SUPPRESSED` (far below any real token's), after the softmax: scores stay
  the model's log-probabilities, nothing is renormalised;
- greedy search takes the first of equal maxima; beam search keeps 2k
  candidates per step, the live hypotheses are the best k that did not end,
  a hypothesis ends with EOS (among the top k candidates) or at its limit
  and joins the pool of finished ones with the GNMT score
  log P / ((5 + length) / 6) ** alpha, and a sentence stops when no live
  hypothesis can still beat its worst finished one (or, with
  `early_stopping`, once it has k finished);
- equal scores rank the lower index first (TensorFlow's and JAX's `top_k`).

One thing differs, and changes no output: a sentence that is done leaves
the batch at once (`SequenceGenerator` drops them every few steps), since a
done sentence never changes again.

The step function: ``step_fn(tokens (N, 1) int32, step, state, context) ->
(logits (N, V), state)``. `state` is a list of arrays whose leading axis is
the N rows (B sentences times k beams: the key/value caches), reordered as
hypotheses move between beams, in place (the step function returns arrays
the search may write to); `context` is a list of arrays whose leading
axis is the B sentences (the source and its cross-attention keys/values).
Both lose the rows of a sentence that is done: the state in place, its
kept rows moved to the front and views of those rows passed on, so a step
function's arrays stay its own (the ONNX translator's caches, with room for
later positions).

Legend: B sentences, k beam size, N = B * k rows, L maximum output length,
V vocabulary.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from keras_transformer.config import BOS_ID, EOS_ID, PAD_ID

# `decoding.search`'s constants (tests check that they agree).
NEG_INF = np.float32(-1.0e9)
SUPPRESSED = np.float32(4) * NEG_INF
ALWAYS_SUPPRESSED = (PAD_ID, BOS_ID)

StepFn = Callable[..., tuple[np.ndarray, list[np.ndarray]]]


def output_limits(source_ids: np.ndarray, max_extra_length: int) -> np.ndarray:
    """Per-sentence maximum output length: real source length + extra, or 1
    for an empty (all-pad) source. (B, S) -> (B,) int32."""
    real = np.sum(source_ids != PAD_ID, axis=1).astype(np.int32)
    return np.where(real > 0, real + max_extra_length, 1).astype(np.int32)


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """float32 log-probabilities over the last axis."""
    logits = np.asarray(logits, np.float32)
    shifted = logits - np.max(logits, axis=-1, keepdims=True)
    return shifted - np.log(np.sum(np.exp(shifted), axis=-1, keepdims=True))


def suppress(log_probs: np.ndarray, token_ids: Sequence[int]) -> np.ndarray:
    """`log_probs` with the columns `token_ids` set to SUPPRESSED (in place)."""
    log_probs[:, list(token_ids)] = SUPPRESSED
    return log_probs


def length_penalty(length, alpha: float) -> np.ndarray:
    """GNMT length penalty ((5 + length) / 6) ** alpha, in float32."""
    length = np.asarray(length).astype(np.float32)
    return np.power((np.float32(5) + length) / np.float32(6), np.float32(alpha))


def top_k(values: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The k largest of each row of (R, n) `values`, best first, and their
    indices; equal values rank the lower index first."""
    rows, n = values.shape
    if k >= n:
        order = np.argsort(-values, axis=1, kind="stable")
        return np.take_along_axis(values, order, axis=1), order
    # Every value at least the k-th largest (ties at the boundary included),
    # then a stable sort of those few.
    threshold = np.partition(values, n - k, axis=1)[:, n - k]
    indices = np.empty((rows, k), np.int64)
    for row in range(rows):
        candidates = np.flatnonzero(values[row] >= threshold[row])
        order = np.argsort(-values[row, candidates], kind="stable")[:k]
        indices[row] = candidates[order]
    return np.take_along_axis(values, indices, axis=1), indices


def _probabilities(logits, suppressed_ids: Sequence[int]) -> np.ndarray:
    return suppress(log_softmax(logits), suppressed_ids)


def _rows(arrays: list[np.ndarray], index: np.ndarray) -> list[np.ndarray]:
    if index.dtype == bool and index.all():  # Greedy's every step, mostly.
        return arrays
    return [array[index] for array in arrays]


def _move_rows(arrays: list[np.ndarray], rows: np.ndarray) -> list[np.ndarray]:
    """`_rows(arrays, rows)` for N indices into N rows, in place: only the
    rows whose hypothesis came from another beam are copied. The caches are
    the search's largest arrays (tens of MB a layer at `base`), and a beam
    that grew from itself keeps its row (at `base`, beam 4: 6 rows in 10)."""
    moved = np.flatnonzero(rows != np.arange(len(rows)))
    if not len(moved):
        return arrays
    sources = rows[moved]
    for array in arrays:
        array[moved] = array[sources]  # The right side is gathered first.
    return arrays


def _keep_rows(arrays: list[np.ndarray], kept: np.ndarray) -> list[np.ndarray]:
    """`_rows(arrays, kept)` for sorted row indices or a row mask, in place:
    the kept rows move to the front of each array, and the result is views
    of them."""
    if kept.dtype == bool:
        kept = np.flatnonzero(kept)
    if len(kept) == len(arrays[0]):  # Sorted and all there: nothing moves.
        return arrays
    for array in arrays:
        array[: len(kept)] = array[kept]  # The right side is gathered first.
    return [array[: len(kept)] for array in arrays]


def greedy_search(
    step_fn: StepFn,
    state: list[np.ndarray],
    context: list[np.ndarray],
    limits: np.ndarray,
    max_length: int,
    *,
    suppressed_ids: Sequence[int] = ALWAYS_SUPPRESSED,
    bos_id: int = BOS_ID,
    eos_id: int = EOS_ID,
) -> tuple[np.ndarray, np.ndarray]:
    """Greedy decoding. Returns ((B, 1, L) int32 tokens, up to and including
    EOS then PAD; (B, 1) float32 total log-probabilities)."""
    batch_size = len(limits)
    outputs = np.full((batch_size, max_length), PAD_ID, np.int32)
    scores = np.zeros((batch_size,), np.float32)
    live = np.arange(batch_size)  # The sentence of each row still decoding.
    tokens = np.full((batch_size, 1), bos_id, np.int32)
    step = 0
    while len(live) and step < max_length:
        logits, state = step_fn(tokens, step, state, context)
        log_probs = _probabilities(logits, suppressed_ids)
        best = np.argmax(log_probs, axis=-1).astype(np.int32)
        outputs[live, step] = best
        scores[live] += log_probs[np.arange(len(live)), best]
        going = (best != eos_id) & (step + 1 < limits[live])
        live, tokens = live[going], best[going][:, None]
        state, context = _keep_rows(state, going), _rows(context, going)
        step += 1
    return outputs[:, None], scores[:, None]


class _Beams:
    """The beam-search state of the sentences still searching (see
    `decoding.search.beam_start`): live and finished hypotheses."""

    def __init__(self, batch_size: int, k: int, max_length: int):
        first_beam = np.array([0.0] + [NEG_INF] * (k - 1), np.float32)
        self.alive_seq = np.full((batch_size, k, max_length), PAD_ID, np.int32)
        self.alive_log_probs = np.tile(first_beam[None], (batch_size, 1))
        self.finished_seq = np.full((batch_size, k, max_length), PAD_ID, np.int32)
        self.finished_scores = np.full((batch_size, k), NEG_INF, np.float32)
        self.finished_flags = np.zeros((batch_size, k), bool)

    def keep(self, sentences: np.ndarray) -> None:
        for name, value in vars(self).items():
            setattr(self, name, value[sentences])

    def active(self, limits, alpha: float, early_stopping: bool) -> np.ndarray:
        """(B,) bool: the sentences whose best live hypothesis can still beat
        their worst finished one (`decoding.search.beam_active`)."""
        best_alive = self.alive_log_probs[:, 0] / length_penalty(limits, alpha)
        worst_finished = np.min(
            np.where(self.finished_flags, self.finished_scores, NEG_INF), axis=1
        )
        active = best_alive > worst_finished
        if early_stopping:
            active &= ~np.all(self.finished_flags, axis=1)
        return active

    def result(self) -> tuple[np.ndarray, np.ndarray]:
        """The finished hypotheses, or the live ones for a sentence that
        finished none (`decoding.search.beam_result`)."""
        any_finished = np.any(self.finished_flags, axis=1)
        sequences = np.where(
            any_finished[:, None, None], self.finished_seq, self.alive_seq
        )
        scores = np.where(
            any_finished[:, None], self.finished_scores, self.alive_log_probs
        )
        return sequences, scores


def _take(array: np.ndarray, indices: np.ndarray) -> np.ndarray:
    """array (B, n, ...) and indices (B, m) -> (B, m, ...)."""
    return array[np.arange(len(array))[:, None], indices]


def _beam_rows(sentences: np.ndarray, k: int) -> np.ndarray:
    """The rows (beams) of `sentences`, in order. (B',) -> (B' * k,)"""
    return (sentences[:, None] * k + np.arange(k)[None, :]).reshape(-1)


def _beam_step(beams: _Beams, log_probs, step: int, limits, k, alpha, eos_id):
    """One step of `decoding.search.beam_advance`'s body on the beams;
    returns the beam each new live hypothesis grew from, and its token
    ((B, k) each)."""
    batch_size = len(limits)
    vocab_size = log_probs.shape[-1]
    log_probs = log_probs.reshape(batch_size, k, vocab_size)
    candidates = beams.alive_log_probs[:, :, None] + log_probs
    # 2k candidates: at most k end in EOS, so k live ones always remain.
    top_log_probs, top_indices = top_k(candidates.reshape(batch_size, -1), 2 * k)
    top_beams = top_indices // vocab_size
    top_tokens = (top_indices % vocab_size).astype(np.int32)
    top_seq = _take(beams.alive_seq, top_beams)
    top_seq[:, :, step] = top_tokens
    ends = (top_tokens == eos_id) | (step + 1 >= limits)[:, None]

    alive_scores = np.where(ends, 2 * NEG_INF, top_log_probs)
    beams.alive_log_probs, alive_rank = top_k(alive_scores, k)
    beams.alive_seq = _take(top_seq, alive_rank)

    # Only an end among the top k candidates finishes a hypothesis.
    finishing = ends & (np.arange(2 * k)[None, :] < k) & (step < limits)[:, None]
    new_scores = top_log_probs / length_penalty(step + 1, alpha)
    new_scores = np.where(finishing, new_scores, 2 * NEG_INF).astype(np.float32)
    pool_scores = np.concatenate([beams.finished_scores, new_scores], axis=1)
    beams.finished_scores, keep = top_k(pool_scores, k)
    pool_seq = np.concatenate([beams.finished_seq, top_seq], axis=1)
    beams.finished_seq = _take(pool_seq, keep)
    pool_flags = np.concatenate([beams.finished_flags, finishing], axis=1)
    beams.finished_flags = _take(pool_flags, keep)
    return _take(top_beams, alive_rank), _take(top_tokens, alive_rank)


def beam_search(
    step_fn: StepFn,
    state: list[np.ndarray],
    context: list[np.ndarray],
    limits: np.ndarray,
    max_length: int,
    *,
    beam_size: int,
    alpha: float,
    early_stopping: bool = False,
    suppressed_ids: Sequence[int] = ALWAYS_SUPPRESSED,
    bos_id: int = BOS_ID,
    eos_id: int = EOS_ID,
) -> tuple[np.ndarray, np.ndarray]:
    """Beam search with a finished-hypothesis pool. `state` has N = B * k
    rows (beam-major within each sentence), `context` B.

    Returns (sequences (B, k, L) int32, scores (B, k) float32), best first;
    scores are log P(Y) / lp(|Y|), with |Y| counting EOS.
    """
    k, batch_size = beam_size, len(limits)
    sequences = np.full((batch_size, k, max_length), PAD_ID, np.int32)
    scores = np.zeros((batch_size, k), np.float32)
    beams = _Beams(batch_size, k, max_length)
    live = np.arange(batch_size)  # The sentence of each searching row.
    tokens = np.full((batch_size * k, 1), bos_id, np.int32)
    step = 0
    while len(live):
        logits, state = step_fn(tokens, step, state, context)
        log_probs = _probabilities(logits, suppressed_ids)
        beam, token = _beam_step(beams, log_probs, step, limits[live], k, alpha, eos_id)
        rows = (beam + np.arange(len(live))[:, None] * k).reshape(-1)
        state, tokens = _move_rows(state, rows), token.reshape(-1, 1)
        step += 1
        going = beams.active(limits[live], alpha, early_stopping)
        if step >= max_length:
            going[:] = False
        if not going.all():  # Done sentences leave: they never change again.
            done = ~going
            sequences[live[done]], scores[live[done]] = _done(beams, done)
            beams.keep(going)
            kept = _beam_rows(np.flatnonzero(going), k)
            state, tokens = _keep_rows(state, kept), tokens[kept]
            live, context = live[going], _rows(context, going)
    return sequences, scores


def _done(beams: _Beams, done: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    sequences, scores = beams.result()
    return sequences[done], scores[done]
