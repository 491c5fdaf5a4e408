"""`TrainOptions`: every setting of `train`, its default, range and help text.

The one place they live: `train()` takes a `TrainOptions`, and the CLI's
flags are made from its fields (`tokens_per_batch` is `--tokens-per-batch`),
so defaults cannot drift apart. The settings it shares with `prepare` (the
tokenizer, its vocabulary, the length filter) are made by
`data.store_options`, their one owner. Light to import: the command line
reads it before Keras starts.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from keras_transformer.config import PRESETS
from keras_transformer.data.datasets import DatasetSpec
from keras_transformer.data.store_options import (
    max_length_setting,
    tokenizer_setting,
    vocab_size_setting,
)
from keras_transformer.data.tasks import (
    PARSING_TOKENIZER,
    TASKS,
    task_tokenizer,
)
from keras_transformer.decoding.settings import SearchSettings, task_search
from keras_transformer.utils.setting_fields import check_setting, setting

PRECISIONS = ("float32", "mixed_bfloat16", "mixed_float16")
DISTRIBUTE_MODES = ("auto", "none", "mirrored", "multiworker")


# The fields that the tokenizer's vocabulary decides, not `--set`: the joint
# tokenizer gives source and target one vocabulary of --vocab-size pieces.
TOKENIZER_OWNED_FIELDS = ("vocab_size", "target_vocab_size")

# What a fine-tune (`--init-from`) may still `--set`: the trained model fixes
# every size; these change training only (as `TransformerSeq2SeqLM` allows).
FINE_TUNE_FIELDS = (
    "dropout_rate",
    "attention_dropout_rate",
    "relu_dropout_rate",
    "label_smoothing",
    "warmup_steps",
)
# What `--lora-targets` chooses from (`training.fine_tune.target_layers`).
# `embeddings` is the tied table (also the output layer): without it LoRA
# reached 50% of full fine-tuning's gain on a new domain, with it 65%
# (docs/benchmarks-fine-tuning.md).
LORA_TARGETS = ("query", "key", "value", "output", "feed_forward", "embeddings")
# `--fine-tune-schedule` (`schedules.FineTuneSchedule`, or the paper's).
FINE_TUNE_SCHEDULES = ("linear", "constant", "paper")
# The peak rates a fine-tune uses without --learning-rate, from
# benchmarks/fine_tune.py's sweep (docs/benchmarks-fine-tuning.md): LoRA
# needs a far higher rate than full fine-tuning to learn as much, and
# higher rates learn more of a new domain and forget more of the old
# (docs/fine-tuning.md): these sit in the middle of what was measured.
FINE_TUNE_PEAKS = {"full": 3e-4, "lora": 3e-3}
# Warmup: this share of --max-steps (or FINE_TUNE_WARMUP_UPDATES without it),
# unless --set warmup_steps=N says how many.
FINE_TUNE_WARMUP_SHARE = 0.05
FINE_TUNE_WARMUP_UPDATES = 100


@dataclasses.dataclass
class TrainOptions:
    """Settings of one training run (the model itself is `TransformerConfig`).

    Each field's help text, range and choices are in its metadata; the CLI
    flag is the field name with dashes (`tokens_per_batch` is
    `--tokens-per-batch`).
    """

    run_dir: str = setting(
        "runs/builtin-tiny",
        "directory of the run: created, resumed if it holds the same run, "
        "refused otherwise (see --overwrite)",
    )
    preset: str = setting(
        "tiny", "model size (Table 3 presets; parsing: Table 4's)", choices=PRESETS
    )
    task: str = setting(
        "translation",
        "what to learn: translation (text pairs) or parsing (a treebank: "
        "--train-trees, docs/parsing.md)",
        choices=TASKS,
    )
    overrides: dict[str, Any] = setting({}, "TransformerConfig fields", flag=False)
    data: DatasetSpec = setting(DatasetSpec(), "the corpus", flag=False)
    # None: the task's (sentencepiece; words for parsing).
    tokenizer: str | None = tokenizer_setting(task_default=True)
    vocab_size: int = vocab_size_setting()
    tokens_per_batch: int = setting(
        2048, "padded target tokens per optimizer batch (all devices)", minimum=1
    )
    accumulation_steps: int = setting(
        1, "batches per optimizer update (gradient accumulation)", minimum=1
    )
    max_length: int = max_length_setting()
    epochs: int = setting(1000, "stop after this many passes over the data", minimum=1)
    max_steps: int | None = setting(
        None, "stop after this many optimizer updates in all", minimum=1
    )
    max_minutes: float | None = setting(
        None,
        "stop after this much training time in this process",
        minimum=0,
        strict=True,
    )
    learning_rate_scale: float = setting(
        1.0, "multiplier of the paper's learning-rate schedule", minimum=0, strict=True
    )
    # Below 2**32: NumPy's and the backends' seeds are 32-bit.
    seed: int = setting(
        0,
        "seed of initialisation, dropout and shuffling",
        minimum=0,
        maximum=2**32 - 1,
    )
    eval_every: int = setting(
        500, "dev-subset BLEU every N updates (0: never)", minimum=0
    )
    dev_subset: int = setting(100, "dev sentences for that BLEU", minimum=1)
    checkpoint_every: int = setting(
        500, "checkpoint every N updates (0: only at the end)", minimum=0
    )
    keep_checkpoints: int = setting(5, "checkpoints to keep (the last K)", minimum=1)
    test_batch_size: int = setting(64, "sentences per decoding batch", minimum=1)
    beam_size: int | None = setting(
        None,
        f"beam size of the final test score (none: the task's, "
        f"{SearchSettings().beam_size}; parsing {task_search('parsing').beam_size})",
        minimum=1,
    )
    alpha: float | None = setting(
        None,
        f"length penalty exponent of the final test score (none: the task's, "
        f"{SearchSettings().alpha}; parsing {task_search('parsing').alpha})",
        minimum=0.0,
    )
    distribute: str = setting(
        "auto", "data-parallel training (docs/distributed.md)", choices=DISTRIBUTE_MODES
    )
    precision: str = setting(
        "float32", "dtype policy; mixed_float16 adds loss scaling", choices=PRECISIONS
    )
    overwrite: bool = setting(
        False, "move an existing run directory aside and start afresh"
    )
    init_from: str | None = setting(
        None,
        "fine-tune: start from this trained run directory or preset directory "
        "(its sizes, weights and tokenizer; the data is encoded with that "
        "tokenizer). A fresh Adam starts --fine-tune-schedule at step 0: new "
        "optimizer moments need small first steps again",
    )
    fine_tune_schedule: str = setting(
        "linear",
        "with --init-from: linear warmup over 5 percent of --max-steps (--set "
        "warmup_steps=N to choose), then a linear decay to the last update "
        "(linear; constant without --max-steps), or a constant rate (constant), "
        "both peaking at --learning-rate; or the paper's schedule restarted at "
        "step 0 (paper)",
        choices=FINE_TUNE_SCHEDULES,
    )
    learning_rate: float | None = setting(
        None,
        "with --init-from: the fine-tuning schedule's peak learning rate; "
        f"none: {FINE_TUNE_PEAKS['full']:g} for full fine-tuning, "
        f"{FINE_TUNE_PEAKS['lora']:g} with --lora-rank",
        minimum=0,
        strict=True,
    )
    lora_rank: int | None = setting(
        None,
        "with --init-from: train only rank-R LoRA factors of the chosen "
        "weights (norms, biases frozen); the saved model has "
        "them merged. None: full fine-tuning",
        minimum=1,
    )
    lora_alpha: float | None = setting(
        None,
        "LoRA scale numerator, every target's: its update is (alpha / its rank) "
        "* A @ B; none: its rank (a scale of 1)",
        minimum=0,
        strict=True,
    )
    lora_targets: str = setting(
        ",".join(LORA_TARGETS),
        "with --lora-rank: comma list of the projections to adapt, from "
        + ",".join(LORA_TARGETS)
        + " (attention query/key/value/output, the feed-forward's two, the "
        "embedding table and output projection)",
    )
    lora_embedding_rank: int | None = setting(
        None,
        "with --lora-rank and the embeddings target: the rank of the embedding "
        "table's (and an untied output projection's) factors, as PEFT's "
        "rank_pattern sets one module's: a new domain's words move many of "
        "the table's rows, which a low-rank update follows only in part. "
        "None: --lora-rank",
        minimum=1,
    )
    lora_token_rows: int | None = setting(
        None,
        "with --lora-rank and the embeddings target: also train in full the "
        "embedding table's rows of the K pieces most frequent in the training "
        "data (both sides), as PEFT's trainable tokens: the words a new domain "
        "uses most need rows of their own, which a low-rank update of the "
        "whole table gives them only in part (docs/fine-tuning.md). Each row "
        "is d_model parameters. None: no row in full",
        minimum=1,
    )
    word_pointer: bool = setting(
        False,
        "--task parsing: add to each decoder position the encoder state of "
        "its current word, the one its next tag is for (Liu, Zhu & Shi "
        "2018's deterministic attention; docs/parsing.md); with "
        "--linearization tags or xx",
    )
    verbose: str = setting(
        "auto",
        "fit output: 1 a progress bar, 2 a line per epoch, 0 none; auto: 1 on a "
        "terminal, else 2",
        choices=("auto", "0", "1", "2"),
    )

    def __post_init__(self) -> None:
        _check_fine_tune(self)  # Before the task fills in its tokenizer.
        _fill_task_defaults(self)
        for field in dataclasses.fields(self):
            check_setting(field, getattr(self, field.name))
        _check_task(self)
        _check_overrides(self.overrides, self.vocab_size)
        if self.init_from is None:  # A fine-tune's positions are the model's.
            _check_positions(self.preset, self.overrides, self.max_length)
        if self.precision == "mixed_float16" and self.accumulation_steps > 1:
            raise ValueError(
                "--precision mixed_float16 with --accumulation-steps > 1 is not "
                "supported: a batch skipped for overflow would shift the "
                "updates. Use mixed_bfloat16, or no accumulation."
            )


def lora_target_names(text: str) -> tuple[str, ...]:
    """`--lora-targets` as names, refused when empty, repeated or unknown."""
    names = tuple(name.strip() for name in str(text).split(","))
    unknown = [name for name in names if name not in LORA_TARGETS]
    if unknown or len(set(names)) != len(names):
        raise ValueError(
            f"--lora-targets {text}: expected a comma list of distinct names "
            f"from {','.join(LORA_TARGETS)}."
        )
    return names


_FINE_TUNE_ONLY = (
    "lora_rank",
    "lora_alpha",
    "lora_targets",
    "lora_embedding_rank",
    "lora_token_rows",
    "fine_tune_schedule",
    "learning_rate",
)


def _check_fine_tune_rate(options: TrainOptions) -> None:
    """One knob for a fine-tune's rate: --learning-rate for its own
    schedule, --learning-rate-scale for the paper's."""
    if options.fine_tune_schedule == "paper":
        if options.learning_rate is not None:
            raise ValueError(
                f"--learning-rate {options.learning_rate:g} is the peak of the "
                "fine-tuning schedule; --fine-tune-schedule paper is scaled by "
                "--learning-rate-scale instead."
            )
    elif options.learning_rate_scale != 1.0:
        raise ValueError(
            f"--learning-rate-scale {options.learning_rate_scale:g} multiplies the "
            "paper's schedule; a fine-tune's "
            f"--fine-tune-schedule {options.fine_tune_schedule} peaks at "
            "--learning-rate: set that instead (or --fine-tune-schedule paper)."
        )


