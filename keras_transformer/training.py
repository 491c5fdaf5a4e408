"""Training: data -> joint tokenizer -> batches -> `model.fit`, resumable.

`train(options)` runs a whole job in a run directory (see `run_directory`):
it starts a new run, or resumes an interrupted one exactly (weights,
optimizer, step, learning rate, dropout RNG, data position), or refuses a
run directory that holds another run. The same work is available in public
steps that a notebook calls around its own `model.fit`:

    options = TrainOptions(preset="tiny", max_steps=500)
    splits = load_splits(options)
    tokenizer = prepare_tokenizer(options, splits)
    data = prepare_batches(options, splits, tokenizer)
    model = build_model(options, model_config(options, tokenizer))
    model.fit(data.train.for_fit(DataPosition()),
              steps_per_epoch=len(data.train), epochs=3,
              validation_data=data.valid.for_fit())
    scores = evaluate_split(Translator(model, tokenizer), splits["test"])

`TrainOptions` is the one place where every training setting, its default,
its range and its help text live; the CLI's `train` flags are made from it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import keras

from keras_transformer import checkpoints, optional_imports
from keras_transformer.atomic_files import atomic_write_text
from keras_transformer.callbacks import (
    DevBleu,
    GracefulInterrupt,
    StepCheckpoints,
    StopOnNonFiniteLoss,
    TrainingDiverged,
    TrainingLimit,
    UpdateClock,
)
from keras_transformer.config import TransformerConfig
from keras_transformer.data.datasets import load_dataset
from keras_transformer.data.pipeline import (
    DEFAULT_BUCKETS,
    BucketedBatches,
    DataPosition,
    FilterReport,
    bucket_lengths,
    drop_empty_pairs,
    drop_long_pairs,
)
from keras_transformer.data.tokenizer import train_tokenizer
from keras_transformer.distribution import DistributionPlan, setup_distribution
from keras_transformer.evaluation import BleuResult, evaluate_split
from keras_transformer.losses import LabelSmoothedCrossEntropy
from keras_transformer.metrics import (
    MaskedTokenAccuracy,
    TokenCrossEntropy,
    TokenPerplexity,
)
from keras_transformer.model import build_transformer
from keras_transformer.options import TrainOptions
from keras_transformer.run_directory import RunConflict, RunDirectory
from keras_transformer.schedules import TransformerSchedule, transformer_optimizer
from keras_transformer.translator import Translator

__all__ = [
    "TrainOptions",
    "TrainingData",
    "TrainingDiverged",
    "TrainingInterrupted",
    "TrainResult",
    "build_model",
    "compile_model",
    "data_fingerprint",
    "load_splits",
    "model_config",
    "prepare_batches",
    "prepare_tokenizer",
    "train",
]

EXIT_INTERRUPTED = 75  # sysexits EX_TEMPFAIL: stopped cleanly, run it again.


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


class TrainingInterrupted(RuntimeError):
    """SIGTERM or Ctrl-C stopped training after saving a checkpoint."""

    def __init__(self, signal_name: str, step: int, run_dir: Path):
        self.step = step
        super().__init__(
            f"{signal_name}: saved a checkpoint at step {step} in {run_dir} and "
            f"stopped (exit status {EXIT_INTERRUPTED}). Run the same command "
            "again to resume exactly where it stopped."
        )


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


def data_fingerprint(splits: dict[str, Any]) -> str:
    """SHA-256 of every split's text: a resumed run must see the same data."""
    digest = hashlib.sha256()
    for name in sorted(splits):
        digest.update(f"\0split {name}\0".encode())
        for source, target in zip(splits[name].source, splits[name].target):
            digest.update(f"{source}\t{target}\n".encode())
    return digest.hexdigest()


def prepare_tokenizer(options: TrainOptions, splits: dict[str, Any]):
    """Learn the joint vocabulary from the training split."""
    started = time.monotonic()
    train = splits["train"]
    texts = [t for t in train.source + train.target if t.strip()]
    tokenizer = train_tokenizer(
        texts,
        options.vocab_size,
        kind=options.tokenizer,
        seed=options.seed,
        origin=train.origin,
    )
    _log(
        f"learned a joint {options.tokenizer} vocabulary of {tokenizer.vocab_size} "
        f"in {time.monotonic() - started:.1f}s"
    )
    return tokenizer


