"""The whole training job: `train`, from its settings to a tested run.

`train(options)` starts a new run in `options.run_dir`, resumes an
interrupted one exactly (weights, optimizer, step, learning rate, dropout
RNG, data position), or refuses a run directory that holds another run.
`_Job` holds one call's state in two phases, so that a bad setting or corpus
changes nothing: it prepares everything in memory first, then writes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import sys
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

import keras
import numpy as np

from keras_transformer.data.pipeline import DataPosition
from keras_transformer.data.store_options import with_store_settings
from keras_transformer.decoding.evaluation import BleuResult, evaluate_split
from keras_transformer.decoding.settings import SearchSettings, task_search
from keras_transformer.decoding.translator import Translator
from keras_transformer.run import checkpoints
from keras_transformer.run.checkpoints import RunWriteError
from keras_transformer.run.directory import RunConflict, RunDirectory, check_vocabulary
from keras_transformer.training.accelerators import backend_gpus
from keras_transformer.training.batches import store_batches
from keras_transformer.training.callbacks import (
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
from keras_transformer.training.distribution import DistributionPlan, setup_distribution
from keras_transformer.training.fine_tune import (
    enable_lora,
    fine_tune_config,
    frequent_tokens,
    load_init_weights,
    merged_model,
    resolve_init,
)
from keras_transformer.training.history import EpochHistory, write_training_curve
from keras_transformer.training.memory import (
    check_memory,
    is_out_of_memory,
    out_of_memory,
)
from keras_transformer.training.model_setup import (
    build_model,
    dtype_policy,
    fine_tune_schedule,
    model_config,
)
from keras_transformer.training.options import TrainOptions, lora_target_names
from keras_transformer.training.store import (
    log_store,
    prepare_training_store,
    run_tokenizer,
)
from keras_transformer.utils import optional_imports
from keras_transformer.utils.console import log

if TYPE_CHECKING:
    from keras_transformer.decoding.parse_evaluation import ParsingResult


@dataclasses.dataclass
class TrainResult:
    run_dir: Path
    steps: int
    train_seconds: float
    final_loss: float
    test: BleuResult | ParsingResult | None


def run_identity(
    options: TrainOptions,
    fingerprint: str,
    plan: DistributionPlan,
    init: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Every setting that changes the run's trajectory (must match to resume),
    as the JSON values the manifest stores. `init`: a fine-tune's trained
    model (`InitModel.identity`)."""
    data = dataclasses.asdict(options.data)
    # Runs from before these settings keep their identity.
    if data["linearization"] == "tags":
        del data["linearization"]
    if not data["subtree_substitution"]:
        del data["subtree_substitution"]
    identity = {
        "preset": options.preset,
        "overrides": dict(sorted(options.overrides.items())),
        "data": {**data, "fingerprint": fingerprint},
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
    if options.task != "translation":  # Runs from before tasks keep their identity.
        identity["task"] = options.task
    if options.init_from is not None:  # Other runs keep their identity.
        identity["init_from"] = init
        identity["lora"] = options.lora_rank and {
            "rank": options.lora_rank,
            # As the layers see them: order and an alpha equal to the rank
            # spelled out or not are the same run.
            "alpha": float(options.lora_alpha or options.lora_rank),
            "targets": sorted(lora_target_names(options.lora_targets)),
        }
        if options.lora_embedding_rank is not None:  # Runs before it keep theirs.
            rank = options.lora_embedding_rank
            identity["lora"]["embedding_rank"] = rank
            identity["lora"]["embedding_alpha"] = float(options.lora_alpha or rank)
        if options.lora_token_rows is not None:  # Runs before it keep theirs.
            identity["lora"]["token_rows"] = options.lora_token_rows
        schedule = fine_tune_schedule(options)
        # The paper's is implied, as in fine-tunes from before the option
        # (they resume with --fine-tune-schedule paper).
        if schedule is not None:
            identity["schedule"] = schedule.get_config()
    return json.loads(json.dumps(identity))


def _verbosity(options: TrainOptions) -> int:
    if options.verbose == "auto":
        return 1 if sys.stdout.isatty() else 2
    return int(options.verbose)


class _StopAtEpochEnd(keras.callbacks.Callback):
    """Ends a fit after its first epoch (the rest of a resumed epoch)."""

    def on_epoch_end(self, epoch, logs=None):
        self.model.stop_training = True


class _Job:
    """The state of one `train` call: run, data, model, clock, callbacks.

    Built in two phases, so that a bad setting or corpus changes nothing:
    `__init__` checks the run directory and prepares everything in memory
    (data, tokenizer, batches, model), raising before any write; `start`
    then writes the run (chief only) and restores its checkpoint.
    """

    def __init__(
        self,
        options: TrainOptions,
        plan: DistributionPlan,
        run: RunDirectory,
        extra_callbacks,
    ):
        self.options = options
        self.plan = plan
        self.run = run
        self.existed = self.run.path.exists()
        if plan.is_chief:  # The lock is held: no other process writes here.
            removed = self.run.remove_partials()
            if removed:
                log(f"removed {len(removed)} partial files of an interrupted write")
        self.init = resolve_init(options.init_from) if options.init_from else None
        if self.init is not None:  # Its flags checked before the data is read.
            fine_tune_config(self.init, options)
        tokenizer_from = self.init.tokenizer_dir if self.init else None
        self.store = prepare_training_store(options, plan, tokenizer_from)
        self.options = options = with_store_settings(options, self.store)
        self.evaluation = {
            name: self.store.eval_corpus(name) for name in ("valid", "test")
        }
        log_store(self.store)
        init_identity = self.init.identity() if self.init else None
        self.identity = run_identity(
            options, self.store.fingerprint, plan, init_identity
        )
        self.decision = self.run.check(self.identity, overwrite=options.overwrite)
        # Every process decides before the chief writes anything.
        self.plan.barrier("run-directory-checked")
        self.resuming = self.decision == "resume"
        keras.utils.set_random_seed(options.seed)
        self.tokenizer, self.tokenizer_is_new = run_tokenizer(
            self.run, self.store, self.resuming
        )
        self.config = self._model_config()
        self._check_stored_config()
        self._check_what_needs_the_model()
        self.data = store_batches(options, self.store, self.plan)
        self.token_rows: np.ndarray | None = None  # Set by `_fine_tune`.
        self.model = build_model(
            options, self.config, plan, self._fine_tune if self.init else None
        )
        self.extra_callbacks = list(extra_callbacks)
        self.created = False  # True once `start` has made a new run.
        self.backup: Path | None = None
        self._last_saved: int | None = None

    # -- phase 1: checks, in memory ------------------------------------------------

    def _model_config(self):
        if self.init is None:
            return model_config(self.options, self.tokenizer)
        config = fine_tune_config(self.init, self.options)
        check_vocabulary(self.tokenizer, config.vocab_size, self.init.path, self.run)
        return config

    def _fine_tune(self, model: keras.Model) -> None:
        """The trained weights (bit for bit), then LoRA on the targets."""
        load_init_weights(model, self.init)
        options = self.options
        if options.lora_token_rows:
            train = self.store.pairs("train")
            self.token_rows = frequent_tokens(train, options.lora_token_rows)
        if options.lora_rank:
            enable_lora(
                model,
                options.lora_rank,
                options.lora_targets,
                options.lora_alpha,
                options.lora_embedding_rank,
                self.token_rows,
            )

    def final_model(self) -> keras.Model:
        """What `model.keras` holds: the model, or with LoRA the plain model
        with the factors merged (no LoRA layers downstream)."""
        if not self.options.lora_rank:
            return self.model
        with dtype_policy(self.options.precision):
            return merged_model(self.model, self.config)

    def describe_model(self) -> str:
        count = f"{self.model.count_params():,} parameters"
        if self.init is None:
            return f"preset {self.options.preset}, {count}"
        trainable = sum(int(np.prod(v.shape)) for v in self.model.trainable_weights)
        options = self.options
        how = (
            f"LoRA rank {options.lora_rank} on {options.lora_targets}"
            if options.lora_rank
            else "all weights"
        )
        if options.lora_rank and options.lora_embedding_rank is not None:
            how += f", rank {options.lora_embedding_rank} on the vocabulary layers"
        if self.token_rows is not None:
            how += (
                f", the table's rows of the {len(self.token_rows):,} most "
                "frequent pieces in full"
            )
        return f"fine-tune of {self.init.path} ({how}), {count}, {trainable:,} trained"

    def _check_stored_config(self) -> None:
        if self.resuming and self.run.config_path.exists():
            if self.run.load_config() != self.config:
                raise RunConflict(
                    f"{self.run.config_path} differs from the model these settings "
                    "build (was it edited?); pass --overwrite to start afresh."
                )

    def _check_what_needs_the_model(self) -> None:
        """Settings that the model's sizes make impossible, refused before
        anything is built rather than after (or during) training."""
        options = self.options
        # The final test decode's beam, which used to fail after every step.
        SearchSettings(beam_size=options.beam_size).check_vocabulary(
            self.config.vocab_size
        )
        if backend_gpus():  # A GPU's memory is the backend's to report.
            return
        # This process holds its shard of each global batch.
        train_pairs = self.store.manifest["splits"]["train"]["pairs"]
        check_memory(
            self.config,
            options.tokens_per_batch // self.plan.num_shards,
            options.max_length,
            capacity=train_pairs * options.max_length,
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
        write = self.run.write_history
        self.history = EpochHistory(
            self.previous_history,
            self.start_position,
            self.start_step,
            write=write if self.plan.is_chief else None,
        )

    def _write_run(self) -> None:
        if not self.plan.is_chief:  # Only the chief writes the run directory.
            manifest = self.run.manifest() if self.resuming else None
            self.run_id = manifest["run_id"] if manifest else "worker"
            return
        if self.decision == "overwrite":
            self.backup = self.run.set_aside()
            log(f"--overwrite: moved the previous run to {self.backup}")
        if self.resuming:
            self.run_id = self.run.run_id
            log(f"resuming the run in {self.run.path}")
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
                log(f"warning: {warning.message}")
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
        dev_bleu = self._dev_bleu()
        callbacks += [dev_bleu] if dev_bleu else []
        if self.plan.is_chief:
            tensorboard = optional_imports.tensorboard_callback(self.run.logs_dir)
            callbacks += [tensorboard] if tensorboard else []
        return callbacks + self.extra_callbacks

    def _dev_bleu(self) -> DevBleu | None:
        """BLEU of the dev subset every --eval-every updates, decoded on the
        chief alone: one process only."""
        options, valid = self.options, self.evaluation["valid"]
        single = self.plan.num_shards == 1
        if not (options.eval_every and valid is not None and len(valid) and single):
            return None
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
            self.task_search().replace(beam_size=1),
            batch_size=max(len(sources), 1),
            jit=not mirrored,
            grammar=self.task_grammar(),
        )
        return DevBleu(
            self.clock,
            translator,
            sources,
            valid.target[subset],
            every=options.eval_every,
            log=self.run.append_dev_bleu,
            extra_scores=self._dev_parsing_scores(sources, valid.target[subset]),
        )

    def task_search(self) -> SearchSettings:
        """The task's search (parsing: up to input + 300 tokens). Targets
        with words hold `<unk>` for the rare ones: their search may write it."""
        settings = task_search(self.options.task)
        unk = settings.allow_unk or self.options.data.with_words
        return settings.replace(allow_unk=unk)

    def task_grammar(self):
        """Parsing: the search writes only trees (`decoding.tree_grammar`),
        as `parse` and `evaluate --task parsing` do by default."""
        if self.options.task != "parsing" or self.tokenizer.kind != "words":
            return None
        from keras_transformer.decoding.tree_grammar import TreeGrammar

        return TreeGrammar.for_tokenizer(
            self.tokenizer, with_words=self.options.data.with_words
        )

    def _dev_parsing_scores(self, sources, targets):
        """Parsing: the dev subset's labeled F1 beside its (linearized) BLEU."""
        if self.options.task != "parsing":
            return None
        from keras_transformer.decoding.parse_evaluation import linearized_f1

        with_words = self.options.data.with_words
        return functools.partial(linearized_f1, sources, targets, with_words=with_words)

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
        job = _Job(options, plan, run, callbacks)
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
        except Exception as error:
            kept = not _discard(job)
            if is_out_of_memory(error):
                step = job.clock.step if hasattr(job, "clock") else 0
                raise out_of_memory(
                    error, step, options.tokens_per_batch, kept
                ) from None
            raise
        except BaseException:
            _discard(job)
            raise


def _discard(job: _Job) -> bool:
    if not job.discard():
        return False
    where = f"; {job.backup} is back in its place" if job.backup else ""
    log(f"removed the new run in {job.run.path}: it saved no checkpoint{where}")
    return True


def _train(job: _Job) -> TrainResult:
    options = job.options
    job.start()
    run, model, clock = job.run, job.model, job.clock
    if job.restored:
        log(
            f"restored step {job.restored.step} from {job.restored.path.name} "
            f"(epoch {job.start_position.epoch + 1}, batch {job.start_position.index})"
        )
    log(
        f"model: {job.describe_model()}; "
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
    merged = job.previous_history if done else job.history.merged()
    final_loss = float(merged["loss"][-1]) if merged.get("loss") else float("nan")
    test = None
    if job.plan.is_chief:
        with job.plan.local():
            run.save_final_model(job.final_model(), steps)
        run.write_history(merged)
        write_training_curve(run, merged)
        log(f"{_trained(steps - job.start_step, steps, train_seconds)} -> {run.path}")
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


def _test_score(job: _Job) -> BleuResult | ParsingResult | None:
    options, test_split = job.options, job.evaluation["test"]
    if test_split is None or not len(test_split):
        return None
    model = job.model
    if job.plan.num_shards > 1:
        # Decode a local copy: the chief alone cannot run computations on
        # weights placed across every process.
        with job.plan.local():
            model = job.run.load_model()
    settings = job.task_search().replace(
        beam_size=options.beam_size, alpha=options.alpha
    )
    translator = Translator(
        model,
        job.tokenizer,
        settings,
        batch_size=options.test_batch_size,
        grammar=job.task_grammar(),
    )
    if options.task == "parsing":
        from keras_transformer.decoding.parse_evaluation import evaluate_parser_split

        test = evaluate_parser_split(
            translator,
            test_split,
            job.run.test_hypotheses_path,
            with_words=options.data.with_words,
        )
    else:
        test = evaluate_split(translator, test_split, job.run.test_hypotheses_path)
    log(
        f"test set ({len(test_split)} sentences, beam {options.beam_size}, "
        f"alpha {options.alpha}): {test}"
    )
    job.run.write_test_scores(test, search=settings.to_dict())
    return test
