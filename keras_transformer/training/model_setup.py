"""The model of a training run: its configuration, built and compiled.

Compiled with the paper's optimizer, schedule and label-smoothed loss, under
the run's precision and distribution.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import keras

from keras_transformer.config import TransformerConfig
from keras_transformer.data.tasks import pointer_bracket_ids
from keras_transformer.losses import LabelSmoothedCrossEntropy
from keras_transformer.metrics import (
    MaskedTokenAccuracy,
    TokenCrossEntropy,
    TokenPerplexity,
)
from keras_transformer.model import build_transformer
from keras_transformer.schedules import (
    FineTuneSchedule,
    TransformerSchedule,
    transformer_optimizer,
)
from keras_transformer.training.distribution import DistributionPlan
from keras_transformer.training.options import (
    TrainOptions,
    fine_tune_peak,
    fine_tune_warmup,
)


def model_config(options: TrainOptions, tokenizer) -> TransformerConfig:
    """The preset with the overrides and the tokenizer's vocabulary size
    (`TrainOptions` refuses an override of it: the tokenizer owns it), and
    with `--word-pointer` the vocabulary's bracket ids.

    A tokenizer with a target vocabulary of its own (a treebank's tree
    symbols, `WordTokenizer.target_size`) gives the decoder its own
    embedding table of that size, tied to the output layer: the logits
    span the symbols a target can hold."""
    fields = {**options.overrides, "vocab_size": tokenizer.vocab_size}
    target_size = getattr(tokenizer, "target_size", None)
    if target_size is not None:
        fields.update(share_embeddings=False, target_vocab_size=target_size)
    if options.word_pointer:
        fields["pointer_bracket_ids"] = pointer_bracket_ids(tokenizer.target_vocabulary)
    return TransformerConfig.preset(options.preset, **fields)


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
    paper = paper_compile_arguments(
        config,
        options.learning_rate_scale,
        options.accumulation_steps,
        schedule=fine_tune_schedule(options),
    )
    model.compile(**{**paper, **compile_options})


def fine_tune_schedule(options: TrainOptions) -> FineTuneSchedule | None:
    """A fine-tune's own schedule (`--fine-tune-schedule`), or None where
    the paper's applies: training from scratch, or `paper` asked for."""
    if options.init_from is None or options.fine_tune_schedule == "paper":
        return None
    linear = options.fine_tune_schedule == "linear"
    return FineTuneSchedule(
        fine_tune_peak(options),
        fine_tune_warmup(options),
        options.max_steps if linear else None,
    )


def paper_compile_arguments(
    config: TransformerConfig,
    learning_rate_scale: float = 1.0,
    accumulation_steps: int = 1,
    schedule: keras.optimizers.schedules.LearningRateSchedule | None = None,
) -> dict[str, Any]:
    """The paper's `optimizer` (Adam(0.9, 0.98, 1e-9) with the warmup
    schedule, or `schedule` in its place), label-smoothed `loss` and the
    per-token `metrics`, as `model.compile` arguments."""
    if schedule is None:
        schedule = TransformerSchedule(
            config.d_model, config.warmup_steps, scale=learning_rate_scale
        )
    return {
        "optimizer": transformer_optimizer(
            schedule, gradient_accumulation_steps=accumulation_steps
        ),
        "loss": LabelSmoothedCrossEntropy(config.label_smoothing),
        "metrics": [
            TokenCrossEntropy(config.label_smoothing),
            TokenPerplexity(),
            MaskedTokenAccuracy(),
        ],
    }


def build_model(
    options: TrainOptions,
    config: TransformerConfig,
    plan: DistributionPlan | None = None,
    before_compile: Callable[[keras.Model], None] | None = None,
) -> keras.Model:
    """Build and compile the model under the options' precision and the
    plan's distribution (set up the plan first). `before_compile(model)`
    runs in between (a fine-tune loads its weights and enables LoRA there,
    so the optimizer sees the variables that train)."""
    plan = plan or DistributionPlan("none")
    with dtype_policy(options.precision), plan.scope():
        model = build_transformer(config)
        if before_compile is not None:
            before_compile(model)
        compile_model(model, config, options)
    return model


def preset_model(name: str, vocab_size: int) -> keras.Model:
    """The `name` preset's model at `vocab_size`, built but not compiled (what
    `keras-transformer summary` counts and prints)."""
    return build_transformer(TransformerConfig.preset(name, vocab_size=vocab_size))


@contextlib.contextmanager
def dtype_policy(name: str):
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy(name)
    try:
        yield
    finally:
        keras.config.set_dtype_policy(previous)