def _filter_pairs(corpus, tokenizer, max_length: int):
    keep, empty = drop_empty_pairs(corpus.source, corpus.target, corpus.line_numbers)
    source = tokenizer.encode([corpus.source[i] for i in keep])
    target = tokenizer.encode([corpus.target[i] for i in keep])
    lines = [corpus.line_numbers[i] for i in keep]
    kept, too_long = drop_long_pairs(source, target, lines, max_length)
    report = FilterReport(kept=len(kept), empty_lines=empty, too_long_lines=too_long)
    _log(report.summary(corpus.origin))
    if not kept:
        raise ValueError(
            f"{corpus.origin}: no training pairs left after filtering "
            f"({report.summary(corpus.origin)}). Check the files and --max-length."
        )
    return [source[i] for i in kept], [target[i] for i in kept]


def prepare_batches(
    options: TrainOptions,
    splits: dict[str, Any],
    tokenizer,
    plan: DistributionPlan | None = None,
    buckets: Sequence[int] = DEFAULT_BUCKETS,
) -> TrainingData:
    """Token-budget batches of the training and validation splits, padded
    to the lengths of `buckets` up to `options.max_length`."""
    plan = plan or DistributionPlan("none")
    buckets = bucket_lengths(options.max_length, buckets)
    common = dict(
        tokens_per_batch=options.tokens_per_batch,
        buckets=buckets,
        row_multiple=plan.num_replicas,
        shard_index=plan.shard_index,
        num_shards=plan.num_shards,
    )
    train = BucketedBatches(
        *_filter_pairs(splits["train"], tokenizer, options.max_length),
        seed=options.seed,
        accumulation_steps=options.accumulation_steps,
        **common,
    )
    valid = None
    if "valid" in splits and len(splits["valid"]):
        # Validation pairs are never dropped for length: the last bucket is
        # the smallest that holds the longest pair (the pair's own length
        # past --max-length), so no pair pads further than it must.
        corpus = splits["valid"]
        source = tokenizer.encode(corpus.source)
        target = tokenizer.encode(corpus.target)
        longest = max(max(len(s), len(t) + 1) for s, t in zip(source, target))
        valid_buckets = tuple(b for b in buckets if b < longest) + (
            min((b for b in buckets if b >= longest), default=longest),
        )
        budget = max(options.tokens_per_batch, valid_buckets[-1] * plan.num_replicas)
        valid = BucketedBatches(
            source,
            target,
            shuffle=False,
            **{**common, "buckets": valid_buckets, "tokens_per_batch": budget},
        )
    return TrainingData(train=train, valid=valid)


# --- model ------------------------------------------------------------------------


