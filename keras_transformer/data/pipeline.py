"""Input pipeline: teacher-forcing shift, filtering, length buckets and
token-budget batches with a small fixed set of padded shapes.

Every batch has one of `len(buckets)` shapes: bucket b pads source and target
to `buckets[b]` tokens and always holds `batch_size(b)` rows (a bucket's last
batch is completed with all-pad rows, whose labels are pad and so carry no
loss). On JAX, and under XLA on TensorFlow, each new shape is a new
compilation, so a bounded number of shapes is a requirement, not a nicety.
"""

from __future__ import annotations

import dataclasses
import math
import random
from collections.abc import Sequence

import keras
import numpy as np

from keras_transformer.config import BOS_ID, EOS_ID, PAD_ID

DEFAULT_BUCKETS = (8, 16, 24, 32, 48, 64, 96, 128, 192, 256)


def shift_for_teacher_forcing(target: Sequence[int]) -> tuple[list[int], list[int]]:
    """y -> (decoder input [BOS] + y, labels y + [EOS]); same length."""
    return [BOS_ID, *target], [*target, EOS_ID]


@dataclasses.dataclass
class FilterReport:
    """What `filter_training_pairs` dropped, with 1-based line numbers."""

    kept: int
    empty_lines: list[int]
    too_long_lines: list[int]

    def summary(self, origin: str = "training data", limit: int = 10) -> str:
        parts = [f"{origin}: kept {self.kept} pairs"]
        for label, lines in (
            ("empty or whitespace-only", self.empty_lines),
            ("over-long", self.too_long_lines),
        ):
            if lines:
                shown = ", ".join(map(str, lines[:limit]))
                more = " ..." if len(lines) > limit else ""
                parts.append(
                    f"dropped {len(lines)} {label} pairs (lines {shown}{more})"
                )
        return "; ".join(parts)


def drop_empty_pairs(
    source: Sequence[str], target: Sequence[str], line_numbers: Sequence[int]
) -> tuple[list[int], list[int]]:
    """Indices of pairs with text on both sides, and line numbers of the rest."""
    keep, dropped = [], []
    for index, (src, tgt) in enumerate(zip(source, target)):
        if src.strip() and tgt.strip():
            keep.append(index)
        else:
            dropped.append(line_numbers[index])
    return keep, dropped


def drop_long_pairs(
    source_ids: Sequence[Sequence[int]],
    target_ids: Sequence[Sequence[int]],
    line_numbers: Sequence[int],
    max_length: int,
) -> tuple[list[int], list[int]]:
    """Keep pairs whose source and shifted target fit in `max_length` tokens."""
    keep, dropped = [], []
    for index, (src, tgt) in enumerate(zip(source_ids, target_ids)):
        if len(src) <= max_length and len(tgt) + 1 <= max_length:
            keep.append(index)
        else:
            dropped.append(line_numbers[index])
    return keep, dropped


def bucket_lengths(max_length: int, buckets: Sequence[int] = DEFAULT_BUCKETS):
    """The bucket boundaries up to `max_length` (the last one is max_length)."""
    chosen = [b for b in buckets if b < max_length]
    return tuple(chosen) + (max_length,)


