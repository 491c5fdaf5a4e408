"""Bind the pure search functions of `decoding.search` to a `Transformer`.

`SequenceGenerator` encodes a batch of sources once, builds the step function
(cached: per-layer key/value caches written at the step index; uncached: the
whole prefix re-run every step, for checks and benchmarks), runs greedy or
beam search, and compiles the whole thing once per input shape.

Legend: B batch, S source length, k beam size, L = S + max_extra_length.
"""

from __future__ import annotations

import functools

import numpy as np
from keras import ops, tree

from keras_transformer.config import UNK_ID
from keras_transformer.decoding import search
from keras_transformer.decoding.compile import compile_function
from keras_transformer.decoding.sampling import SamplingSettings, draw_tokens
from keras_transformer.decoding.settings import SearchSettings, search_settings


def cached_step_fn(model, source_ids, memory):
    """step_fn over the model's KV caches; state = list of (keys, values)."""
    return _cached_step_fn(model, source_ids, model.cross_key_values(memory))


def _cached_step_fn(model, source_ids, cross_key_values, beams: int = 1):
    def step_fn(tokens, step, cache):
        logits, cache = model.decode_step(
            tokens, step, cache, cross_key_values, source_ids, beams
        )
        return logits[:, -1], cache

    return step_fn


def uncached_step_fn(model, source_ids, memory):
    """step_fn that re-runs the decoder on the whole prefix every step;
    state = (N, L + 1) token buffer that starts with BOS."""

    def step_fn(tokens, step, buffer):
        buffer = ops.slice_update(buffer, [0, step], tokens)
        logits = model.decode(buffer, memory, source_ids)
        return ops.take(logits, step, axis=1), buffer

    return step_fn


# Batches of at most this many sentences get caches as long as the output
# limit from the start (see SequenceGenerator): the server's batches (8 at
# most by default) then compile 4 programs per source length instead of up
# to 9, and decoded as fast (docs/serving-warm-up.md).
SMALL_BATCH = 8


