"""The data steps of training: splits, the joint tokenizer, batches for `fit`.

In memory or from a store; the batches are token-budget batches.

A notebook calls them around its own `model.fit` (the corpus held in
memory); `train` reads a prepared store through `store_batches`. For the
same corpus, tokenizer and settings both give the same batches.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from keras_transformer.data.datasets import load_dataset
from keras_transformer.data.pipeline import (
    DEFAULT_BUCKETS,
    BucketedBatches,
    bucket_lengths,
    encode_pairs,
)
from keras_transformer.data.store_options import (
    PrepareOptions,
    check_store_settings,
    with_store_settings,
)
from keras_transformer.data.text_files import PairBlock
from keras_transformer.data.token_pairs import TokenPairs
from keras_transformer.data.token_store import TokenStore
from keras_transformer.data.tokenizer import learn_tokenizer
from keras_transformer.training.distribution import DistributionPlan
from keras_transformer.training.options import TrainOptions
from keras_transformer.utils.console import log


@dataclasses.dataclass
class TrainingData:
    """Batches for `fit`: training (shuffled, weighted) and validation."""

    train: BucketedBatches
    valid: BucketedBatches | None


def load_splits(options: TrainOptions) -> dict[str, Any]:
    """The corpus splits of `options.data` (read only; nothing is written)."""
    splits = load_dataset(options.data)
    log(
        f"data: {splits['train'].origin}: "
        + ", ".join(f"{name} {len(corpus)}" for name, corpus in splits.items())
    )
    return splits


def prepare_tokenizer(options: TrainOptions, splits: dict[str, Any]):
    """Learn the joint vocabulary from the training split as `train` on text
    does through `prepare_options`: from prepare's default sample (its size
    and seed), whatever the run's `--seed`."""
    train = splits["train"]
    sample = PrepareOptions()
    return learn_tokenizer(
        [PairBlock(1, train.source, train.target)],
        train.origin,
        kind=options.tokenizer,
        vocab_size=options.vocab_size,
        sample_size=sample.tokenizer_sample,
        seed=sample.seed,
        log=log,
        target_vocabulary=options.data.target_vocabulary,
    )


def _check_budget(
    tokens_per_batch: int, pairs: int, longest: int, origin: str, replicas: int = 1
) -> None:
    """Refuse a batch budget that one padded pair per device already
    exceeds (every batch would break it), or that the training set cannot
    fill even once."""
    smallest = longest * replicas
    if tokens_per_batch < smallest:
        devices = f" on each of {replicas} devices" if replicas > 1 else ""
        raise ValueError(
            f"--tokens-per-batch {tokens_per_batch:,} is less than one pair "
            f"padded to --max-length {longest}{devices} ({smallest:,} tokens): "
            "a batch holds at least that, so every batch of the longest pairs "
            f"would exceed the budget. Use at least --tokens-per-batch {smallest} "
            "(a few thousand is usual), or a smaller --max-length."
        )
    capacity = pairs * longest
    if tokens_per_batch > capacity:
        raise ValueError(
            f"--tokens-per-batch {tokens_per_batch:,} is more than the training "
            f"set can fill: {origin} has {pairs:,} pairs (after filtering), "
            f"{capacity:,} tokens even padded to --max-length {longest}. Use at "
            f"most --tokens-per-batch {capacity} (every pair in one batch); "
            "a few thousand is usual."
        )


def prepare_batches(
    options: TrainOptions,
    splits: dict[str, Any],
    tokenizer,
    plan: DistributionPlan | None = None,
    buckets: Sequence[int] = DEFAULT_BUCKETS,
) -> TrainingData:
    """Token-budget batches of the training and validation splits (held in
    memory), padded to the lengths of `buckets` up to `options.max_length`:
    the batches a store of the same corpus and tokenizer gives."""
    train, report = encode_pairs(splits["train"], tokenizer, options.max_length)
    report.log_and_check(splits["train"].origin, log)
    valid = None
    if "valid" in splits and len(splits["valid"]):
        valid, _ = encode_pairs(splits["valid"], tokenizer, None)
    origin = splits["train"].origin
    return _batches(options, train, valid, origin, plan, buckets)


def store_batches(
    options: TrainOptions,
    store: TokenStore,
    plan: DistributionPlan | None = None,
    buckets: Sequence[int] = DEFAULT_BUCKETS,
) -> TrainingData:
    """`prepare_batches` from a prepared store: the same batches, read
    through a memory map, with the store's length filter (see
    `check_store_settings`)."""
    check_store_settings(options, store)
    options = with_store_settings(options, store)
    valid = store.pairs("valid") if "valid" in store.splits else None
    if valid is not None and not len(valid):
        valid = None
    return _batches(options, store.pairs("train"), valid, store.origin(), plan, buckets)


def _batches(
    options: TrainOptions,
    train: TokenPairs,
    valid: TokenPairs | None,
    origin: str,
    plan: DistributionPlan | None,
    buckets: Sequence[int],
) -> TrainingData:
    return token_budget_batches(
        train,
        valid,
        origin,
        tokens_per_batch=options.tokens_per_batch,
        max_length=options.max_length,
        seed=options.seed,
        accumulation_steps=options.accumulation_steps,
        plan=plan,
        buckets=buckets,
    )


def token_budget_batches(
    train: TokenPairs,
    valid: TokenPairs | None,
    origin: str,
    *,
    tokens_per_batch: int | None,
    max_length: int,
    seed: int = 0,
    accumulation_steps: int = 1,
    plan: DistributionPlan | None = None,
    buckets: Sequence[int] = DEFAULT_BUCKETS,
    rows_per_batch: int | None = None,
) -> TrainingData:
    """Training batches (shuffled, weighted) of `train` and validation
    batches of `valid`, padded to the lengths of `buckets` up to
    `max_length`; `origin` names the data in errors. The batches hold about
    `tokens_per_batch` padded target tokens, or `rows_per_batch` pairs
    (`tokens_per_batch=None`; `BucketedBatches`)."""
    plan = plan or DistributionPlan("none")
    buckets = bucket_lengths(max_length, buckets)
    common = dict(
        tokens_per_batch=tokens_per_batch,
        rows_per_batch=rows_per_batch,
        buckets=buckets,
        row_multiple=plan.num_replicas,
        shard_index=plan.shard_index,
        num_shards=plan.num_shards,
    )
    if tokens_per_batch is not None:
        _check_budget(
            tokens_per_batch, len(train), buckets[-1], origin, plan.num_replicas
        )
    batches = BucketedBatches(
        pairs=train,
        seed=seed,
        accumulation_steps=accumulation_steps,
        **common,
    )
    if valid is None:
        return TrainingData(train=batches, valid=None)
    # Validation pairs are never dropped for length: the last bucket is
    # the smallest that holds the longest pair (the pair's own length past
    # --max-length), so no pair pads further than it must.
    longest = max(
        int(max(source.max(), target.max() + 1))
        for _, source, target in valid.length_blocks()
    )
    valid_buckets = tuple(b for b in buckets if b < longest) + (
        min((b for b in buckets if b >= longest), default=longest),
    )
    if tokens_per_batch is not None:
        budget = max(tokens_per_batch, valid_buckets[-1] * plan.num_replicas)
        common["tokens_per_batch"] = budget
    valid_batches = BucketedBatches(
        pairs=valid, shuffle=False, **{**common, "buckets": valid_buckets}
    )
    return TrainingData(train=batches, valid=valid_batches)
