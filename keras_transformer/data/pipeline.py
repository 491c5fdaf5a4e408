"""Input pipeline: teacher forcing, filtering, buckets, token-budget batches.

The batches come in a small fixed set of padded shapes.

Every batch has one of `len(buckets)` shapes: bucket b pads source and target
to `buckets[b]` tokens and always holds `batch_size(b)` rows (a batch with
fewer pairs is completed with all-pad rows, whose labels are pad and so carry
no loss). On JAX, and under XLA on TensorFlow, each new shape is a new
compilation, so a bounded number of shapes is a requirement, not a nicety.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence

import keras
import numpy as np

from keras_transformer.config import BOS_ID, EOS_ID, PAD_ID
from keras_transformer.data.block_encoding import (  # noqa: F401 - re-exported
    drop_empty_pairs,
    drop_long_pairs,
    encode_block,
    encode_corpus,
)
from keras_transformer.data.text_files import DataError, ParallelCorpus
from keras_transformer.data.token_pairs import TokenPairs, index_dtype
from keras_transformer.utils import console

# Padded lengths. Every 4 tokens up to 32, where most sentences of the
# usual corpora fall: on Multi30k, against buckets every 8 tokens, real
# tokens rise from 79% to 89% of the padded target tokens (72% to 80% of
# the source's), so a batch of the same padded budget carries 12% more real
# tokens in about the same step time (10% to 14% more real tokens per
# second measured), for 3 more batch shapes to compile
# (docs/benchmarks-training-speed.md, "Length buckets").
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

    def log_and_check(
        self, origin: str, log: Callable[[str], None] | None = None
    ) -> None:
        """Log the summary (`console.log` by default), then
        `check_pairs_left`: what every reader of training pairs does with
        its report."""
        (log or console.log)(self.summary(origin))
        self.check_pairs_left(origin)

    def check_pairs_left(self, origin: str) -> None:
        """Raise DataError, naming `origin` and what was dropped, if no pair
        was kept."""
        if not self.kept:
            raise DataError(
                f"{origin}: no training pairs left after filtering "
                f"({self.summary(origin)}). Check the files and --max-length."
            )


def filter_pairs(
    corpus: ParallelCorpus, tokenizer, max_length: int
) -> tuple[list[list[int]], list[list[int]], FilterReport]:
    """Encode a training corpus and drop its empty and over-long pairs.

    `tokenizer` has `encode(list[str]) -> list[list[int]]` (and
    `encode_target` for the targets where the sides differ). Returns the kept
    pairs' source and target ids (no BOS/EOS, in corpus order) and the
    `FilterReport` of what was dropped, by line. Whether an empty result is
    an error is the caller's decision. The filter is `encode_block`'s, the
    one `keras-transformer prepare` applies.
    """
    pairs, report = encode_pairs(corpus, tokenizer, max_length)
    source, target = (
        [pairs.tokens[side][a:b].tolist() for a, b in _spans(pairs.offsets[side])]
        for side in ("source", "target")
    )
    return source, target, report


def encode_pairs(
    corpus: ParallelCorpus, tokenizer, max_length: int | None
) -> tuple[TokenPairs, FilterReport]:
    """`filter_pairs` as flat arrays (`TokenPairs`, held in memory); with
    `max_length=None` nothing is dropped (evaluation sets)."""
    block = encode_corpus(
        tokenizer.encode,
        corpus,
        max_length=max_length,
        encode_target=getattr(tokenizer, "encode_target", None),
    )
    pairs = TokenPairs.from_lengths(
        block.source_ids, block.source_lengths, block.target_ids, block.target_lengths
    )
    report = FilterReport(len(block), block.empty_lines, block.too_long_lines)
    return pairs, report


def _spans(offsets: np.ndarray):
    return zip(offsets[:-1].tolist(), offsets[1:].tolist())


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


@dataclasses.dataclass(frozen=True)
class EpochPlan:
    """One epoch's batches as flat arrays, with no per-pair Python objects.

    `order` holds every pair's index, bucket after bucket (shuffled within
    each). Batch b (in the epoch's order) is the `count[b]` pairs
    `order[start[b]:start[b] + count[b]]`, padded to bucket `bucket[b]`; a
    count of 0 is an empty batch that completes the last update.
    """

    order: np.ndarray
    start: np.ndarray
    count: np.ndarray
    bucket: np.ndarray

    def __len__(self) -> int:
        return len(self.start)

    def members(self, index: int) -> np.ndarray:
        start = int(self.start[index])
        return self.order[start : start + int(self.count[index])]


class BucketedBatches(keras.utils.PyDataset):
    """Token-budget batches of (inputs dict, labels, token weights) for `fit`.

    Pairs come as ragged id lists (`source_ids`, `target_ids`) or as
    `pairs=`, a `TokenPairs` (a prepared store's memory-mapped arrays): the
    lists are turned into the same flat arrays, so both give the same
    batches. Everything per pair is a NumPy array (a bucket id of one byte,
    an epoch's order of four), so memory grows by a few bytes per pair.

    Batching. A pair goes to the first bucket that holds its source and its
    shifted target. Each epoch, every bucket's pairs are shuffled with a
    `np.random.Generator` seeded by (seed, epoch) and cut into full batches;
    the remainder, too few rows for a batch of its own, moves up to the
    next (longer) bucket instead of becoming a near-empty batch. The last
    bucket's rows are spread evenly over its batches. The batch order is
    then shuffled by the same generator, and the epoch is completed with
    empty batches to a whole number of optimizer updates. The number of
    batches is the same every epoch.

    Token weights. One optimizer update is `accumulation_steps` consecutive
    batches. Every real target token of an update gets the weight
    accumulation_steps / N, N the number of real target tokens in the whole
    update (all its batches, all replicas and workers, counted from the
    lengths); pad targets get 0. `LabelSmoothedCrossEntropy` sums weight x
    token loss, Keras averages the accumulated gradients over the k batches
    and sums them over replicas, so each update follows the per-token mean
    loss over all of its tokens, whatever the batches' sizes.

    Args:
        source_ids: ragged source ids (no BOS/EOS).
        target_ids: ragged target ids (no BOS/EOS); shifted here.
        pairs: a `TokenPairs`, instead of the two lists.
        tokens_per_batch: budget of padded target tokens per (global) batch;
            the rows of bucket b are tokens_per_batch // length_b (at least
            `row_multiple`), rounded down to a multiple of 8 where that
            leaves at least 8, and always to a multiple of `row_multiple`;
            but never more than the number of pairs rounded up to that
            multiple (see `batch_size`).
        rows_per_batch: instead of `tokens_per_batch`, the same number of
            rows in every bucket's batches (Keras's `batch_size`: sentences
            per batch, still padded by length bucket), rounded up to a
            multiple of `row_multiple`.
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
            reads only its own rows. Every process plans the same epoch;
            weights are always computed on the global batch.
    """

    def __init__(
        self,
        source_ids: Sequence[Sequence[int]] | None = None,
        target_ids: Sequence[Sequence[int]] | None = None,
        *,
        pairs: TokenPairs | None = None,
        tokens_per_batch: int | None = None,
        rows_per_batch: int | None = None,
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
        if (pairs is None) == (source_ids is None and target_ids is None):
            raise ValueError(
                "Pass the pairs once: source_ids and target_ids, or pairs=."
            )
        if pairs is None:
            pairs = TokenPairs.from_lists(
                [] if source_ids is None else source_ids,
                [] if target_ids is None else target_ids,
            )
        if not len(pairs):
            raise ValueError("No training pairs left: the training set is empty.")
        sizes = {"tokens_per_batch": tokens_per_batch, "rows_per_batch": rows_per_batch}
        size = {name: value for name, value in sizes.items() if value is not None}
        if len(size) != 1:
            raise ValueError(
                "Pass one batch size: tokens_per_batch or rows_per_batch. "
                f"Received: {sizes}"
            )
        _check_positive(
            **size,
            accumulation_steps=accumulation_steps,
            row_multiple=row_multiple,
            num_shards=num_shards,
        )
        if not 0 <= shard_index < num_shards:
            raise ValueError(
                f"shard_index must be in [0, {num_shards}). "
                f"Received: shard_index={shard_index}"
            )
        self.pairs = pairs
        self.buckets = tuple(sorted(buckets))
        self.tokens_per_batch = tokens_per_batch
        self.rows_per_batch = rows_per_batch
        self.shuffle = shuffle
        self.seed = seed
        self.accumulation_steps = accumulation_steps
        self.row_multiple = math.lcm(row_multiple, num_shards)
        self.shard_index = shard_index
        self.num_shards = num_shards
        # Rounded up to the multiple that the budget's rows are rounded to.
        multiple = math.lcm(8, self.row_multiple)
        self._row_bound = -(-len(pairs) // multiple) * multiple
        self._bucket_ids = self._assign_buckets()
        self._layout = self._cut(np.bincount(self._bucket_ids, minlength=len(buckets)))
        self._cached: tuple[int, EpochPlan] | None = None
        self.epoch = 0

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
        if self.rows_per_batch is not None:
            return -(-self.rows_per_batch // self.row_multiple) * self.row_multiple
        rows = max(self.tokens_per_batch // self.buckets[bucket], self.row_multiple)
        multiple = math.lcm(8, self.row_multiple)
        if rows < multiple:
            multiple = self.row_multiple
        return rows - rows % multiple

    def _assign_buckets(self) -> np.ndarray:
        """Each pair's bucket (one byte per pair), from the lengths alone."""
        bounds = np.asarray(self.buckets)
        ids = np.empty(len(self.pairs), np.uint8 if len(bounds) < 256 else np.int16)
        for start, source, target in self.pairs.length_blocks():
            needed = np.maximum(source, target + 1)
            block = np.searchsorted(bounds, needed, side="left")
            over = np.flatnonzero(block == len(bounds))
            if over.size:
                index = int(over[0])
                raise ValueError(
                    f"Pair {start + index} needs {int(needed[index])} tokens, more "
                    f"than the largest bucket ({self.buckets[-1]}); filter long "
                    "pairs first."
                )
            ids[start : start + len(block)] = block
        return ids

    def _cut(self, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(start, count, bucket) of every batch, bucket after bucket, for
        pairs laid out bucket after bucket: the same every epoch (a
        bucket's carried remainder is the tail of its part of the layout,
        which the next bucket's part follows)."""
        starts, counts_out, buckets = [], [], []
        carry, end, last = 0, 0, len(self.buckets) - 1
        for bucket, members in enumerate(counts.tolist()):
            end += members
            size = self._budget_rows(bucket)
            pool = end - carry
            if bucket < last:
                sizes = np.full(pool // size, size)
            elif pool:
                base, extra = divmod(pool, math.ceil(pool / size))
                sizes = base + (np.arange(math.ceil(pool / size)) < extra)
            else:
                continue
            starts.append(carry + np.cumsum(sizes) - sizes)
            counts_out.append(sizes)
            buckets.append(np.full(len(sizes), bucket))
            carry += int(sizes.sum())
        return tuple(
            np.concatenate(parts).astype(np.int64)
            for parts in (starts, counts_out, buckets)
        )

    def _plan_epoch(self, epoch: int) -> EpochPlan:
        """Every batch of `epoch`, in order (see `EpochPlan`)."""
        rng = np.random.default_rng([self.seed, epoch]) if self.shuffle else None
        order = np.empty(len(self.pairs), index_dtype(len(self.pairs)))
        position = 0
        for bucket in range(len(self.buckets)):
            members = np.flatnonzero(self._bucket_ids == bucket)
            part = order[position : position + len(members)]
            part[:] = members
            if rng is not None:
                rng.shuffle(part)
            position += len(members)
        start, count, bucket = self._layout
        if rng is not None:
            shuffled = rng.permutation(len(start))
            start, count, bucket = start[shuffled], count[shuffled], bucket[shuffled]
        # Empty batches (all pad, weight 0) complete the last update.
        shortfall = -len(start) % self.accumulation_steps
        empty = np.zeros(shortfall, np.int64)
        return EpochPlan(
            order,
            np.concatenate([start, empty]),
            np.concatenate([count, empty]),
            np.concatenate([bucket, empty]),
        )

    def _plan(self, epoch: int) -> EpochPlan:
        """The plan of `epoch`, the last one kept: a stream moves forward,
        and a plan holds four bytes per pair."""
        if self._cached is None or self._cached[0] != epoch:
            self._cached = None  # Let the old plan go before making the new.
            self._cached = (epoch, self._plan_epoch(epoch))
        return self._cached[1]

    def set_epoch(self, epoch: int) -> None:
        """Re-plan for `epoch` (used when resuming a run)."""
        self.epoch = epoch

    def on_epoch_end(self):
        self.set_epoch(self.epoch + 1)

    def __len__(self) -> int:
        return len(self._layout[0]) + -len(self._layout[0]) % self.accumulation_steps

    def shapes(self) -> set[tuple[int, int]]:
        """The distinct (rows, length) global batch shapes of this epoch."""
        return {
            (self.batch_size(bucket), self.buckets[bucket])
            for bucket in np.unique(self._plan(self.epoch).bucket).tolist()
        }

    def __getitem__(self, index: int):
        return self._batch(self._plan(self.epoch), index)

    def _real_tokens(self, members: np.ndarray) -> int:
        return int(self.pairs.lengths("target", members).sum()) + len(members)

    def _batch(self, plan: EpochPlan, index: int):
        bucket = int(plan.bucket[index])
        length = self.buckets[bucket]
        rows = self.batch_size(bucket)
        share = (
            rows * self.shard_index // self.num_shards,
            rows * (self.shard_index + 1) // self.num_shards,
        )
        members = plan.members(index)
        # This worker's rows of the global batch: it reads only their ids.
        local = members[share[0] : share[1]]
        shape = (share[1] - share[0], length)
        source = np.full(shape, PAD_ID, np.int32)
        decoder_input = np.full(shape, PAD_ID, np.int32)
        labels = np.full(shape, PAD_ID, np.int32)
        _, row, column, ids = self.pairs.gather("source", local)
        source[row, column] = ids
        # shift_for_teacher_forcing, for all the rows at once.
        lengths, row, column, ids = self.pairs.gather("target", local)
        decoder_input[: len(local), 0] = BOS_ID
        decoder_input[row, column + 1] = ids
        labels[row, column] = ids
        labels[np.arange(len(local)), lengths] = EOS_ID
        first = index - index % self.accumulation_steps
        update = range(first, first + self.accumulation_steps)
        update_tokens = sum(self._real_tokens(plan.members(i)) for i in update)
        weights = token_weights(labels, update_tokens, self.accumulation_steps)
        inputs = {"source_ids": source, "target_ids": decoder_input}
        return inputs, labels, weights

    def batches_from(self, position: DataPosition):
        """Every batch from `position` on, epoch after epoch (infinite)."""
        epoch, index = position.epoch, position.index
        while True:
            plan = self._plan(epoch)
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
        return self.pairs.num_target_tokens()

    def real_tokens_per_batch(self) -> list[int]:
        """Real target tokens of each (global) batch of this epoch."""
        plan = self._plan(self.epoch)
        return [self._real_tokens(plan.members(i)) for i in range(len(plan))]


class _Stream(keras.utils.PyDataset):
    """An endless PyDataset over `BucketedBatches.batches_from(start)`.

    Keras reads it in order (index 0, 1, ...) from one iterator that lives
    across epochs when `steps_per_epoch` is given.
    """

    def __init__(self, batches: BucketedBatches, start: DataPosition):
        super().__init__()
        self._batches = batches
        self._start = start

    @property
    def num_batches(self):
        return None

    def __getitem__(self, index: int):
        position = self._batches.advance(self._start, index)
        plan = self._batches._plan(position.epoch)
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

    class Stream(torch.utils.data.IterableDataset):
        def __iter__(self):
            yield from batches.batches_from(start)

    class Epoch(torch.utils.data.IterableDataset):
        """One epoch of known length: Keras then stops after the last batch
        instead of running into the end (which it warns about as "input ran
        out of data"), so the next epoch is planned before that batch."""

        def __len__(self):
            return len(batches)

        def __iter__(self):
            last = len(batches) - 1
            for index in range(last + 1):
                batch = batches[index]
                if index == last:
                    batches.on_epoch_end()
                yield batch

    dataset = Epoch() if start is None else Stream()
    return torch.utils.data.DataLoader(
        dataset, batch_size=None, generator=torch.Generator()
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


def _check_positive(**values: int) -> None:
    for name, value in values.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be an integer >= 1. Received: {value!r}")