class SequenceGenerator:
    """Greedy (beam_size=1) or beam-search decoding of a Transformer.

    By default the search runs in segments of `segment_steps` steps, and
    between segments the rows (sentences) that are done leave the batch: it
    shrinks 4x at a time (B, B/4, B/16, ..., 1 rows), so one long or
    never-ending sentence no longer keeps a whole batch decoding. A row that
    is done never changes again (greedy: it emitted EOS or reached its
    limit; beam: no live hypothesis can still beat its worst finished one),
    so the outputs are those of the search over the whole batch. Each
    smaller batch size is one more compiled shape.

    The segments also size the key/value caches to the steps run so far
    (twice `segment_steps`, then doubled as the search goes on, at most the
    output limit) instead of to the output limit from the start: every step
    attends over, and beam search reorders, the whole cache, so a cache as
    long as the limit (source + 50) costs most steps several times what the
    output needs. Each cache length is one more compiled shape too, so a
    batch of at most 8 sentences (a small cache anyway: the server's
    batches, the one-sentence CLI call) gets the limit's cache at once.

    Args:
        model: a `Transformer`.
        settings: the `SearchSettings` (beam size, alpha, output limit,
            UNK, early stopping). Defaults to the paper's: beam 4, alpha
            0.6, source + 50 (§6.1).
        cached: use the key/value cache. Defaults to True.
        jit: compile the search, or each segment of it (XLA / jit).
            Defaults to True.
        drop_finished: run in segments and drop rows that are done.
            Defaults to True; False runs the whole search as one program.
        segment_steps: decoding steps per segment. Defaults to 8.
        sampling: `SamplingSettings` to draw tokens at random instead of
            taking the argmax (beam size 1 only); each call then needs the
            rows' uniform numbers (`sampling.uniform_numbers`). Defaults to
            None: no sampling.
        grammar: a `tree_grammar.TreeGrammar` that masks, at every step,
            the tokens that cannot lead to a tree over the source's words
            (the parsing task). Defaults to None: no mask.
        **changes: `SearchSettings` fields to change (`beam_size=1`).

    Call arguments:
        source_ids: (B, S) int ids, pad 0.
        abandoned: see `__call__`.
        uniform: with sampling, (B, S + max_extra_length) float32 numbers
            in [0, 1) the rows draw with.

    Returns:
        (sequences (B, k, L) int32 numpy, scores (B, k) float32 numpy), best
        first; tokens up to and including EOS, then PAD.
    """

    def __init__(
        self,
        model,
        settings: SearchSettings | None = None,
        *,
        cached: bool = True,
        jit: bool = True,
        drop_finished: bool = True,
        segment_steps: int = 8,
        sampling: SamplingSettings | None = None,
        grammar=None,
        **changes,
    ):
        settings = search_settings(settings, **changes)
        if sampling is not None and not sampling.is_sampling:
            sampling = None
        if sampling is not None and not settings.is_greedy:
            raise ValueError(
                f"--sampling {sampling.sampling} draws one token at a time for "
                f"each sample; it needs --beam-size 1 (not {settings.beam_size}). "
                "For several samples per input use --num-samples."
            )
        if not isinstance(segment_steps, int) or segment_steps < 1:
            raise ValueError(
                f"segment_steps must be an int >= 1. Received: {segment_steps!r}"
            )
        config = getattr(model, "config", None)
        if config is not None:  # The output side's vocabulary.
            settings.check_vocabulary(config.target_vocab_size or config.vocab_size)
        self.model = model
        self.settings = settings
        self.cached = cached
        self.drop_finished = drop_finished
        self.segment_steps = segment_steps
        self.sampling = sampling
        self.grammar = grammar
        self.suppressed_ids = search.ALWAYS_SUPPRESSED + (
            () if settings.allow_unk else (UNK_ID,)
        )
        compile_ = (lambda fn: compile_function(fn, model)) if jit else (lambda f: f)
        self._run = compile_(self.search)
        self._start = compile_(functools.partial(self.start, growing_cache=True))
        self._segment = compile_(self._advance_segment)

    # The settings the search reads, by name.
    beam_size = property(lambda self: self.settings.beam_size)
    alpha = property(lambda self: self.settings.alpha)
    max_extra_length = property(lambda self: self.settings.max_extra_length)
    allow_unk = property(lambda self: self.settings.allow_unk)
    early_stopping = property(lambda self: self.settings.early_stopping)

    def search(self, source_ids, uniform=None, alpha=None, given_tags=None):
        """The uncompiled search on tensors: (B, S) int32 source ids ->
        (sequences (B, k, L), scores (B, k)) tensors. B and S may be dynamic
        (a TensorFlow graph with unknown dimensions)."""
        carry = self.start(source_ids, uniform, alpha, given_tags)
        return self.result(self.advance(carry))

    def start(
        self,
        source_ids,
        uniform=None,
        alpha=None,
        given_tags=None,
        growing_cache: bool = False,
    ):
        """Encode (B, S) sources and set up the search: returns the carry, a
        dict of tensors whose leading axis is B or B * k ("step" and
        "alpha" aside).

        The caches hold the output limit's positions, or with
        `growing_cache` (static shapes only) those of the first segments,
        for a caller that grows them (see `cache_length`). `alpha`, the
        length penalty's exponent, is a value of the carry, not of the
        program: a scalar tensor (default: the settings' alpha), so every
        alpha runs the same compiled search. `given_tags`: with a grammar,
        (B, S) the target id of each word's tag, -1 for any
        (`TreeGrammar.start`)."""
        k = self.beam_size
        batch_size, source_length = ops.shape(source_ids)
        max_length = source_length + self.max_extra_length
        limits = search.output_limits(source_ids, self.max_extra_length)
        memory = self.model.encode(source_ids)
        if k > 1:  # Every beam of a sentence sees the same source.
            source_ids = ops.repeat(source_ids, k, axis=0)
        rows = batch_size * k
        alpha = self.alpha if alpha is None else alpha
        carry = {
            "source_ids": source_ids,
            "limits": limits,
            "alpha": ops.cast(ops.convert_to_tensor(alpha), "float32"),
        }
        if self.cached:
            # One row per sentence: its beams share them (see `decode_step`).
            carry["cross_key_values"] = self.model.cross_key_values(memory)
            cache_length = max_length
            if growing_cache:
                cache_length = self.cache_length(
                    self.segment_steps, max_length, batch_size
                )
            state = self.model.init_decode_cache(rows, cache_length)
        else:
            carry["memory"] = ops.repeat(memory, k, axis=0) if k > 1 else memory
            state = ops.full((rows, max_length + 1), search.BOS_ID, "int32")
        if self.grammar is not None:  # Its state goes where the beams go.
            row_limits = ops.repeat(limits, k, axis=0) if k > 1 else limits
            if given_tags is not None and k > 1:
                given_tags = ops.repeat(given_tags, k, axis=0)
            state = {
                "model": state,
                "grammar": self.grammar.start(source_ids, row_limits, given_tags),
            }
        if self.sampling is not None:
            carry["loop"] = search.sampling_start(state, limits, max_length, uniform)
        elif k == 1:
            carry["loop"] = search.greedy_start(state, limits, max_length)
        else:
            carry["loop"] = search.beam_start(state, limits, max_length, beam_size=k)
        return carry

    def advance(self, carry, stop_step=None):
        """Run the search from `carry` until every row is done, or up to the
        step index `stop_step` (a scalar). Returns the new carry."""
        source_ids = carry["source_ids"]
        max_length = ops.shape(source_ids)[1] + self.max_extra_length
        if self.cached:
            step_fn = _cached_step_fn(
                self.model, source_ids, carry["cross_key_values"], self.beam_size
            )
        else:
            step_fn = uncached_step_fn(self.model, source_ids, carry["memory"])
        if self.grammar is not None:
            step_fn = self.grammar.wrap(step_fn, source_ids)
        settings = {"stop_step": stop_step, "suppressed_ids": self.suppressed_ids}
        if self.beam_size == 1:
            loop = search.greedy_advance(
                step_fn,
                carry["loop"],
                carry["limits"],
                max_length,
                draw=self._draw_fn(),
                **settings,
            )
        else:
            loop = search.beam_advance(
                step_fn,
                carry["loop"],
                carry["limits"],
                max_length,
                beam_size=self.beam_size,
                alpha=carry["alpha"],
                early_stopping=self.early_stopping,
                **settings,
            )
        return {**carry, "loop": loop}

    def _draw_fn(self):
        """`draw` of `search.greedy_advance`: None (argmax) without sampling."""
        if self.sampling is None:
            return None
        return functools.partial(
            draw_tokens,
            top_k=self.sampling.k,
            top_p=self.sampling.p,
            temperature=self.sampling.draw_temperature,
        )

    def result(self, carry):
        """(sequences (B, k, L), scores (B, k)) of a carry, best first."""
        if self.beam_size == 1:
            tokens, scores = search.greedy_result(carry["loop"])
            return tokens[:, None], scores[:, None]
        return search.beam_result(carry["loop"])

    def active(self, carry):
        """(B,) bool: the rows that are not done yet."""
        if self.beam_size == 1:
            return search.greedy_active(carry["loop"])
        return search.beam_active(
            carry["loop"], carry["limits"], carry["alpha"], self.early_stopping
        )

    def cache_length(self, steps: int, max_length: int, sentences: int) -> int:
        """Cache positions for a search of `sentences` rows that has run up
        to `steps` steps: 2 x segment_steps x a power of 2 (few distinct
        shapes), at most `max_length`; `max_length` for a small batch."""
        if sentences <= SMALL_BATCH:
            return max_length
        length = 2 * self.segment_steps
        while length < steps:
            length *= 2
        return min(length, max_length)

    def _grow_cache(self, carry, steps: int, max_length: int):
        """Pad the caches with empty positions to hold `steps` steps; a small
        batch's to the limit at once (one compiled shape fewer)."""
        state = carry["loop"]["state"]
        if self.grammar is not None:
            state = state["model"]
        current = ops.shape(tree.flatten(state)[0])[2]
        length = self.cache_length(steps, max_length, ops.shape(carry["limits"])[0])
        if current >= length:
            return carry
        extra = length - current

        def grow(cache):  # (N, H, L, K): empty (zero) positions at the end
            return ops.pad(cache, [[0, 0], [0, 0], [0, extra], [0, 0]])

        state = tree.map_structure(grow, state)
        if self.grammar is not None:
            state = {**carry["loop"]["state"], "model": state}
        return {**carry, "loop": {**carry["loop"], "state": state}}

    def _advance_segment(self, carry, stop_step):
        carry = self.advance(carry, stop_step)
        return carry, self.active(carry), *self.result(carry)

    def __call__(
        self, source_ids, abandoned=None, uniform=None, alpha=None, given_tags=None
    ):
        """(sequences, scores) of (B, S) source ids. `abandoned`: a callable
        giving (B,) bools, read between segments: rows it marks True (their
        caller left) stop there, as finished rows do, and their outputs are
        whatever they had (the whole search, without `drop_finished`,
        ignores it). `alpha`: the length penalty's exponent for this call
        (default: the settings'), on the same compiled programs.
        `given_tags`: (B, S) int, each word's tag's target id or -1, for the
        grammar (`start`)."""
        source_ids = np.asarray(source_ids, np.int32)
        uniform = self._uniform(source_ids, uniform)
        alpha = self._alpha(alpha)
        given = self._given_tags(source_ids, given_tags)
        if not self.drop_finished:
            sequences, scores = self._run(
                ops.convert_to_tensor(source_ids), uniform, alpha, given
            )
            return ops.convert_to_numpy(sequences), ops.convert_to_numpy(scores)
        return self._search_in_segments(source_ids, abandoned, uniform, alpha, given)

    def _given_tags(self, source_ids: np.ndarray, given_tags):
        """The given tags as a tensor (None when none), checked against the
        batch's shape; only a grammar reads them."""
        if given_tags is None:
            return None
        if self.grammar is None:
            raise ValueError("Given tags need the tree grammar (a parsing search).")
        if np.shape(given_tags) != source_ids.shape:
            raise ValueError(
                f"Given tags must be one per source word, of shape "
                f"{source_ids.shape}. Received: {np.shape(given_tags)}"
            )
        return ops.convert_to_tensor(np.asarray(given_tags, np.int32))

    def _alpha(self, alpha=None):
        """`alpha` (default: the settings') as the float32 scalar tensor the
        compiled programs take."""
        value = self.alpha if alpha is None else alpha
        return ops.convert_to_tensor(np.float32(value))

    def _uniform(self, source_ids: np.ndarray, uniform):
        """The sampling rows' numbers as a tensor (None without sampling),
        checked against the batch's shape."""
        if self.sampling is None:
            return None
        shape = (source_ids.shape[0], source_ids.shape[1] + self.max_extra_length)
        if uniform is None or np.shape(uniform) != shape:
            got = None if uniform is None else np.shape(uniform)
            raise ValueError(
                f"Sampling needs uniform numbers of shape {shape} (rows, source "
                f"length + max_extra_length). Received: {got}"
            )
        return ops.convert_to_tensor(np.asarray(uniform, np.float32))

    def _search_in_segments(self, source_ids, abandoned, uniform, alpha, given):
        batch_size = source_ids.shape[0]
        max_length = source_ids.shape[1] + self.max_extra_length
        carry = self._start(ops.convert_to_tensor(source_ids), uniform, alpha, given)
        rows = np.arange(batch_size)  # Each carry row's input row; -1: filler.
        sequences = scores = None
        step = 0
        while True:
            stop_step = np.int32(step + self.segment_steps)
            if self.cached:
                carry = self._grow_cache(carry, int(stop_step), max_length)
            carry, active, row_sequences, row_scores = self._segment(carry, stop_step)
            active = ops.convert_to_numpy(active)
            step = int(carry["loop"]["step"])
            if step >= max_length:
                active[:] = False
            if abandoned is not None:
                gone = np.asarray(abandoned(), bool)[np.maximum(rows, 0)]
                active &= ~(gone & (rows >= 0))
            if sequences is None:
                sequences = np.zeros((batch_size, *row_sequences.shape[1:]), np.int32)
                scores = np.zeros((batch_size, *row_scores.shape[1:]), np.float32)
            done = np.logical_and(~active, rows >= 0)
            sequences[rows[done]] = ops.convert_to_numpy(row_sequences)[done]
            scores[rows[done]] = ops.convert_to_numpy(row_scores)[done]
            if not active.any():
                return sequences, scores
            size = smaller_batch_size(len(rows), int(active.sum()))
            if size < len(rows):
                carry, rows = _keep_rows(carry, active, rows, size)

    def warm_up(self, source_ids) -> None:
        """Compile every program a search of this batch shape (B, S) can
        run, whatever its sentences' output lengths: the whole search, or
        with `drop_finished` the start, a segment at each cache length the
        caches grow to, and a segment at each smaller batch size the search
        shrinks to. A server calls it before it says it is ready."""
        source_ids = np.asarray(source_ids, np.int32)
        uniform = None
        if self.sampling is not None:
            length = source_ids.shape[1] + self.max_extra_length
            uniform = self._uniform(
                source_ids, np.zeros((source_ids.shape[0], length), np.float32)
            )
        if not self.drop_finished:
            self._run(ops.convert_to_tensor(source_ids), uniform, self._alpha(), None)
            return
        batch_size = source_ids.shape[0]
        max_length = source_ids.shape[1] + self.max_extra_length
        # The arguments as a search without given tags passes them (the
        # same program: a call with fewer arguments would trace another).
        carry = self._start(
            ops.convert_to_tensor(source_ids), uniform, self._alpha(), None
        )
        lengths = [max_length]
        if self.cached and batch_size > SMALL_BATCH:
            lengths = [
                self.cache_length(steps, max_length, batch_size)
                for steps in _doublings(2 * self.segment_steps, max_length)
            ]
        for length in lengths:  # The caches as they grow.
            if self.cached:
                carry = self._grow_cache(carry, length, max_length)
            carry, *_ = self._segment(carry, np.int32(0))
        rows = np.arange(batch_size)
        smaller = {smaller_batch_size(batch_size, n) for n in range(1, batch_size)}
        for size in sorted(smaller - {batch_size}, reverse=True):
            # The batch as sentences finish: from any size to any smaller
            # one, a program per size (the caches are then at the limit).
            active = np.arange(len(rows)) < size
            carry, rows = _keep_rows(carry, active, rows, size)
            if self.cached:
                carry = self._grow_cache(carry, max_length, max_length)
            carry, *_ = self._segment(carry, np.int32(0))


