"""`TrainOptions`: every training setting, its default, range and help text.

The one place they live: `train()` takes a `TrainOptions`, and the CLI's
`train` flags are made from its fields (`tokens_per_batch` is
`--tokens-per-batch`), so defaults cannot drift apart. Light to import: the
command line reads it before Keras starts.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from keras_transformer.config import PRESETS
from keras_transformer.data.datasets import DatasetSpec
from keras_transformer.data.tokenizer import TOKENIZER_KINDS
from keras_transformer.search_settings import SearchSettings

PRECISIONS = ("float32", "mixed_bfloat16", "mixed_float16")
DISTRIBUTE_MODES = ("auto", "none", "mirrored", "multiworker")


# The fields that the tokenizer's vocabulary decides, not `--set`: the joint
# tokenizer gives source and target one vocabulary of --vocab-size pieces.
TOKENIZER_OWNED_FIELDS = ("vocab_size", "target_vocab_size")


def _option(
    default,
    help: str,
    *,
    minimum=None,
    maximum=None,
    strict=False,
    choices=None,
    flag=True,
):
    """A TrainOptions field with what the CLI and validation need.

    `strict`: the value must exceed `minimum` (a zero would mean no work);
    `maximum`: an inclusive upper bound.
    """
    metadata = {
        "help": help,
        "minimum": minimum,
        "maximum": maximum,
        "strict": strict,
        "choices": choices,
        "flag": flag,
    }
    if isinstance(default, dict | DatasetSpec):
        factory = type(default)
        return dataclasses.field(default_factory=factory, metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


@dataclasses.dataclass
class TrainOptions:
    """Settings of one training run (the model itself is `TransformerConfig`).

    Each field's help text, range and choices are in its metadata; the CLI
    flag is the field name with dashes (`tokens_per_batch` is
    `--tokens-per-batch`).
    """

    run_dir: str = _option(
        "runs/builtin-tiny",
        "directory of the run: created, resumed if it holds the same run, "
        "refused otherwise (see --overwrite)",
    )
    preset: str = _option("tiny", "model size (Table 3 presets)", choices=PRESETS)
    overrides: dict[str, Any] = _option({}, "TransformerConfig fields", flag=False)
    data: DatasetSpec = _option(DatasetSpec(), "the corpus", flag=False)
    tokenizer: str = _option(
        "sentencepiece", "joint subword tokenizer", choices=TOKENIZER_KINDS
    )
    vocab_size: int = _option(4000, "joint subword vocabulary to learn", minimum=8)
    tokens_per_batch: int = _option(
        2048, "padded target tokens per optimizer batch (all devices)", minimum=1
    )
    accumulation_steps: int = _option(
        1, "batches per optimizer update (gradient accumulation)", minimum=1
    )
    max_length: int = _option(
        128, "longer training pairs are dropped (and reported)", minimum=2
    )
    epochs: int = _option(1000, "stop after this many passes over the data", minimum=1)
    max_steps: int | None = _option(
        None, "stop after this many optimizer updates in all", minimum=1
    )
    max_minutes: float | None = _option(
        None,
        "stop after this much training time in this process",
        minimum=0,
        strict=True,
    )
    learning_rate_scale: float = _option(
        1.0, "multiplier of the paper's learning-rate schedule", minimum=0, strict=True
    )
    # Below 2**32: NumPy's and the backends' seeds are 32-bit.
    seed: int = _option(
        0,
        "seed of initialisation, dropout and shuffling",
        minimum=0,
        maximum=2**32 - 1,
    )
    eval_every: int = _option(
        500, "dev-subset BLEU every N updates (0: never)", minimum=0
    )
    dev_subset: int = _option(100, "dev sentences for that BLEU", minimum=1)
    checkpoint_every: int = _option(
        500, "checkpoint every N updates (0: only at the end)", minimum=0
    )
    keep_checkpoints: int = _option(5, "checkpoints to keep (the last K)", minimum=1)
    test_batch_size: int = _option(64, "sentences per decoding batch", minimum=1)
    beam_size: int = _option(
        SearchSettings().beam_size, "beam size of the final test score", minimum=1
    )
    distribute: str = _option(
        "auto", "data-parallel training (see README)", choices=DISTRIBUTE_MODES
    )
    precision: str = _option(
        "float32", "dtype policy; mixed_float16 adds loss scaling", choices=PRECISIONS
    )
    overwrite: bool = _option(
        False, "move an existing run directory aside and start afresh"
    )
    verbose: str = _option(
        "auto",
        "fit output: 1 a progress bar, 2 a line per epoch, 0 none; auto: 1 on a "
        "terminal, else 2",
        choices=("auto", "0", "1", "2"),
    )

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            _check_field(field, getattr(self, field.name))
        _check_overrides(self.overrides, self.vocab_size)
        if self.precision == "mixed_float16" and self.accumulation_steps > 1:
            raise ValueError(
                "--precision mixed_float16 with --accumulation-steps > 1 is not "
                "supported: a batch skipped for overflow would shift the "
                "updates. Use mixed_bfloat16, or no accumulation."
            )


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


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


def _check_field(field: dataclasses.Field, value: Any) -> None:
    meta = field.metadata
    minimum, maximum, choices = meta["minimum"], meta["maximum"], meta["choices"]
    where = f"{field.name} ({_flag(field.name)})"
    if choices is not None and value not in choices:
        raise ValueError(
            f"{where} must be one of {', '.join(map(str, choices))}. "
            f"Received: {value!r}"
        )
    if minimum is None or value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{where} must be a number. Received: {value!r}")
    if field.type in ("int", "int | None") and not isinstance(value, int):
        raise ValueError(f"{where} must be an integer. Received: {value!r}")
    # NaN compares false with every bound, so it needs its own check.
    if not math.isfinite(value):
        raise ValueError(f"{where} must be a finite number. Received: {value!r}")
    if value < minimum or (meta["strict"] and value == minimum):
        bound = f"> {minimum}" if meta["strict"] else f">= {minimum}"
        raise ValueError(f"{where} must be {bound}. Received: {value!r}")
    if maximum is not None and value > maximum:
        raise ValueError(
            f"{where} must be <= {_bound_text(maximum)}. Received: {value!r}"
        )


def _bound_text(maximum: int) -> str:
    """4294967295 -> '4294967295 (< 2**32)': the range as people know it."""
    if (maximum + 1) & maximum == 0:
        return f"{maximum} (< 2**{maximum.bit_length()})"
    return str(maximum)