class BucketedBatches(keras.utils.PyDataset):
    """Token-budget batches of (inputs dict, labels) for `model.fit`.

    Args:
        source_ids: ragged source ids (no BOS/EOS).
        target_ids: ragged target ids (no BOS/EOS); shifted here.
        tokens_per_batch: budget of padded target tokens per batch; the rows
            of bucket b are max(1, tokens_per_batch // length_b), rounded
            down to a multiple of 8 where that leaves at least 8.
        buckets: sorted padded lengths; a pair goes to the first bucket that
            holds its source and its shifted target.
        shuffle: reshuffle rows and batch order every epoch, seeded by
            (seed, epoch), so a run is reproducible and resumable.
        seed: int.
    """

    def __init__(
        self,
        source_ids: Sequence[Sequence[int]],
        target_ids: Sequence[Sequence[int]],
        *,
        tokens_per_batch: int,
        buckets: Sequence[int],
        shuffle: bool = True,
        seed: int = 0,
        **kwargs,
    ):
        super().__init__(**kwargs)
        if len(source_ids) != len(target_ids):
            raise ValueError(
                f"{len(source_ids)} source but {len(target_ids)} target sequences."
            )
        if not source_ids:
            raise ValueError("No training pairs left: the training set is empty.")
        self.buckets = tuple(sorted(buckets))
        self.tokens_per_batch = tokens_per_batch
        self.shuffle = shuffle
        self.seed = seed
        self.epoch = 0
        self._source = [np.asarray(s, np.int32) for s in source_ids]
        self._target = [np.asarray(t, np.int32) for t in target_ids]
        self._members = self._assign_buckets()
        self._batches = self._plan_epoch()

    def batch_size(self, bucket: int) -> int:
        rows = max(1, self.tokens_per_batch // self.buckets[bucket])
        return rows - rows % 8 if rows >= 8 else rows

    def _assign_buckets(self) -> list[list[int]]:
        members: list[list[int]] = [[] for _ in self.buckets]
        for index, (src, tgt) in enumerate(zip(self._source, self._target)):
            needed = max(len(src), len(tgt) + 1)
            bucket = next((b for b, n in enumerate(self.buckets) if needed <= n), None)
            if bucket is None:
                raise ValueError(
                    f"Pair {index} needs {needed} tokens, more than the largest "
                    f"bucket ({self.buckets[-1]}); filter long pairs first."
                )
            members[bucket].append(index)
        return members

    def _plan_epoch(self) -> list[tuple[int, list[int]]]:
        rng = random.Random(f"{self.seed}:{self.epoch}")
        batches = []
        for bucket, members in enumerate(self._members):
            members = list(members)
            if self.shuffle:
                rng.shuffle(members)
            size = self.batch_size(bucket)
            for start in range(0, len(members), size):
                batches.append((bucket, members[start : start + size]))
        if self.shuffle:
            rng.shuffle(batches)
        return batches

    def set_epoch(self, epoch: int) -> None:
        """Re-plan for `epoch` (used when resuming a run)."""
        self.epoch = epoch
        self._batches = self._plan_epoch()

    def on_epoch_end(self):
        self.set_epoch(self.epoch + 1)

    def __len__(self) -> int:
        return len(self._batches)

    def shapes(self) -> set[tuple[int, int]]:
        """The distinct (rows, length) batch shapes of this epoch."""
        return {
            (self.batch_size(bucket), self.buckets[bucket])
            for bucket, _ in self._batches
        }

    def __getitem__(self, index: int):
        bucket, members = self._batches[index]
        length = self.buckets[bucket]
        rows = self.batch_size(bucket)
        source = np.full((rows, length), PAD_ID, np.int32)
        decoder_input = np.full((rows, length), PAD_ID, np.int32)
        labels = np.full((rows, length), PAD_ID, np.int32)
        for row, member in enumerate(members):
            src = self._source[member]
            shifted_in, shifted_out = shift_for_teacher_forcing(self._target[member])
            source[row, : len(src)] = src
            decoder_input[row, : len(shifted_in)] = shifted_in
            labels[row, : len(shifted_out)] = shifted_out
        return {"source_ids": source, "target_ids": decoder_input}, labels

    def for_fit(self):
        """What to hand to `model.fit`: this PyDataset, or on TensorFlow a
        `tf.data.Dataset` over it with a (None, None) signature (Keras infers
        a PyDataset's signature from its first batches and would fix the
        length of whichever bucket came first)."""
        if keras.backend.backend() != "tensorflow":
            return self
        import tensorflow as tf

        ids = tf.TensorSpec((None, None), tf.int32)
        signature = ({"source_ids": ids, "target_ids": ids}, ids)

        def batches():
            for index in range(len(self)):
                yield self[index]
            self.on_epoch_end()

        dataset = tf.data.Dataset.from_generator(batches, output_signature=signature)
        return dataset.prefetch(2)

    def num_target_tokens(self) -> int:
        """Real target tokens (labels) in one epoch."""
        return sum(len(t) + 1 for t in self._target)


def pad_batch(sequences: Sequence[Sequence[int]], length: int | None = None):
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