def _doublings(start: int, limit: int) -> list[int]:
    """start, 2 start, 4 start, ..., up to the first at or past `limit`."""
    values = [start]
    while values[-1] < limit:
        values.append(values[-1] * 2)
    return values


def padded_batch_size(batch_size: int, sentences: int) -> int:
    """The rows a batch of `sentences` sentences is searched (or scored) at:
    the whole `batch_size` when it is at most SMALL_BATCH (the server's
    batches: one start program per source length instead of three, for at
    most a segment of filler rows, which finish at once and leave), else the
    smallest size the search shrinks to that holds them (`smaller_batch_size`:
    a lone sentence is not searched as a batch of 64)."""
    if batch_size <= SMALL_BATCH:
        return batch_size
    return smaller_batch_size(batch_size, sentences)


def smaller_batch_size(batch_size: int, rows: int) -> int:
    """The smallest of batch_size, batch_size/4, batch_size/16, ..., 1
    (rounded up) that holds `rows` rows: the batch sizes the search runs
    at, so that few distinct shapes compile."""
    size = batch_size
    while size > 1 and -(-size // 4) >= rows:
        size = -(-size // 4)
    return size


def _keep_rows(carry, active, rows, size: int):
    """Gather the active rows of a carry into `size` rows; the rest are
    copies of a done row (they stay done) marked -1 in `rows`."""
    count = len(rows)
    keep = np.flatnonzero(active)
    filler = np.flatnonzero(~active)[0]
    index = np.concatenate([keep, np.full(size - len(keep), filler)])

    def gather(tensor):
        array = ops.convert_to_numpy(tensor)
        if array.ndim > 0:
            per_row = array.shape[0] // count  # 1, or k beams per sentence.
            array = array.reshape(count, per_row, *array.shape[1:])[index]
            array = array.reshape(size * per_row, *array.shape[2:])
        # Back to tensors: torch tensors do not mix with NumPy arrays in
        # comparisons (TensorFlow's and JAX's do).
        return ops.convert_to_tensor(array)

    new_rows = np.where(np.arange(size) < len(keep), rows[index], -1)
    return tree.map_structure(gather, carry), new_rows