def fine_tune_peak(options: TrainOptions) -> float:
    """The fine-tuning schedule's peak: --learning-rate, else the default
    for LoRA or full fine-tuning (`FINE_TUNE_PEAKS`)."""
    if options.learning_rate is not None:
        return options.learning_rate
    return FINE_TUNE_PEAKS["full" if options.lora_rank is None else "lora"]


def fine_tune_warmup(options: TrainOptions) -> int:
    """Warmup updates of the fine-tuning schedule: --set warmup_steps=N, else
    `FINE_TUNE_WARMUP_SHARE` of --max-steps (at least 1), else
    `FINE_TUNE_WARMUP_UPDATES`. The trained model's own warmup_steps (the
    paper's 4,000) is not used: that is a whole training run's warmup."""
    if "warmup_steps" in options.overrides:
        warmup = int(options.overrides["warmup_steps"])
    elif options.max_steps is None:
        warmup = FINE_TUNE_WARMUP_UPDATES
    else:
        warmup = max(1, round(FINE_TUNE_WARMUP_SHARE * options.max_steps))
    return warmup if options.max_steps is None else min(warmup, options.max_steps)


_LORA_ONLY = ("lora_alpha", "lora_targets", "lora_embedding_rank", "lora_token_rows")


def _check_table_flags(options: TrainOptions) -> None:
    """The embedding table's own LoRA flags, refused when the targets leave
    the table out."""
    table_flags = {
        "--lora-embedding-rank": (options.lora_embedding_rank, "rank"),
        "--lora-token-rows": (options.lora_token_rows, "rows trained in full"),
    }
    for flag, (value, what) in table_flags.items():
        if value is not None:
            raise ValueError(
                f"{flag} {value} sets the embedding table's {what}, but "
                f"--lora-targets {options.lora_targets} leaves the table out: "
                f"add embeddings to --lora-targets, or drop {flag}."
            )


