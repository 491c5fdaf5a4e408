"""Which texts a search gets, and in what order (light: NumPy only).

`Translator` and the ONNX export's `OnnxTranslator` batch the same way: the
texts with tokens, shortest first, so that similar lengths share a batch
(less padding, fewer distinct shapes); a blank text is not searched.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


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
