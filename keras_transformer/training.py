"""Training: data -> joint tokenizer -> batches -> `model.fit`, resumable.

`train(options)` runs a whole job in a run directory (see `run_directory`):
it starts a new run, or resumes an interrupted one exactly (weights,
optimizer, step, learning rate, dropout RNG, data position), or refuses a
run directory that holds another run. It reads its data from a prepared
token store (`data.token_store`), memory-mapped: `--dataset store:DIR`, or
the store that `prepare_training_store` makes from text on first use and
finds again by its inputs' fingerprint. The same work is available in
public steps that a notebook calls around its own `model.fit`, in memory:

    options = TrainOptions(preset="tiny", max_steps=500)
    splits = load_splits(options)
    tokenizer = prepare_tokenizer(options, splits)
    data = prepare_batches(options, splits, tokenizer)
    model = build_model(options, model_config(options, tokenizer))
    model.fit(data.train.for_fit(DataPosition()),
              steps_per_epoch=len(data.train), epochs=3,
              validation_data=data.valid.for_fit())
    scores = evaluate_split(Translator(model, tokenizer), splits["test"])

or from a store: `store = prepare_training_store(options)`, then
`store_batches(options, store)` and `store.tokenizer()`.

`TrainOptions` is the one place where every training setting, its default,
its range and its help text live; the CLI's `train` flags are made from it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import keras

from keras_transformer import checkpoints, optional_imports
from keras_transformer.callbacks import (
    EXIT_INTERRUPTED,
    DevBleu,
    GracefulInterrupt,
    RestoreEpochMetrics,
    StepCheckpoints,
    StopOnNonFiniteLoss,
    TrainingDiverged,
    TrainingInterrupted,
    TrainingLimit,
    UpdateClock,
)
from keras_transformer.checkpoints import RunWriteError
from keras_transformer.config import TransformerConfig
from keras_transformer.data.datasets import STORE_PREFIX, load_dataset
from keras_transformer.data.pipeline import (
    DEFAULT_BUCKETS,
    BucketedBatches,
    DataPosition,
    FilterReport,
    bucket_lengths,
    encode_pairs,
)
from keras_transformer.data.prepare import (
    learn_tokenizer,
    prepare_store,
    store_location,
)
from keras_transformer.data.text_files import DataError, PairBlock
from keras_transformer.data.token_pairs import TokenPairs
from keras_transformer.data.token_store import (
    StoreError,
    StoreWriteError,
    TokenStore,
    open_store,
    tokenizer_sha256,
)
from keras_transformer.distribution import DistributionPlan, setup_distribution
from keras_transformer.evaluation import BleuResult, evaluate_split
from keras_transformer.losses import LabelSmoothedCrossEntropy
from keras_transformer.metrics import (
    MaskedTokenAccuracy,
    TokenCrossEntropy,
    TokenPerplexity,
)
from keras_transformer.model import build_transformer
from keras_transformer.options import STORE_SETTINGS, PrepareOptions, TrainOptions
from keras_transformer.run_directory import RunBusy, RunConflict, RunDirectory
from keras_transformer.schedules import TransformerSchedule, transformer_optimizer
from keras_transformer.translator import Translator

__all__ = [
    "EXIT_INTERRUPTED",
    "EXIT_WRITE_FAILED",
    "RunBusy",
    "RunWriteError",
    "StoreWriteError",
    "TrainOptions",
    "TrainingData",
    "TrainingDiverged",
    "TrainingInterrupted",
    "TrainResult",
    "build_model",
    "compile_model",
    "load_splits",
    "model_config",
    "prepare_batches",
    "prepare_tokenizer",
    "prepare_training_store",
    "store_batches",
    "train",
]

EXIT_WRITE_FAILED = 74  # sysexits EX_IOERR: a write failed (a full disk).


@dataclasses.dataclass
class TrainingData:
    """Batches for `fit`: training (shuffled, weighted) and validation."""

    train: BucketedBatches
    valid: BucketedBatches | None


@dataclasses.dataclass
class TrainResult:
    run_dir: Path
    steps: int
    train_seconds: float
    final_loss: float
    test: BleuResult | None


def _log(message: str) -> None:
    print(f"[keras-transformer] {message}", flush=True)


# --- data and tokenizer -----------------------------------------------------------


def load_splits(options: TrainOptions) -> dict[str, Any]:
    """The corpus splits of `options.data` (read only; nothing is written)."""
    splits = load_dataset(options.data)
    _log(
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
        log=_log,
    )


def _check_budget(tokens_per_batch: int, pairs: int, longest: int, origin: str) -> None:
    """Refuse a batch budget that the training set cannot fill even once."""
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
    _log(report.summary(splits["train"].origin))
    report.check_pairs_left(splits["train"].origin)
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
    options = store_settings(options, store)
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
    plan = plan or DistributionPlan("none")
    buckets = bucket_lengths(options.max_length, buckets)
    common = dict(
        tokens_per_batch=options.tokens_per_batch,
        buckets=buckets,
        row_multiple=plan.num_replicas,
        shard_index=plan.shard_index,
        num_shards=plan.num_shards,
    )
    _check_budget(options.tokens_per_batch, len(train), buckets[-1], origin)
    batches = BucketedBatches(
        pairs=train,
        seed=options.seed,
        accumulation_steps=options.accumulation_steps,
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
    budget = max(options.tokens_per_batch, valid_buckets[-1] * plan.num_replicas)
    valid_batches = BucketedBatches(
        pairs=valid,
        shuffle=False,
        **{**common, "buckets": valid_buckets, "tokens_per_batch": budget},
    )
    return TrainingData(train=batches, valid=valid_batches)


def prepare_options(options: TrainOptions) -> PrepareOptions:
    """The `prepare` settings `train` uses on text: its data, tokenizer,
    vocabulary and length filter; the rest at their defaults (the sample's
    seed is prepare's own, so runs of other seeds share one store)."""
    return PrepareOptions(
        data=options.data,
        **{name: getattr(options, name) for name in STORE_SETTINGS},
    )


def prepare_training_store(
    options: TrainOptions, plan: DistributionPlan | None = None
) -> TokenStore:
    """The store `train` reads: `--dataset store:DIR` opened (refused if its
    source files changed since), or the store of the text corpus, prepared
    on first use into the cache and found there by its fingerprint after.

    In a multi-process run the chief (process 0) prepares alone while the
    others wait; then every process maps the same files. A failure on the
    chief is raised there, and the others stop too, naming it."""
    plan = plan or DistributionPlan("none")
    name = options.data.name
    if name.startswith(STORE_PREFIX):
        store = open_store(name[len(STORE_PREFIX) :])
    else:
        store = _prepared_by_the_chief(prepare_options(options), plan)
    check_store_settings(options, store)
    return store


def _prepared_by_the_chief(options: PrepareOptions, plan: DistributionPlan):
    store, error = None, None
    if plan.is_chief:
        try:
            store = prepare_store(options, log=_log, verify_reused=False)
        except Exception as caught:  # noqa: BLE001 - raised below, on every process.
            error = caught
    if not plan.all_ok(error is None, "store-prepared"):
        if error is not None:
            raise error
        raise DataError(
            "process 0 could not prepare the training data; its error message "
            "says why (nothing was trained)."
        )
    if store is None:  # Process 0 prepared it: the same inputs' path.
        where = store_location(options)
        try:
            store = open_store(where, check_sources=False)
        except StoreError as error:
            raise StoreError(
                f"process {plan.shard_index} cannot read the store process 0 "
                f"prepared in {where} ({error}). Every process must read the "
                "same store: prepare it on a file system they all see "
                "(keras-transformer prepare ... --out DIR) and train with "
                "--dataset store:DIR."
            ) from error
    return store


def check_store_settings(options: TrainOptions, store: TokenStore) -> None:
    """A store fixes the tokenizer, its vocabulary and the length filter:
    `options` takes them from it (through `store_settings`); a value that
    is not the default and differs from the store's is refused."""
    defaults = TrainOptions()
    for name in STORE_SETTINGS:
        given, stored = getattr(options, name), store.settings[name]
        if given != stored and given != getattr(defaults, name):
            flag = "--" + name.replace("_", "-")
            raise ValueError(
                f"{flag} {given}: the store {store.path} was prepared with "
                f"{flag} {stored}, which training on it uses. Drop {flag}, or "
                "prepare another store with it."
            )


def store_settings(options: TrainOptions, store: TokenStore) -> TrainOptions:
    """`options` with the store's tokenizer, vocabulary and length filter."""
    return dataclasses.replace(
        options, **{name: store.settings[name] for name in STORE_SETTINGS}
    )


# --- model ------------------------------------------------------------------------


def model_config(options: TrainOptions, tokenizer) -> TransformerConfig:
    """The preset with the overrides and the tokenizer's vocabulary size
    (`TrainOptions` refuses an override of it: the tokenizer owns it)."""
    return TransformerConfig.preset(
        options.preset, **{**options.overrides, "vocab_size": tokenizer.vocab_size}
    )


def compile_model(
    model: keras.Model,
    config: TransformerConfig,
    options: TrainOptions,
    **compile_options: Any,
) -> None:
    """Adam with the warmup schedule, the label-smoothed loss, per-token
    metrics (`loss` is reported per token; see `Transformer`).

    `compile_options` go to `model.compile` (for example `jit_compile=True`
    for XLA on TensorFlow, or `metrics=None` for the loss alone)."""
    schedule = TransformerSchedule(
        config.d_model, config.warmup_steps, scale=options.learning_rate_scale
    )
    compile_options.setdefault(
        "metrics",
        [
            TokenCrossEntropy(config.label_smoothing),
            TokenPerplexity(),
            MaskedTokenAccuracy(),
        ],
    )
    model.compile(
        optimizer=transformer_optimizer(
            schedule, gradient_accumulation_steps=options.accumulation_steps
        ),
        loss=LabelSmoothedCrossEntropy(config.label_smoothing),
        **compile_options,
    )


def build_model(
    options: TrainOptions,
    config: TransformerConfig,
    plan: DistributionPlan | None = None,
) -> keras.Model:
    """Build and compile the model under the options' precision and the
    plan's distribution (set up the plan first)."""
    plan = plan or DistributionPlan("none")
    with _dtype_policy(options.precision), plan.scope():
        model = build_transformer(config)
        compile_model(model, config, options)
    return model


@contextlib.contextmanager
def _dtype_policy(name: str):
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy(name)
    try:
        yield
    finally:
        keras.config.set_dtype_policy(previous)


# --- the whole job ----------------------------------------------------------------


def run_identity(
    options: TrainOptions, fingerprint: str, plan: DistributionPlan
) -> dict[str, Any]:
    """Every setting that changes the run's trajectory (must match to resume),
    as the JSON values the manifest stores."""
    identity = {
        "preset": options.preset,
        "overrides": dict(sorted(options.overrides.items())),
        "data": {**dataclasses.asdict(options.data), "fingerprint": fingerprint},
        "tokenizer": options.tokenizer,
        "vocab_size": options.vocab_size,
        "tokens_per_batch": options.tokens_per_batch,
        "accumulation_steps": options.accumulation_steps,
        "max_length": options.max_length,
        "learning_rate_scale": options.learning_rate_scale,
        "seed": options.seed,
        "precision": options.precision,
        "replicas": plan.num_replicas,
    }
    return json.loads(json.dumps(identity))


def _verbosity(options: TrainOptions) -> int:
    if options.verbose == "auto":
        return 1 if sys.stdout.isatty() else 2
    return int(options.verbose)


def _log_store(store: TokenStore) -> None:
    splits = store.manifest["splits"]
    counts = ", ".join(f"{name} {info['pairs']:,}" for name, info in splits.items())
    _log(
        f"data: {store.origin()}: {counts} (store {store.path}, fingerprint "
        f"{store.fingerprint[:12]})"
    )
    _log(FilterReport(**store.filter_report()).summary(store.origin()))


class _StopAtEpochEnd(keras.callbacks.Callback):
    """Ends a fit after its first epoch (the rest of a resumed epoch)."""

    def on_epoch_end(self, epoch, logs=None):
        self.model.stop_training = True


def _merge_history(
    previous: dict[str, list], new: dict[str, list], start: DataPosition, step: int
):
    """The stored epochs that ended before a resumed run's checkpoint (`step`,
    in epoch `start.epoch`), then the new ones. An epoch cut short there (by
    a stop at the checkpoint) is dropped: the resumed run finishes it."""
    steps = previous.get("step", [])
    epochs = previous.get("epoch") or [None] * len(steps)  # 1-based.
    keep = [
        i
        for i, (s, e) in enumerate(zip(steps, epochs))
        if s <= step and (e is None or e <= start.epoch)
    ]
    merged = {key: [values[i] for i in keep] for key, values in previous.items()}
    for key, values in new.items():
        merged.setdefault(key, [None] * len(keep))
        merged[key] = merged[key] + list(values)
    return merged


class _EpochHistory(keras.callbacks.Callback):
    """Collects each epoch's logs and, on the chief, rewrites `history.json`
    at every epoch end, so a stopped run keeps the epochs it finished (a
    resume drops those past its checkpoint and trains them again)."""

    def __init__(self, job: _Job):
        super().__init__()
        self.job = job
        self.epochs: dict[str, list] = {}

    def on_epoch_end(self, epoch, logs=None):
        for key, value in (logs or {}).items():
            self.epochs.setdefault(key, []).append(float(value))
        self.epochs.setdefault("epoch", []).append(epoch + 1)
        if self.job.plan.is_chief:
            self.job.run.write_history(self.job.merged_history(), plot=False)


class _Job:
    """The state of one `train` call: run, data, model, clock, callbacks.

    Built in two phases, so that a bad setting or corpus changes nothing:
    `__init__` checks the run directory and prepares everything in memory
    (data, tokenizer, batches, model), raising before any write; `start`
    then writes the run (chief only) and restores its checkpoint.
    """

    def __init__(self, options: TrainOptions, plan: DistributionPlan, extra_callbacks):
        self.options = options
        self.plan = plan
        self.run = RunDirectory(options.run_dir)
        self.existed = self.run.path.exists()
        if plan.is_chief:  # The lock is held: no other process writes here.
            removed = self.run.remove_partials()
            if removed:
                _log(f"removed {len(removed)} partial files of an interrupted write")
        self.store = prepare_training_store(options, plan)
        self.options = options = store_settings(options, self.store)
        self.evaluation = {
            name: self.store.eval_corpus(name) for name in ("valid", "test")
        }
        _log_store(self.store)
        self.identity = run_identity(options, self.store.fingerprint, plan)
        self.decision = self.run.check(self.identity, overwrite=options.overwrite)
        # Every process decides before the chief writes anything.
        self.plan.barrier("run-directory-checked")
        self.resuming = self.decision == "resume"
        keras.utils.set_random_seed(options.seed)
        self.tokenizer, self.tokenizer_is_new = self._tokenizer()
        self.config = model_config(options, self.tokenizer)
        self._check_stored_config()
        self.data = store_batches(options, self.store, self.plan)
        self.model = build_model(options, self.config, plan)
        self.extra_callbacks = list(extra_callbacks)
        self.created = False  # True once `start` has made a new run.
        self.backup: Path | None = None
        self._last_saved: int | None = None

    # -- phase 1: checks, in memory ------------------------------------------------

    def _tokenizer(self):
        # The store's tokenizer, which the run keeps a copy of (a run
        # stopped before it saved one saves it again).
        run_dir = self.run.tokenizer_dir
        if self.resuming and (run_dir / "tokenizer.json").exists():
            if tokenizer_sha256(run_dir) != tokenizer_sha256(self.store.tokenizer_dir):
                raise RunConflict(
                    f"{run_dir} is not the tokenizer of the store {self.store.path} "
                    "that the run's data comes from (was one of them replaced?); "
                    "pass --overwrite to start afresh."
                )
            tokenizer = self.run.load_tokenizer()
            _log(f"reusing this run's tokenizer in {run_dir}")
            return tokenizer, False
        return self.store.tokenizer(), True

    def _check_stored_config(self) -> None:
        if self.resuming and self.run.config_path.exists():
            if self.run.load_config() != self.config:
                raise RunConflict(
                    f"{self.run.config_path} differs from the model these settings "
                    "build (was it edited?); pass --overwrite to start afresh."
                )

    # -- phase 2: the run's files ---------------------------------------------------

    def start(self) -> None:
        """Write the run (chief), restore its checkpoint, set up the clock."""
        self._write_run()
        self.restored = None
        self.epoch_metrics = None
        self.previous_history: dict[str, list] = {}
        if self.resuming:
            self.restored = self._restore()
            self.previous_history = self.run.load_history() or {}
        self.start_position = (
            self.restored.position if self.restored else DataPosition()
        )
        if self.restored and self.start_position.index > 0:
            self.epoch_metrics = self.restored.metric_states
        self.start_step = self.restored.step if self.restored else 0
        self.clock = UpdateClock(self.options.accumulation_steps, self.start_step)
        self._last_saved = self.start_step if self.restored else None
        self.limit = TrainingLimit(
            self.clock,
            max_steps=self.options.max_steps,
            max_minutes=self.options.max_minutes,
        )
        self.interrupt = GracefulInterrupt(self.clock, self.save)
        self.history = _EpochHistory(self)

    def _write_run(self) -> None:
        if not self.plan.is_chief:  # Only the chief writes the run directory.
            manifest = self.run.manifest() if self.resuming else None
            self.run_id = manifest["run_id"] if manifest else "worker"
            return
        if self.decision == "overwrite":
            self.backup = self.run.set_aside()
            _log(f"--overwrite: moved the previous run to {self.backup}")
        if self.resuming:
            self.run_id = self.run.run_id
            _log(f"resuming the run in {self.run.path}")
        else:
            self.created = True
            self.run_id = self.run.create(
                self.identity, dataclasses.asdict(self.options)
            )
        if self.tokenizer_is_new:
            self.run.save_tokenizer(self.tokenizer)
        if not self.run.config_path.exists():
            self.run.write_config(self.config)

    def _restore(self) -> checkpoints.Checkpoint | None:
        # Skipped checkpoints are logged: a warning would print its source line.
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", checkpoints.CheckpointSkipped)
            with self.plan.scope():  # The optimizer's state is built here.
                restored = checkpoints.restore_latest(
                    self.model, self.run.checkpoint_dir, self.run_id
                )
        for warning in caught:
            if issubclass(warning.category, checkpoints.CheckpointSkipped):
                _log(f"warning: {warning.message}")
            else:
                warnings.warn_explicit(
                    warning.message, warning.category, warning.filename, warning.lineno
                )
        return restored

    def discard(self) -> bool:
        """Undo a new run that never saved a checkpoint (chief): remove it,
        and put back the run `--overwrite` had moved aside. True if done."""
        if not (self.plan.is_chief and self.created and self._last_saved is None):
            return False
        self.run.discard_new_run(self.existed and self.backup is None)
        if self.backup is not None:
            self.backup.rename(self.run.path)
        return True

    def merged_history(self) -> dict[str, list]:
        """The stored epochs up to the resumed step, then this call's."""
        return _merge_history(
            self.previous_history,
            self.history.epochs,
            self.start_position,
            self.start_step,
        )

    def save(self, model: keras.Model, *, in_epoch: bool = True) -> None:
        """Checkpoint the current step (chief only; once per step).

        `in_epoch`: called from a batch callback, where the metrics hold the
        epoch's running sums (saved to resume mid-epoch with them). Not in a
        multi-process run, where reading them takes every process."""
        if not self.plan.is_chief or self._last_saved == self.clock.step:
            return
        position = self.data.train.advance(self.start_position, self.clock.batches)
        metrics = None
        if in_epoch and position.index > 0 and self.plan.num_shards == 1:
            metrics = checkpoints.metric_states(model)
        with self.plan.local():
            self.run.save_checkpoint(
                model, step=self.clock.step, position=position, metrics=metrics
            )
        self.run.prune_checkpoints(self.options.keep_checkpoints)
        self._last_saved = self.clock.step

    def callbacks(self):
        options = self.options
        callbacks = [self.clock]  # First: every other callback reads it.
        if self.epoch_metrics is not None:
            # Before anything that saves: the sums then hold the whole epoch.
            callbacks.append(RestoreEpochMetrics(self.epoch_metrics))
        callbacks += [
            StopOnNonFiniteLoss(self.clock),
            self.interrupt,
            self.limit,
            # After the limit: it saves the step where training stops.
            StepCheckpoints(self.clock, self.save, every=options.checkpoint_every),
            self.history,
        ]
        # Dev BLEU decodes on the chief alone: one process only.
        single = self.plan.num_shards == 1
        valid = self.evaluation["valid"]
        if options.eval_every and valid is not None and len(valid) and single:
            subset = slice(0, options.dev_subset)
            sources = valid.source[subset]
            # Greedy and compiled, the whole subset in one batch: the same
            # sentences every time give one input shape, so the search
            # compiles once per run and each evaluation then takes seconds
            # (eager decoding took ~40 s per evaluation on the main job).
            # Under a TensorFlow MirroredStrategy it stays eager, the path
            # the distributed tests cover.
            mirrored = self.plan.num_replicas > 1 and keras.backend.backend() != "jax"
            translator = Translator(
                self.model,
                self.tokenizer,
                beam_size=1,
                batch_size=max(len(sources), 1),
                jit=not mirrored,
            )
            callbacks.append(
                DevBleu(
                    self.clock,
                    translator,
                    sources,
                    valid.target[subset],
                    every=options.eval_every,
                    log=self.run.append_dev_bleu,
                )
            )
        if self.plan.is_chief:
            tensorboard = optional_imports.tensorboard_callback(self.run.logs_dir)
            callbacks += [tensorboard] if tensorboard else []
        return callbacks + self.extra_callbacks

    def stopped_early(self) -> bool:
        return bool(
            self.interrupt.interrupted
            or self.limit.reached_max_steps()
            or self.limit.out_of_time()
        )

    def _fit_segment(self, position: DataPosition, callbacks) -> None:
        """One `fit` from `position`: to the end of its epoch if it starts
        mid-epoch (a resumed run), else to the last epoch."""
        options, data = self.options, self.data
        partial = position.index > 0
        self.model.fit(
            data.train.for_fit(position),
            steps_per_epoch=len(data.train) - position.index,
            initial_epoch=position.epoch,
            epochs=options.epochs,
            validation_data=None if data.valid is None else data.valid.for_fit(),
            callbacks=callbacks + ([_StopAtEpochEnd()] if partial else []),
            verbose=_verbosity(options),
            shuffle=False,  # BucketedBatches shuffles, seeded by (seed, epoch).
        )

    def fit(self) -> None:
        """Run `fit` from the data position to the end (`self.history`)."""
        callbacks = self.callbacks()
        position = self.start_position
        self.plan.prepare_fit(self.model, self.data.train[0])
        self.interrupt.install()
        try:
            if position.index > 0:
                self._fit_segment(position, callbacks)
                position = DataPosition(position.epoch + 1, 0)
            if position.epoch < self.options.epochs and not self.stopped_early():
                self._fit_segment(position, callbacks)
        finally:
            self.interrupt.uninstall()


def train(options: TrainOptions, callbacks=()) -> TrainResult:
    """Run (or resume) the training job described by `options`.

    Holds the run directory's lock throughout (RunBusy when another process
    has it). Raises RunConflict before writing anything when the run
    directory holds another run; any error found in the data or settings
    (an empty corpus, a vocabulary that cannot be built, nothing left after
    --max-length) is raised before anything is written too, and a new run
    that fails before its first checkpoint is removed, so the corrected
    command starts afresh. Raises TrainingInterrupted after a checkpoint
    when SIGTERM or Ctrl-C arrives, TrainingDiverged (naming the step) on a
    NaN or Inf loss, keeping the last good checkpoint, and RunWriteError
    (naming the file and step) when a write fails, a full disk.
    """
    plan = setup_distribution(options.distribute)
    run = RunDirectory(options.run_dir)
    # Only the chief writes, so only the chief locks.
    with run.lock() if plan.is_chief else contextlib.nullcontext():
        job = _Job(options, plan, callbacks)
        try:
            return _train(job)
        except RunWriteError as error:
            if error.step is None:
                error.step = job.clock.step if hasattr(job, "clock") else 0
            _discard(job)
            raise
        except TrainingDiverged as error:
            if _discard(job):
                raise TrainingDiverged(
                    error.step, error.value, run_kept=False
                ) from None
            raise
        except BaseException:
            _discard(job)
            raise


def _discard(job: _Job) -> bool:
    if not job.discard():
        return False
    where = f"; {job.backup} is back in its place" if job.backup else ""
    _log(f"removed the new run in {job.run.path}: it saved no checkpoint{where}")
    return True


def _train(job: _Job) -> TrainResult:
    options = job.options
    job.start()
    run, model, clock = job.run, job.model, job.clock
    if job.restored:
        _log(
            f"restored step {job.restored.step} from {job.restored.path.name} "
            f"(epoch {job.start_position.epoch + 1}, batch {job.start_position.index})"
        )
    _log(
        f"model: preset {options.preset}, {model.count_params():,} parameters; "
        f"{len(job.data.train)} batches/epoch, "
        f"{job.data.train.num_target_tokens():,} target tokens/epoch; "
        f"backend {keras.backend.backend()}, {job.plan.describe()}, "
        f"{options.precision}"
    )
    done = options.max_steps is not None and clock.step >= options.max_steps
    if not done:
        job.fit()
    if job.interrupt.interrupted:
        raise TrainingInterrupted(job.interrupt.interrupted, clock.step, run.path)
    job.save(model, in_epoch=False)
    steps = clock.step
    train_seconds = job.limit.elapsed_seconds() if not done else 0.0
    # A finished run run again trains nothing and keeps its history as it is.
    merged = job.previous_history if done else job.merged_history()
    final_loss = float(merged["loss"][-1]) if merged.get("loss") else float("nan")
    test = None
    if job.plan.is_chief:
        with job.plan.local():
            run.save_final_model(model, steps)
        run.write_history(merged)
        _log(f"{_trained(steps - job.start_step, steps, train_seconds)} -> {run.path}")
        test = _test_score(job)
    return TrainResult(
        run_dir=run.path,
        steps=steps,
        train_seconds=train_seconds,
        final_loss=final_loss,
        test=test,
    )


def _trained(this_time: int, in_all: int, seconds: float) -> str:
    """ "trained 10 steps (0.1 min)", or for a resumed run "trained 10 steps
    this time, 150 in all (0.1 min)"."""
    minutes = f"({seconds / 60:.1f} min)"
    if this_time == in_all:
        return f"trained {_plural(in_all, 'step')} {minutes}"
    return f"trained {_plural(this_time, 'step')} this time, {in_all} in all {minutes}"


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}" + ("" if count == 1 else "s")


def _test_score(job: _Job) -> BleuResult | None:
    options, test_split = job.options, job.evaluation["test"]
    if test_split is None or not len(test_split):
        return None
    model = job.model
    if job.plan.num_shards > 1:
        # Decode a local copy: the chief alone cannot run computations on
        # weights placed across every process.
        with job.plan.local():
            model = job.run.load_model()
    translator = Translator(
        model,
        job.tokenizer,
        beam_size=options.beam_size,
        batch_size=options.test_batch_size,
    )
    test = evaluate_split(translator, test_split, job.run.test_hypotheses_path)
    _log(f"test set ({len(test_split)} sentences, beam {options.beam_size}): {test}")
    job.run.write_test_scores(test)
    return test