def _check_fine_tune(options: TrainOptions) -> None:
    """`--init-from` takes the model's sizes and tokenizer from the trained
    model: refuse the flags that would choose them, and LoRA without it."""
    lora_target_names(options.lora_targets)
    defaults = {f.name: f.default for f in dataclasses.fields(TrainOptions)}
    if options.init_from is None:
        for name in _FINE_TUNE_ONLY:
            if getattr(options, name) != defaults[name]:
                flag = "--" + name.replace("_", "-")
                raise ValueError(
                    f"{flag} fine-tunes a trained model: add --init-from RUN_DIR "
                    "(or a preset directory) to say which."
                )
        return
    _check_fine_tune_rate(options)
    if options.lora_rank is None:
        for name in _LORA_ONLY:
            if getattr(options, name) != defaults[name]:
                flag = "--" + name.replace("_", "-")
                raise ValueError(f"{flag} applies to LoRA: add --lora-rank R.")
    elif "embeddings" not in lora_target_names(options.lora_targets):
        _check_table_flags(options)
    # --tokenizer and --vocab-size are checked against the trained model's
    # (`training.fine_tune`): a store's values come back through `replace`.
    if options.preset != defaults["preset"]:
        raise ValueError(
            f"--preset {options.preset}: with --init-from {options.init_from} "
            "the model's sizes are the trained model's; drop --preset."
        )
    sizes = sorted(set(options.overrides) - set(FINE_TUNE_FIELDS))
    if sizes:
        raise ValueError(
            f"--set {sizes[0]}={options.overrides[sizes[0]]}: with --init-from "
            f"{options.init_from} the model is the trained one, whose sizes "
            f"cannot change. A fine-tune may set: {', '.join(FINE_TUNE_FIELDS)}."
        )