def model_config(options: TrainOptions, tokenizer) -> TransformerConfig:
    """The preset with the overrides and the tokenizer's vocabulary size."""
    return TransformerConfig.preset(
        options.preset, **{"vocab_size": tokenizer.vocab_size, **options.overrides}
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


class _StopAtEpochEnd(keras.callbacks.Callback):
    """Ends a fit after its first epoch (the rest of a resumed epoch)."""

    def on_epoch_end(self, epoch, logs=None):
        self.model.stop_training = True


def _merge_history(previous: dict[str, list], new: dict[str, list], step: int):
    """Keep the stored epochs up to `step` (a resumed run), then the new ones."""
    keep = [i for i, s in enumerate(previous.get("step", [])) if s <= step]
    merged = {key: [values[i] for i in keep] for key, values in previous.items()}
    for key, values in new.items():
        merged.setdefault(key, [None] * len(keep))
        merged[key] = merged[key] + list(values)
    return merged


def _save_history(history: dict[str, list], run: RunDirectory) -> None:
    atomic_write_text(run.history_path, json.dumps(history, indent=2) + "\n")
    try:
        from keras_transformer.plots import training_curves
    except ImportError:  # Plotting is optional.
        return
    dev_bleu = None
    if run.dev_bleu_path.exists():
        lines = run.dev_bleu_path.read_text(encoding="utf-8").splitlines()
        dev_bleu = [json.loads(line) for line in lines if line.strip()]
    training_curves(history, dev_bleu).savefig(run.curve_path, dpi=100)


class _Job:
    """The state of one `train` call: run, data, model, clock, callbacks."""

    def __init__(self, options: TrainOptions, extra_callbacks):
        self.options = options
        self.plan = setup_distribution(options.distribute)
        self.run = RunDirectory(options.run_dir)
        self.splits = load_splits(options)
        identity = run_identity(options, data_fingerprint(self.splits), self.plan)
        decision = self.run.check(identity, overwrite=options.overwrite)
        # Every process decides before the chief writes anything.
        self.plan.barrier("run-directory-checked")
        self.resuming = decision == "resume"
        self._start(decision, identity)
        keras.utils.set_random_seed(options.seed)
        self.tokenizer = self._tokenizer()
        self.config = model_config(options, self.tokenizer)
        self._write_config()
        self.data = prepare_batches(options, self.splits, self.tokenizer, self.plan)
        self.model = build_model(options, self.config, self.plan)
        self.restored = None
        if self.resuming:
            with self.plan.scope():  # The optimizer's state is built here.
                self.restored = checkpoints.restore_latest(
                    self.model, self.run.checkpoint_dir, self.run_id
                )
        self.start = self.restored.position if self.restored else DataPosition()
        self.clock = UpdateClock(
            options.accumulation_steps, self.restored.step if self.restored else 0
        )
        self._last_saved = self.clock.step if self.restored else None
        self.limit = TrainingLimit(
            self.clock, max_steps=options.max_steps, max_minutes=options.max_minutes
        )
        self.interrupt = GracefulInterrupt(self.clock, self.save)
        self.extra_callbacks = list(extra_callbacks)

    def _start(self, decision: str, identity: dict[str, Any]) -> None:
        if not self.plan.is_chief:  # Only the chief writes the run directory.
            manifest = self.run.manifest() if self.resuming else None
            self.run_id = manifest["run_id"] if manifest else "worker"
            return
        if decision == "overwrite":
            backup = self.run.set_aside()
            _log(f"--overwrite: moved the previous run to {backup}")
        if decision == "resume":
            self.run_id = self.run.run_id
            _log(f"resuming the run in {self.run.path}")
        else:
            options = dataclasses.asdict(self.options)
            self.run_id = self.run.create(identity, options)

    def _tokenizer(self):
        # A run stopped before it saved its tokenizer learns it again: the
        # same data, settings and seed give the same vocabulary.
        if self.resuming and (self.run.tokenizer_dir / "tokenizer.json").exists():
            tokenizer = self.run.load_tokenizer()
            _log(f"reusing this run's tokenizer in {self.run.tokenizer_dir}")
            return tokenizer
        tokenizer = prepare_tokenizer(self.options, self.splits)
        if self.plan.is_chief:
            tokenizer.save(self.run.tokenizer_dir)
        return tokenizer

    def _write_config(self) -> None:
        if self.resuming and self.run.config_path.exists():
            stored = self.run.load_config()
            if stored != self.config:
                raise RunConflict(
                    f"{self.run.config_path} differs from the model these settings "
                    "build (was it edited?); pass --overwrite to start afresh."
                )
        elif self.plan.is_chief:
            text = json.dumps(self.config.to_dict(), indent=2, sort_keys=True)
            atomic_write_text(self.run.config_path, text + "\n")

    def save(self, model: keras.Model) -> None:
        """Checkpoint the current step (chief only; once per step)."""
        if not self.plan.is_chief or self._last_saved == self.clock.step:
            return
        position = self.data.train.advance(self.start, self.clock.batches)
        with self.plan.local():
            checkpoints.save_checkpoint(
                model,
                self.run.checkpoint_dir,
                step=self.clock.step,
                run_id=self.run_id,
                position=position,
            )
        checkpoints.prune_checkpoints(
            self.run.checkpoint_dir, self.run_id, self.options.keep_checkpoints
        )
        self._last_saved = self.clock.step

    def callbacks(self):
        options = self.options
        callbacks = [
            self.clock,  # First: every other callback reads it.
            StopOnNonFiniteLoss(self.clock),
            self.interrupt,
            StepCheckpoints(self.clock, self.save, every=options.checkpoint_every),
            self.limit,
        ]
        # Dev BLEU decodes on the chief alone: one process only.
        single = self.plan.num_shards == 1
        if options.eval_every and "valid" in self.splits and single:
            valid = self.splits["valid"]
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
                    log_path=self.run.dev_bleu_path,
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

    def _fit_segment(self, position: DataPosition, callbacks, history) -> None:
        """One `fit` from `position`: to the end of its epoch if it starts
        mid-epoch (a resumed run), else to the last epoch."""
        options, data = self.options, self.data
        partial = position.index > 0
        result = self.model.fit(
            data.train.for_fit(position),
            steps_per_epoch=len(data.train) - position.index,
            initial_epoch=position.epoch,
            epochs=options.epochs,
            validation_data=None if data.valid is None else data.valid.for_fit(),
            callbacks=callbacks + ([_StopAtEpochEnd()] if partial else []),
            verbose=_verbosity(options),
            shuffle=False,  # BucketedBatches shuffles, seeded by (seed, epoch).
        )
        for key, values in result.history.items():
            history.setdefault(key, []).extend(values)
        history.setdefault("epoch", []).extend(e + 1 for e in result.epoch)

    def fit(self) -> dict[str, list]:
        """Run `fit` from the data position to the end; return the history."""
        history: dict[str, list] = {}
        callbacks = self.callbacks()
        position = self.start
        self.plan.prepare_fit(self.model, self.data.train[0])
        self.interrupt.install()
        try:
            if position.index > 0:
                self._fit_segment(position, callbacks, history)
                position = DataPosition(position.epoch + 1, 0)
            if position.epoch < self.options.epochs and not self.stopped_early():
                self._fit_segment(position, callbacks, history)
        finally:
            self.interrupt.uninstall()
        return history


def train(options: TrainOptions, callbacks=()) -> TrainResult:
    """Run (or resume) the training job described by `options`.

    Raises RunConflict before writing anything when the run directory holds
    another run, TrainingInterrupted after a checkpoint when SIGTERM or
    Ctrl-C arrives, and TrainingDiverged (naming the step) on a NaN or Inf
    loss, keeping the last good checkpoint.
    """
    job = _Job(options, callbacks)
    run, model, clock = job.run, job.model, job.clock
    if job.restored:
        _log(
            f"restored step {job.restored.step} from {job.restored.path.name} "
            f"(epoch {job.start.epoch + 1}, batch {job.start.index})"
        )
    _log(
        f"model: preset {options.preset}, {model.count_params():,} parameters; "
        f"{len(job.data.train)} batches/epoch, "
        f"{job.data.train.num_target_tokens():,} target tokens/epoch; "
        f"backend {keras.backend.backend()}, {job.plan.describe()}, "
        f"{options.precision}"
    )
    done = options.max_steps is not None and clock.step >= options.max_steps
    history = {} if done else job.fit()
    if job.interrupt.interrupted:
        raise TrainingInterrupted(job.interrupt.interrupted, clock.step, run.path)
    job.save(model)
    steps = clock.step
    train_seconds = job.limit.elapsed_seconds() if not done else 0.0
    final_loss = float("nan")
    if history.get("loss"):
        final_loss = float(history["loss"][-1])
    test = None
    if job.plan.is_chief:
        with job.plan.local():
            model.save(run.model_path)
        previous = {}
        if job.resuming and run.history_path.exists():
            previous = json.loads(run.history_path.read_text())
        start_step = job.restored.step if job.restored else 0
        merged = _merge_history(previous, history, start_step)
        _save_history(merged, run)
        if not history.get("loss") and merged.get("loss"):
            final_loss = float(merged["loss"][-1])
        _log(f"trained {steps} steps ({train_seconds / 60:.1f} min) -> {run.path}")
        test = _test_score(job)
    return TrainResult(
        run_dir=run.path,
        steps=steps,
        train_seconds=train_seconds,
        final_loss=final_loss,
        test=test,
    )


def _test_score(job: _Job) -> BleuResult | None:
    options, splits = job.options, job.splits
    if "test" not in splits or not len(splits["test"]):
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
    test = evaluate_split(translator, splits["test"], job.run.test_hypotheses_path)
    _log(
        f"test set ({len(splits['test'])} sentences, beam {options.beam_size}): {test}"
    )
    atomic_write_text(
        job.run.test_scores_path, json.dumps(dataclasses.asdict(test), indent=2) + "\n"
    )
    return test
