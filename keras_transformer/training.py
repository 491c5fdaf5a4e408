"""End-to-end training: data -> joint tokenizer -> batches -> `model.fit`.

`train(options)` fills a run directory with everything needed to translate
and resume: config.json, the tokenizer, step checkpoints (the last K), the
final model, history.json, a training-curve PNG, TensorBoard logs, and the
test-set hypotheses and scores.
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path
from typing import Any

import keras

from keras_transformer.callbacks import DevBleu, StepCheckpoints, TrainingLimit
from keras_transformer.config import TransformerConfig
from keras_transformer.data.datasets import DatasetSpec, load_dataset
from keras_transformer.data.pipeline import (
    BucketedBatches,
    FilterReport,
    bucket_lengths,
    drop_empty_pairs,
    drop_long_pairs,
)
from keras_transformer.data.tokenizer import load_tokenizer, train_tokenizer
from keras_transformer.evaluation import BleuResult, corpus_scores
from keras_transformer.losses import LabelSmoothedCrossEntropy
from keras_transformer.metrics import MaskedTokenAccuracy
from keras_transformer.model import build_transformer
from keras_transformer.schedules import TransformerSchedule, transformer_optimizer
from keras_transformer.translator import Translator


@dataclasses.dataclass
class TrainOptions:
    """Settings of one training run (the model itself is `TransformerConfig`)."""

    run_dir: str = "runs/builtin-tiny"
    preset: str = "tiny"
    overrides: dict[str, Any] = dataclasses.field(default_factory=dict)
    data: DatasetSpec = dataclasses.field(default_factory=DatasetSpec)
    tokenizer: str = "sentencepiece"
    vocab_size: int = 4000  # Joint subword vocabulary to learn.
    tokens_per_batch: int = 2048  # Padded target tokens per batch.
    accumulation_steps: int = 1  # Batches per optimizer update.
    max_length: int = 128  # Longer training pairs are dropped (reported).
    epochs: int = 1000
    max_steps: int | None = None
    max_minutes: float | None = None
    learning_rate_scale: float = 1.0
    seed: int = 0
    eval_every: int = 0  # Dev-subset BLEU every N steps; 0 = never.
    dev_subset: int = 100
    checkpoint_every: int = 500
    keep_checkpoints: int = 5
    test_batch_size: int = 64
    beam_size: int = 4  # For the final test-set score; dev BLEU is greedy.


@dataclasses.dataclass
class TrainResult:
    run_dir: Path
    steps: int
    train_seconds: float
    final_loss: float
    test: BleuResult | None


def _log(message: str) -> None:
    print(f"[keras-transformer] {message}", flush=True)


def _filter_training_pairs(corpus, tokenizer, max_length: int):
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


def _prepare_tokenizer(options: TrainOptions, train_corpus, run_dir: Path):
    tokenizer_dir = run_dir / "tokenizer"
    if (tokenizer_dir / "tokenizer.json").exists():
        _log(f"reusing the tokenizer in {tokenizer_dir}")
        return load_tokenizer(tokenizer_dir)
    started = time.monotonic()
    texts = [t for t in train_corpus.source + train_corpus.target if t.strip()]
    tokenizer = train_tokenizer(
        texts, options.vocab_size, kind=options.tokenizer, seed=options.seed
    )
    tokenizer.save(tokenizer_dir)
    _log(
        f"learned a joint {options.tokenizer} vocabulary of {tokenizer.vocab_size} "
        f"in {time.monotonic() - started:.1f}s -> {tokenizer_dir}"
    )
    return tokenizer


def _compile(model, config: TransformerConfig, options: TrainOptions) -> None:
    schedule = TransformerSchedule(
        config.d_model, config.warmup_steps, scale=options.learning_rate_scale
    )
    accumulation = (
        options.accumulation_steps if options.accumulation_steps > 1 else None
    )
    model.compile(
        optimizer=transformer_optimizer(
            schedule, gradient_accumulation_steps=accumulation
        ),
        loss=LabelSmoothedCrossEntropy(config.label_smoothing),
        metrics=[MaskedTokenAccuracy()],
    )


def _save_history(history: dict[str, list[float]], run_dir: Path) -> None:
    (run_dir / "history.json").write_text(json.dumps(history, indent=2) + "\n")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:  # Plotting is optional.
        return
    figure, axis = plt.subplots(figsize=(6, 4))
    for key in ("loss", "val_loss"):
        if history.get(key):
            axis.plot(range(1, len(history[key]) + 1), history[key], label=key)
    axis.set_xlabel("epoch")
    axis.set_ylabel("label-smoothed cross-entropy")
    axis.legend()
    figure.tight_layout()
    figure.savefig(run_dir / "training_curve.png", dpi=100)
    plt.close(figure)


def evaluate_split(translator: Translator, corpus, path: Path) -> BleuResult:
    """Translate a whole evaluation split (nothing dropped) and score it."""
    hypotheses = translator(corpus.source)
    path.write_text("\n".join(hypotheses) + "\n", encoding="utf-8")
    return corpus_scores(hypotheses, corpus.target)


def train(options: TrainOptions) -> TrainResult:
    """Run one training job described by `options`; see the module doc."""
    keras.utils.set_random_seed(options.seed)
    run_dir = Path(options.run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    splits = load_dataset(options.data)
    _log(
        f"data: {splits['train'].origin}: "
        + ", ".join(f"{name} {len(corpus)}" for name, corpus in splits.items())
    )
    tokenizer = _prepare_tokenizer(options, splits["train"], run_dir)
    train_source, train_target = _filter_training_pairs(
        splits["train"], tokenizer, options.max_length
    )
    config = TransformerConfig.preset(
        options.preset, **{"vocab_size": tokenizer.vocab_size, **options.overrides}
    )
    config.to_json(run_dir / "config.json")
    buckets = bucket_lengths(options.max_length)
    train_batches = BucketedBatches(
        train_source,
        train_target,
        tokens_per_batch=options.tokens_per_batch,
        buckets=buckets,
        seed=options.seed,
    )
    model = build_transformer(config)
    _compile(model, config, options)
    _log(
        f"model: preset {options.preset}, {model.count_params():,} parameters; "
        f"{len(train_batches)} batches/epoch, {train_batches.num_target_tokens():,} "
        f"target tokens/epoch, backend {keras.backend.backend()}"
    )
    limit = TrainingLimit(max_steps=options.max_steps, max_minutes=options.max_minutes)
    # Greedy and eager during training: for a small subset a few hundred
    # eager steps cost less than compiling the decode loop for each shape.
    # The test set below uses compiled beam search.
    dev_translator = Translator(
        model, tokenizer, beam_size=1, batch_size=options.test_batch_size, jit=False
    )
    callbacks = [
        limit,
        keras.callbacks.TerminateOnNaN(),
        StepCheckpoints(
            run_dir / "checkpoints",
            every=options.checkpoint_every,
            keep=options.keep_checkpoints,
        ),
        keras.callbacks.TensorBoard(log_dir=str(run_dir / "logs")),
    ]
    validation = None
    if "valid" in splits and len(splits["valid"]):
        valid = splits["valid"]
        valid_source, valid_target = _filter_training_pairs(
            valid, tokenizer, options.max_length
        )
        validation = BucketedBatches(
            valid_source,
            valid_target,
            tokens_per_batch=options.tokens_per_batch,
            buckets=buckets,
            shuffle=False,
        )
        if options.eval_every:
            subset = slice(0, options.dev_subset)
            callbacks.append(
                DevBleu(
                    dev_translator,
                    valid.source[subset],
                    valid.target[subset],
                    every=options.eval_every,
                    log_path=run_dir / "dev_bleu.jsonl",
                )
            )
    history = model.fit(
        train_batches.for_fit(),
        validation_data=None if validation is None else validation.for_fit(),
        epochs=options.epochs,
        callbacks=callbacks,
        # BucketedBatches shuffles itself, seeded by (seed, epoch).
        shuffle=False,
        verbose=2,
    )
    steps = int(keras.ops.convert_to_numpy(model.optimizer.iterations))
    train_seconds = limit.elapsed_seconds()
    model.save(run_dir / "model.keras")
    _save_history(history.history, run_dir)
    _log(f"trained {steps} steps in {train_seconds / 60:.1f} min -> {run_dir}")
    test = None
    if "test" in splits and len(splits["test"]):
        translator = Translator(
            model,
            tokenizer,
            beam_size=options.beam_size,
            batch_size=options.test_batch_size,
        )
        test = evaluate_split(translator, splits["test"], run_dir / "test.hyp.txt")
        _log(
            f"test set ({len(splits['test'])} sentences, beam {options.beam_size}): "
            f"{test}"
        )
        (run_dir / "test_scores.json").write_text(
            json.dumps(dataclasses.asdict(test), indent=2) + "\n"
        )
    return TrainResult(
        run_dir=run_dir,
        steps=steps,
        train_seconds=train_seconds,
        final_loss=float(history.history["loss"][-1]),
        test=test,
    )
