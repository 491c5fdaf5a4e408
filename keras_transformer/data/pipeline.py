"""Input pipeline: teacher-forcing shift, filtering, length buckets and
token-budget batches with a small fixed set of padded shapes.

Every batch has one of `len(buckets)` shapes: bucket b pads source and target
to `buckets[b]` tokens and always holds `batch_size(b)` rows (a batch with
fewer pairs is completed with all-pad rows, whose labels are pad and so carry
no loss). On JAX, and under XLA on TensorFlow, each new shape is a new
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
from keras_transformer.data.text_files import ParallelCorpus

# Padded lengths. Every 4 tokens up to 32, where most sentences of the
# usual corpora fall: on Multi30k, against buckets every 8 tokens, real
# tokens rise from 79% to 89% of the padded target tokens (72% to 80% of
# the source's), so a batch of the same padded budget carries 12% more real
# tokens in about the same step time (10% to 14% more real tokens per
# second measured), for 3 more batch shapes to compile (docs/benchmarks.md,
# "Length buckets").
DEFAULT_BUCKETS = (4, 8, 12, 16, 20, 24, 28, 32, 40, 48, 56, 64, 96, 128, 192, 256)


def shift_for_teacher_forcing(target: Sequence[int]) -> tuple[list[int], list[int]]:
    """y -> (decoder input [BOS] + y, labels y + [EOS]); same length."""
    return [BOS_ID, *target], [*target, EOS_ID]


@dataclasses.dataclass
class FilterReport:
    """What `filter_pairs` dropped, with 1-based line numbers."""

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
                pairs, where = (
                    ("pair", "line") if len(lines) == 1 else ("pairs", "lines")
                )
                parts.append(
                    f"dropped {len(lines)} {label} {pairs} ({where} {shown}{more})"
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


def filter_pairs(
    corpus: ParallelCorpus, tokenizer, max_length: int
) -> tuple[list[list[int]], list[list[int]], FilterReport]:
    """Encode a training corpus and drop its empty and over-long pairs.

    `tokenizer` has `encode(list[str]) -> list[list[int]]`. Returns the kept
    pairs' source and target ids (no BOS/EOS, in corpus order) and the
    `FilterReport` of what was dropped, by line. Whether an empty result is
    an error is the caller's decision.
    """
    keep, empty = drop_empty_pairs(corpus.source, corpus.target, corpus.line_numbers)
    source = tokenizer.encode([corpus.source[i] for i in keep])
    target = tokenizer.encode([corpus.target[i] for i in keep])
    lines = [corpus.line_numbers[i] for i in keep]
    kept, too_long = drop_long_pairs(source, target, lines, max_length)
    report = FilterReport(kept=len(kept), empty_lines=empty, too_long_lines=too_long)
    return [source[i] for i in kept], [target[i] for i in kept], report


def bucket_lengths(max_length: int, buckets: Sequence[int] = DEFAULT_BUCKETS):
    """The bucket boundaries up to `max_length` (the last one is max_length)."""
    chosen = [b for b in buckets if b < max_length]
    return tuple(chosen) + (max_length,)


@dataclasses.dataclass(frozen=True)
class DataPosition:
    """Where the training stream stands: the next batch is batch `index` of
    epoch `epoch`'s plan. Stored in every checkpoint, so a resumed run feeds
    exactly the batch the uninterrupted run would have fed next."""

    epoch: int = 0
    index: int = 0


class BucketedBatches(keras.utils.PyDataset):
    """Token-budget batches of (inputs dict, labels, token weights) for `fit`.

    Batching. A pair goes to the first bucket that holds its source and its
    shifted target. Each bucket's rows are shuffled (seeded by (seed, epoch))
    and cut into full batches; the remainder, too few rows for a batch of its
    own, moves up to the next (longer) bucket instead of becoming a
    near-empty batch. The last bucket's rows are spread evenly over its
    batches. The batch order is shuffled, and the epoch is completed with
    empty batches to a whole number of optimizer updates.

    Token weights. One optimizer update is `accumulation_steps` consecutive
    batches. Every real target token of an update gets the weight
    accumulation_steps / N, N the number of real target tokens in the whole
    update (all its batches, all replicas and workers); pad targets get 0.
    `LabelSmoothedCrossEntropy` sums weight x token loss, Keras averages the
    accumulated gradients over the k batches and sums them over replicas, so
    each update follows the per-token mean loss over all of its tokens,
    whatever the batches' sizes.

    Args:
        source_ids: ragged source ids (no BOS/EOS).
        target_ids: ragged target ids (no BOS/EOS); shifted here.
        tokens_per_batch: budget of padded target tokens per (global) batch;
            the rows of bucket b are tokens_per_batch // length_b (at least
            `row_multiple`), rounded down to a multiple of 8 where that
            leaves at least 8, and always to a multiple of `row_multiple`;
            but never more than the number of pairs rounded up to that
            multiple (see `batch_size`).
        buckets: sorted padded lengths.
        shuffle: reshuffle rows and batch order every epoch, seeded by
            (seed, epoch), so a run is reproducible and resumable.
        seed: int.
        accumulation_steps: batches per optimizer update (k).
        row_multiple: every global batch's row count is a multiple of this
            (the number of replicas in all processes, so the batch divides
            across them).
        shard_index, num_shards: this worker's share of every global batch
            (contiguous rows), for multi-worker training where each process
            feeds its own rows. Weights are always computed on the global
            batch.
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
        accumulation_steps: int = 1,
        row_multiple: int = 1,
        shard_index: int = 0,
        num_shards: int = 1,
        **kwargs,
    ):
        super().__init__(**kwargs)
        if len(source_ids) != len(target_ids):
            raise ValueError(
                f"{len(source_ids)} source but {len(target_ids)} target sequences."
            )
        if not source_ids:
            raise ValueError("No training pairs left: the training set is empty.")
        _check_positive(
            tokens_per_batch=tokens_per_batch,
            accumulation_steps=accumulation_steps,
            row_multiple=row_multiple,
            num_shards=num_shards,
        )
        if not 0 <= shard_index < num_shards:
            raise ValueError(
                f"shard_index must be in [0, {num_shards}). "
                f"Received: shard_index={shard_index}"
            )
        self.buckets = tuple(sorted(buckets))
        self.tokens_per_batch = tokens_per_batch
        self.shuffle = shuffle
        self.seed = seed
        self.accumulation_steps = accumulation_steps
        self.row_multiple = math.lcm(row_multiple, num_shards)
        self.shard_index = shard_index
        self.num_shards = num_shards
        self._source = [np.asarray(s, np.int32) for s in source_ids]
        self._target = [np.asarray(t, np.int32) for t in target_ids]
        self._members = self._assign_buckets()
        # Rounded up to the multiple that the budget's rows are rounded to.
        multiple = math.lcm(8, self.row_multiple)
        self._row_bound = -(-len(self._source) // multiple) * multiple
        self.epoch = 0
        self._batches = self._plan_epoch(0)

    def batch_size(self, bucket: int) -> int:
        """Rows of every (global) batch of `bucket`: the budget's rows, but
        never more than all the pairs, rounded up as the budget's rows are.

        Only the last bucket's batches and the empty batches that complete
        an update can have pad rows (a lower bucket's batches are full), so
        the bound changes nothing for a budget the corpus can fill, and
        spares the memory of one it cannot (a budget of 10**12 was 10**10
        rows of padding)."""
        return min(self._budget_rows(bucket), self._row_bound)

    def _budget_rows(self, bucket: int) -> int:
        """tokens_per_batch // length: at least one row per replica, even
        where that exceeds the budget (a single very long pair). The plan
        cuts batches of this size."""
        rows = max(self.tokens_per_batch // self.buckets[bucket], self.row_multiple)
        multiple = math.lcm(8, self.row_multiple)
        if rows < multiple:
            multiple = self.row_multiple
        return rows - rows % multiple

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

    def _plan_epoch(self, epoch: int) -> list[tuple[int, list[int]]]:
        """[(bucket, member indices)] of every batch of `epoch`, in order."""
        rng = random.Random(f"{self.seed}:{epoch}")
        batches: list[tuple[int, list[int]]] = []
        carried: list[int] = []
        last = len(self.buckets) - 1
        for bucket, members in enumerate(self._members):
            pool = list(members)
            if self.shuffle:
                rng.shuffle(pool)
            pool = carried + pool
            size = self._budget_rows(bucket)
            if bucket < last:
                full = len(pool) - len(pool) % size
                batches += [(bucket, pool[i : i + size]) for i in range(0, full, size)]
                carried = pool[full:]
            elif pool:
                count = math.ceil(len(pool) / size)
                batches += [(bucket, list(part)) for part in _split(pool, count)]
        if self.shuffle:
            rng.shuffle(batches)
        shortfall = -len(batches) % self.accumulation_steps
        # Empty batches (all pad, weight 0) complete the last update.
        return batches + [(0, [])] * shortfall

    def set_epoch(self, epoch: int) -> None:
        """Re-plan for `epoch` (used when resuming a run)."""
        self.epoch = epoch
        self._batches = self._plan_epoch(epoch)

    def on_epoch_end(self):
        self.set_epoch(self.epoch + 1)

    def __len__(self) -> int:
        return len(self._batches)

    def shapes(self) -> set[tuple[int, int]]:
        """The distinct (rows, length) global batch shapes of this epoch."""
        return {
            (self.batch_size(bucket), self.buckets[bucket])
            for bucket, _ in self._batches
        }

    def __getitem__(self, index: int):
        return self._batch(self._batches, index)

    def _real_tokens(self, members: Sequence[int]) -> int:
        return sum(len(self._target[m]) + 1 for m in members)

    def _batch(self, plan: list[tuple[int, list[int]]], index: int):
        bucket, members = plan[index]
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
        first = index - index % self.accumulation_steps
        update = plan[first : first + self.accumulation_steps]
        update_tokens = sum(self._real_tokens(m) for _, m in update)
        weights = token_weights(labels, update_tokens, self.accumulation_steps)
        share = slice(
            rows * self.shard_index // self.num_shards,
            rows * (self.shard_index + 1) // self.num_shards,
        )
        inputs = {"source_ids": source[share], "target_ids": decoder_input[share]}
        return inputs, labels[share], weights[share]

    def batches_from(self, position: DataPosition):
        """Every batch from `position` on, epoch after epoch (infinite)."""
        epoch, index = position.epoch, position.index
        while True:
            plan = self._plan_epoch(epoch)
            for i in range(index, len(plan)):
                yield self._batch(plan, i)
            epoch, index = epoch + 1, 0

    def advance(self, position: DataPosition, batches: int) -> DataPosition:
        """The position `batches` batches after `position`."""
        index = position.index + batches
        return DataPosition(position.epoch + index // len(self), index % len(self))

    def for_fit(self, start: DataPosition | None = None):
        """What to hand to `model.fit`.

        Without `start`: one epoch per pass, re-planned at each epoch end
        (use for validation, or `fit(..., epochs=n)` from a notebook). With
        `start`: an endless stream from that position; give `fit`
        `steps_per_epoch=len(batches)`. On TensorFlow either is a
        `tf.data.Dataset` with a (None, None) signature: Keras infers a
        PyDataset's signature from its first batches and would fix the
        length of whichever bucket came first. On torch either is a
        DataLoader that draws nothing from torch's global generator
        (`_torch_loader`).
        """
        backend = keras.backend.backend()
        if backend == "torch":
            return _torch_loader(self, start)
        if start is not None and backend != "tensorflow":
            return _Stream(self, start)
        if backend != "tensorflow":
            return self
        import tensorflow as tf

        ids = tf.TensorSpec((None, None), tf.int32)
        weights = tf.TensorSpec((None, None), tf.float32)
        signature = ({"source_ids": ids, "target_ids": ids}, ids, weights)

        def one_epoch():
            for index in range(len(self)):
                yield self[index]
            self.on_epoch_end()

        def endless():
            yield from self.batches_from(start)

        generator = one_epoch if start is None else endless
        dataset = tf.data.Dataset.from_generator(generator, output_signature=signature)
        if start is None:  # A known length: Keras then expects the end.
            dataset = dataset.apply(tf.data.experimental.assert_cardinality(len(self)))
        options = tf.data.Options()
        # Each worker generates its own rows (shard_index); never re-shard.
        options.experimental_distribute.auto_shard_policy = (
            tf.data.experimental.AutoShardPolicy.OFF
        )
        return dataset.with_options(options).prefetch(2)

    def num_target_tokens(self) -> int:
        """Real target tokens (labels) in one epoch."""
        return sum(len(t) + 1 for t in self._target)

    def real_tokens_per_batch(self) -> list[int]:
        """Real target tokens of each (global) batch of this epoch."""
        return [self._real_tokens(members) for _, members in self._batches]


class _Stream(keras.utils.PyDataset):
    """An endless PyDataset over `BucketedBatches.batches_from(start)`.

    Keras reads it in order (index 0, 1, ...) from one iterator that lives
    across epochs when `steps_per_epoch` is given.
    """

    def __init__(self, batches: BucketedBatches, start: DataPosition):
        super().__init__()
        self._batches = batches
        self._start = start
        self._plans: dict[int, list] = {}

    @property
    def num_batches(self):
        return None

    def __getitem__(self, index: int):
        position = self._batches.advance(self._start, index)
        plan = self._plans.get(position.epoch)
        if plan is None:  # Keep two epochs' plans: the stream moves forward.
            plan = self._batches._plan_epoch(position.epoch)
            self._plans = {position.epoch: plan, **self._plans}
            for old in sorted(self._plans)[:-2]:
                del self._plans[old]
        return self._batches._batch(plan, position.index)


def _torch_loader(batches: BucketedBatches, start: DataPosition | None):
    """`for_fit` on torch: a DataLoader of one epoch of `batches` per pass
    (re-planned after it), or with `start` of every batch from there on.

    Keras would wrap a PyDataset in a DataLoader of its own, and every
    iterator of that one draws a seed from torch's global generator: the one
    Keras's torch dropout draws its masks from, whose state the checkpoints
    carry. A resumed run starts its iterators at other points than the
    uninterrupted run did, so its dropout masks would differ. This loader
    draws from a generator of its own.
    """
    import torch

    class Batches(torch.utils.data.IterableDataset):
        def __iter__(self):
            if start is not None:
                yield from batches.batches_from(start)
                return
            for index in range(len(batches)):
                yield batches[index]
            batches.on_epoch_end()

    return torch.utils.data.DataLoader(
        Batches(), batch_size=None, generator=torch.Generator()
    )


def token_weights(labels, update_tokens: int, accumulation_steps: int = 1):
    """Per-token loss weights of one batch of an optimizer update.

    accumulation_steps / update_tokens at real (non-pad) labels, 0 at pad:
    summed over the k batches of the update (Keras averages their
    gradients, hence the factor k) the weights give every real target token
    of the update the same share, 1 / update_tokens. (B, T) -> (B, T) float32.
    """
    labels = np.asarray(labels)
    weight = accumulation_steps / max(update_tokens, 1)
    return np.where(labels != PAD_ID, weight, 0.0).astype(np.float32)


def _split(items: list[int], count: int) -> list[list[int]]:
    """`items` in `count` contiguous parts whose sizes differ by at most 1."""
    base, extra = divmod(len(items), count)
    parts, start = [], 0
    for part in range(count):
        end = start + base + (part < extra)
        parts.append(items[start:end])
        start = end
    return parts


def _check_positive(**values: int) -> None:
    for name, value in values.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be an integer >= 1. Received: {value!r}")