def _fill_task_defaults(options: TrainOptions) -> None:
    """The tokenizer and final search the task decides when none is given."""
    if options.task not in TASKS:
        return  # Refused with the list of tasks by its own setting check.
    if options.tokenizer is None:
        options.tokenizer = task_tokenizer(options.task)
    if options.beam_size is None:
        options.beam_size = task_search(options.task).beam_size
    if options.alpha is None:
        options.alpha = task_search(options.task).alpha


def _check_task(options: TrainOptions) -> None:
    """Refuse data or a tokenizer that the task cannot use."""
    parsing = options.task == "parsing"
    treebank = options.data.name == "treebank"
    if parsing and not treebank:
        raise ValueError(
            "--task parsing learns from a treebank: give --train-trees (and "
            f"--valid-trees, --test-trees), not --dataset {options.data.name}."
        )
    if treebank and not parsing:
        raise ValueError("--train-trees is the data of --task parsing: add it.")
    if parsing and options.tokenizer != PARSING_TOKENIZER:
        raise ValueError(
            f"--task parsing needs --tokenizer {PARSING_TOKENIZER} (one id per "
            "word and per tree symbol; subword pieces would split the "
            f"brackets). Received: --tokenizer {options.tokenizer}."
        )
    if options.data.target_vocabulary and options.overrides.get("share_embeddings"):
        raise ValueError(
            "--set share_embeddings=true: a treebank's targets (tree symbols "
            f"only, --linearization {options.data.linearization}) have a "
            "vocabulary of their own, and the decoder an embedding table of "
            "their size (training/model_setup.py); drop the --set."
        )
    if options.word_pointer:
        _check_word_pointer(options)


