"""Sentence pairs as flat token arrays: what the batcher reads.

All source ids of a corpus lie one after another in one array, and an
offsets array (int64, one entry more than there are pairs) says where each
pair's ids start: pair i's source is
``source_tokens[source_offsets[i]:source_offsets[i + 1]]``; the same for the
target. `TokenPairs.from_lists` builds these arrays in memory from ragged
ids; a prepared store (`token_store`) maps the same arrays from its files,
so the batcher reads both through one interface and cannot tell them
apart. There are no per-pair Python objects: memory is a few bytes per
token, and nothing at all for a mapped store until a batch reads it.

Only NumPy is imported here.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence

import numpy as np

__all__ = ["SIDES", "TokenPairs", "index_dtype"]

SIDES = ("source", "target")
_SCAN_PAIRS = 1 << 20  # Pairs per block when scanning all the lengths.


def index_dtype(count: int) -> type:
    """The smallest integer type that indexes `count` pairs."""
    return np.int32 if count < 2**31 else np.int64


class TokenPairs:
    """Aligned source and target ids as flat arrays (see the module doc).

    Args:
        source_tokens, target_tokens: every pair's ids, one after another
            (any integer type; no BOS/EOS).
        source_offsets, target_offsets: int64, len(pairs) + 1 entries, the
            first 0 and the last the number of tokens.
        vocab_size: when known, an id at or past it in a batch is an error
            naming `names` (a damaged store), not a wrong embedding.
        names: what to name in such errors, per side (a store's files).
    """

    def __init__(
        self,
        source_tokens: np.ndarray,
        source_offsets: np.ndarray,
        target_tokens: np.ndarray,
        target_offsets: np.ndarray,
        *,
        vocab_size: int | None = None,
        names: dict[str, str] | None = None,
    ) -> None:
        if len(source_offsets) != len(target_offsets):
            raise ValueError(
                f"{len(source_offsets) - 1} source but {len(target_offsets) - 1} "
                "target sequences."
            )
        self.tokens = {"source": source_tokens, "target": target_tokens}
        self.offsets = {"source": source_offsets, "target": target_offsets}
        self.vocab_size = vocab_size
        self.names = names or {side: f"{side} ids" for side in SIDES}

    @classmethod
    def from_lists(
        cls,
        source_ids: Sequence[Sequence[int]],
        target_ids: Sequence[Sequence[int]],
        **kwargs,
    ) -> TokenPairs:
        """Pairs held in memory, from ragged ids (int32)."""
        if len(source_ids) != len(target_ids):
            raise ValueError(
                f"{len(source_ids)} source but {len(target_ids)} target sequences."
            )
        arrays = [_flatten(ids) for ids in (source_ids, target_ids)]
        return cls(*arrays[0], *arrays[1], **kwargs)

    @classmethod
    def from_lengths(
        cls,
        source_ids: np.ndarray,
        source_lengths: np.ndarray,
        target_ids: np.ndarray,
        target_lengths: np.ndarray,
        **kwargs,
    ) -> TokenPairs:
        """Pairs held in memory, from flat ids and each pair's lengths."""
        return cls(
            np.asarray(source_ids), _offsets(source_lengths),
            np.asarray(target_ids), _offsets(target_lengths),
            **kwargs,
        )  # fmt: skip

    def __len__(self) -> int:
        return len(self.offsets["source"]) - 1

    def num_tokens(self, side: str) -> int:
        return int(self.offsets[side][-1])

    def num_target_tokens(self) -> int:
        """Real target tokens (labels: the ids and EOS) of all the pairs."""
        return self.num_tokens("target") + len(self)

    def _offsets_block(self, side: str, start: int, stop: int) -> np.ndarray:
        """Offsets start..stop (inclusive) for a scan of every pair (a store
        reads them with plain reads: a mapping would keep every page it
        touched resident in this process)."""
        return self.offsets[side][start : stop + 1]

    def length_blocks(
        self, block: int = _SCAN_PAIRS
    ) -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
        """(first pair, source lengths, target lengths) of every pair, in
        blocks: int64 arrays, bounded memory whatever the corpus."""
        for start in range(0, len(self), block):
            stop = min(start + block, len(self))
            yield (
                start,
                np.diff(self._offsets_block("source", start, stop)),
                np.diff(self._offsets_block("target", start, stop)),
            )

    def lengths(self, side: str, members: np.ndarray) -> np.ndarray:
        """Lengths of the pairs `members` on `side` (int64)."""
        offsets = self.offsets[side]
        return offsets[members + 1] - offsets[members]

    def gather(
        self, side: str, members: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The ids of pairs `members` on `side`, ready to scatter into a
        padded (rows, length) array: (lengths, row of each id, column of
        each id, the ids as int32)."""
        offsets = self.offsets[side]
        starts = offsets[members]
        lengths = offsets[members + 1] - starts
        total = int(lengths.sum())
        rows = np.repeat(np.arange(len(members)), lengths)
        columns = np.arange(total) - np.repeat(np.cumsum(lengths) - lengths, lengths)
        ids = np.asarray(self.tokens[side][np.repeat(starts, lengths) + columns])
        if self.vocab_size is not None and total and int(ids.max()) >= self.vocab_size:
            bad = int(np.argmax(ids >= self.vocab_size))
            raise ValueError(
                f"{self.names[side]} is damaged: pair {int(members[rows[bad]])} "
                f"holds the id {int(ids[bad])}, outside the vocabulary of "
                f"{self.vocab_size} ids. Prepare the store again."
            )
        return lengths, rows, columns, ids.astype(np.int32, copy=False)


def _offsets(lengths: np.ndarray) -> np.ndarray:
    """Lengths -> offsets (int64, one more entry, the first 0)."""
    offsets = np.zeros(len(lengths) + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return offsets


def _flatten(ids: Sequence[Sequence[int]]) -> tuple[np.ndarray, np.ndarray]:
    offsets = _offsets(np.fromiter(map(len, ids), np.int64, count=len(ids)))
    tokens = np.fromiter(
        itertools.chain.from_iterable(ids), np.int32, count=int(offsets[-1])
    )
    return tokens, offsets
