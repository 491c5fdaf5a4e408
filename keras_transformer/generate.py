"""Bind the pure search functions of `decoding` to a `Transformer`.

`SequenceGenerator` encodes a batch of sources once, builds the step function
(cached: per-layer key/value caches written at the step index; uncached: the
whole prefix re-run every step, for checks and benchmarks), runs greedy or
beam search, and compiles the whole thing once per input shape.

Legend: B batch, S source length, k beam size, L = S + max_extra_length.
"""

from __future__ import annotations

import numpy as np
from keras import ops

from keras_transformer import decoding
from keras_transformer.compile import compile_function
from keras_transformer.config import UNK_ID


def cached_step_fn(model, source_ids, memory):
    """step_fn over the model's KV caches; state = list of (keys, values)."""
    cross_key_values = model.cross_key_values(memory)

    def step_fn(tokens, step, cache):
        logits, cache = model.decode_step(
            tokens, step, cache, cross_key_values, source_ids
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


def check_search_settings(beam_size: int, alpha: float, max_extra_length: int):
    """Raise ValueError naming the first search setting out of range."""
    if not isinstance(beam_size, int) or beam_size < 1:
        raise ValueError(f"beam_size must be >= 1. Received: beam_size={beam_size}")
    if alpha < 0:
        raise ValueError(f"alpha must be >= 0. Received: alpha={alpha}")
    if max_extra_length < 1:
        raise ValueError(f"max_extra_length must be >= 1. Received: {max_extra_length}")


class SequenceGenerator:
    """Greedy (beam_size=1) or beam-search decoding of a Transformer.

    Args:
        model: a `Transformer`.
        beam_size: int. 1 is greedy. Defaults to 4 (§6.1).
        alpha: length-penalty exponent. Defaults to 0.6 (§6.1).
        max_extra_length: output may be this much longer than the source.
            Defaults to 50 (§6.1).
        cached: use the key/value cache. Defaults to True.
        jit: compile the whole search (XLA / jit). Defaults to True.
        allow_unk: let the search generate UNK. Defaults to False: UNK is
            suppressed like PAD and BOS (which are never generated).

    Call arguments:
        source_ids: (B, S) int ids, pad 0.

    Returns:
        (sequences (B, k, L) int32 numpy, scores (B, k) float32 numpy), best
        first; tokens up to and including EOS, then PAD.
    """

    def __init__(
        self,
        model,
        *,
        beam_size: int = 4,
        alpha: float = 0.6,
        max_extra_length: int = 50,
        cached: bool = True,
        jit: bool = True,
        allow_unk: bool = False,
    ):
        check_search_settings(beam_size, alpha, max_extra_length)
        self.model = model
        self.beam_size = beam_size
        self.alpha = alpha
        self.max_extra_length = max_extra_length
        self.cached = cached
        self.allow_unk = allow_unk
        self.suppressed_ids = decoding.ALWAYS_SUPPRESSED + (
            () if allow_unk else (UNK_ID,)
        )
        self._run = compile_function(self.search, model) if jit else self.search

    def search(self, source_ids):
        """The uncompiled search on tensors: (B, S) int32 source ids ->
        (sequences (B, k, L), scores (B, k)) tensors. B and S may be dynamic
        (a TensorFlow graph with unknown dimensions)."""
        k = self.beam_size
        batch_size, source_length = ops.shape(source_ids)
        max_length = source_length + self.max_extra_length
        limits = decoding.output_limits(source_ids, self.max_extra_length)
        memory = self.model.encode(source_ids)
        if k > 1:  # Every beam of a sentence sees the same source.
            source_ids = ops.repeat(source_ids, k, axis=0)
            memory = ops.repeat(memory, k, axis=0)
        rows = batch_size * k
        if self.cached:
            step_fn = cached_step_fn(self.model, source_ids, memory)
            state = self.model.init_decode_cache(rows, max_length)
        else:
            step_fn = uncached_step_fn(self.model, source_ids, memory)
            state = ops.full((rows, max_length + 1), decoding.BOS_ID, "int32")
        if k == 1:
            tokens, scores = decoding.greedy_search(
                step_fn,
                state,
                limits,
                max_length,
                suppressed_ids=self.suppressed_ids,
            )
            return tokens[:, None], scores[:, None]
        return decoding.beam_search(
            step_fn,
            state,
            limits,
            max_length,
            beam_size=k,
            alpha=self.alpha,
            suppressed_ids=self.suppressed_ids,
        )

    def __call__(self, source_ids):
        source_ids = ops.convert_to_tensor(np.asarray(source_ids, np.int32))
        sequences, scores = self._run(source_ids)
        return ops.convert_to_numpy(sequences), ops.convert_to_numpy(scores)