def _check_word_pointer(options: TrainOptions) -> None:
    if options.task != "parsing":
        raise ValueError(
            "--word-pointer follows the words of a parse (--task parsing); "
            f"this run's task is {options.task}."
        )
    if options.data.with_words:
        raise ValueError(
            "--word-pointer replaces the words in the targets: use it with "
            "--linearization tags or xx, not tags+words (a copy would move "
            "the pointer as a tag does)."
        )
    if options.init_from is not None:
        raise ValueError(
            "--word-pointer with --init-from: a fine-tune keeps its model's "
            "layers; the pointer comes from the run it starts from."
        )


def _check_positions(preset: str, overrides: dict[str, Any], max_length: int) -> None:
    """Refuse a `max_position` that has no effect (sinusoidal positions have
    no limit) or that the training sequences would overrun (learned ones)."""
    if preset not in PRESETS:
        return  # Refused with the list of presets by its own setting check.
    encoding = overrides.get("position_encoding", PRESETS[preset].position_encoding)
    limit = overrides.get("max_position", PRESETS[preset].max_position)
    if encoding != "learned":
        if "max_position" in overrides:
            raise ValueError(
                f"--set max_position={limit} has no effect: it bounds learned "
                f"positions only, and this model's are {encoding} (no length "
                "limit). Drop it, or add --set position_encoding=learned."
            )
        return
    if isinstance(limit, int) and limit < max_length:
        named = (
            f"--set max_position={limit}"
            if "max_position" in overrides
            else f"max_position={limit} (the {preset} preset's)"
        )
        raise ValueError(
            f"{named}: learned positions cover {limit} tokens, "
            f"but training sequences reach --max-length {max_length}. Use "
            f"max_position >= {max_length}; translating needs room for the "
            "longest source + --max-extra-length as well."
        )


def _check_overrides(overrides: dict[str, Any], vocab_size: int) -> None:
    """Refuse `--set` of a value the tokenizer decides (one owner)."""
    for name in TOKENIZER_OWNED_FIELDS:
        if overrides.get(name) is not None:
            raise ValueError(
                f"--set {name}={overrides[name]} (overrides[{name!r}]): the "
                "tokenizer decides the vocabulary size, one joint vocabulary "
                f"for source and target; set --vocab-size (vocab_size="
                f"{vocab_size} now) instead, and drop the --set."
            )
    if overrides.get("pointer_bracket_ids") is not None:
        raise ValueError(
            "--set pointer_bracket_ids: the tokenizer's vocabulary decides "
            "which ids are brackets; pass --word-pointer instead."
        )
