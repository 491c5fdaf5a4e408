"""Autoregressive decoding over the cached decoder.

`greedy_decode` feeds one token per step through `Transformer.decode_step`,
which writes each layer's keys/values into a preallocated cache, so a step
costs one position, not the whole prefix. The cross-attention keys/values
are computed once per source. Decoding stops when every row has produced
EOS or reached its own limit (source length + `max_extra_length`).

Legend: B batch, S source length, L maximum output length.
"""

from __future__ import annotations

import numpy as np
from keras import ops

from keras_transformer.config import BOS_ID, EOS_ID, PAD_ID


def output_limits(source_ids: np.ndarray, max_extra_length: int) -> np.ndarray:
    """Per-row maximum output length: real source length + extra. (B,)"""
    source_lengths = np.sum(np.asarray(source_ids) != PAD_ID, axis=1)
    return source_lengths + max_extra_length


def greedy_decode(
    model,
    source_ids,
    *,
    max_extra_length: int = 50,
    bos_id: int = BOS_ID,
    eos_id: int = EOS_ID,
) -> np.ndarray:
    """Greedy decoding. (B, S) int source ids -> (B, L) int32 output ids.

    Each output row is the generated tokens up to and including EOS, then
    PAD; a row that hits its length limit ends without EOS.
    """
    source_ids = np.asarray(source_ids, np.int32)
    batch_size = source_ids.shape[0]
    limits = output_limits(source_ids, max_extra_length)
    max_length = int(limits.max())
    source = ops.convert_to_tensor(source_ids)
    memory = model.encode(source)
    cross_key_values = model.cross_key_values(memory)
    cache = model.init_decode_cache(batch_size, max_length)
    tokens = np.full((batch_size, 1), bos_id, np.int32)
    outputs = np.full((batch_size, max_length), PAD_ID, np.int32)
    finished = np.zeros(batch_size, bool)
    for step in range(max_length):
        logits, cache = model.decode_step(
            ops.convert_to_tensor(tokens), step, cache, cross_key_values, source
        )
        next_tokens = np.argmax(ops.convert_to_numpy(logits[:, -1]), axis=-1)
        next_tokens = np.where(finished, PAD_ID, next_tokens).astype(np.int32)
        outputs[:, step] = next_tokens
        finished |= (next_tokens == eos_id) | (step + 1 >= limits)
        if finished.all():
            break
        tokens = next_tokens[:, None]
    return outputs
