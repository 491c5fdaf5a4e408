"""The translator core around a search: batches in, hypotheses out (NumPy only).

`Translator` and the ONNX export's `OnnxTranslator` share it, so that they
batch, pad and assemble hypotheses the same way: the texts with tokens,
shortest first, so that similar lengths share a batch (less padding, fewer
distinct shapes); a blank text is not searched; a batch is right-padded to
a multiple of 8 (a compiled search: to the coarser `ladder_length`); each
text's hypotheses come back best first, without the pool's unfinished
fillers. Light: the ONNX translator runs without Keras.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from keras_transformer.config import PAD_ID
from keras_transformer.decoding.numpy_search import NEG_INF

Hypotheses = list[tuple[str, float]]
"""(translation, score) pairs, best first."""


def length_order(texts: Sequence[str], encoded: Sequence[list[int]]) -> list[int]:
    """Indices of the texts to search (not blank, with tokens), shortest first."""
    return sorted(
        (i for i, ids in enumerate(encoded) if ids and texts[i].strip()),
        key=lambda i: len(encoded[i]),
    )


def unsearched(count: int, beam_size: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """`count` results of a text that is not searched: (k, 0) ids, zero scores."""
    empty = (np.zeros((beam_size, 0), np.int32), np.zeros((beam_size,), np.float32))
    return [empty] * count


def pad_batch(
    sequences: Sequence[Sequence[int]], length: int | None = None
) -> np.ndarray:
    """Right-pad ragged ids to (B, length) int32 (length: the longest, rounded
    up to a multiple of 8 to limit the number of compiled shapes)."""
    longest = max((len(s) for s in sequences), default=0)
    if length is None:
        length = max(8, int(math.ceil(longest / 8)) * 8)
    if longest > length:
        raise ValueError(f"A sequence of {longest} tokens exceeds length={length}.")
    batch = np.full((len(sequences), length), PAD_ID, np.int32)
    for row, ids in enumerate(sequences):
        batch[row, : len(ids)] = ids
    return batch


def ladder_length(tokens: int) -> int:
    """The source length a compiled search pads a batch of at most `tokens`
    tokens to: the first power of 2 from 8 on that holds them (8, 16, 32,
    64, 128, 256, ...). Each length is a set of compiled programs (each
    holding memory and about 140 of the memory mappings a process may
    have, and seconds to compile at a server's warm-up): 6 lengths reach
    256 tokens, for at most twice the tokens (docs/serving-warm-up.md)."""
    length = 8
    while length < tokens:
        length *= 2
    return length


def ladder_lengths(tokens: int) -> list[int]:
    """Every `ladder_length` of sources of up to `tokens` tokens."""
    return sorted({ladder_length(n) for n in range(1, max(tokens, 1) + 1)})


def strip_pad(ids: np.ndarray) -> np.ndarray:
    """One output's ids without its padding."""
    return ids[ids != PAD_ID]


def detokenize(tokenizer, outputs: Sequence[np.ndarray]) -> list[str]:
    """Output ids -> strings, in one call of the tokenizer; "" for an empty
    output."""
    width = max((len(o) for o in outputs), default=0)
    padded = np.zeros((len(outputs), max(width, 1)), np.int32)
    for row, ids in enumerate(outputs):
        padded[row, : len(ids)] = ids
    texts = tokenizer.detokenize(padded) if len(outputs) else []
    return [text if len(ids) else "" for text, ids in zip(texts, outputs)]


def real_hypotheses(hypotheses: Hypotheses) -> Hypotheses:
    """The best, then the others that are real: a search that finished
    fewer than k hypotheses fills the rest of its pool with about NEG_INF."""
    return hypotheses[:1] + [h for h in hypotheses[1:] if h[1] > NEG_INF / 2]


def best_ids(results: Sequence[tuple[np.ndarray, np.ndarray]]) -> list[np.ndarray]:
    """Each text's best output ids (up to and including EOS)."""
    return [strip_pad(ids[0]) for ids, _ in results]


def nbest_lists(
    results: Sequence[tuple[np.ndarray, np.ndarray]],
    to_text: Callable[[list[np.ndarray]], list[str]],
) -> list[Hypotheses]:
    """Each text's hypotheses as (translation, score) pairs, best first, from
    a search's (ids (k, L), scores (k,)) per text; `to_text` turns every
    output into a string in one call. A blank text gets [("", 0.0)]."""
    strings = iter(to_text([strip_pad(row) for ids, _ in results for row in ids]))
    found = []
    for ids, scores in results:
        hypotheses = [(next(strings), float(score)) for score in scores]
        found.append(
            hypotheses[:1] if not ids.shape[1] else real_hypotheses(hypotheses)
        )
    return found
