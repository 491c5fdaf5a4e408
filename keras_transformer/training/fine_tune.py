"""Fine-tuning a trained model (`train --init-from`), whole or by LoRA factors.

The one owner of what a fine-tune adds to `train`:

- `resolve_init`: `--init-from` as the trained model's config, weights file
  and tokenizer directory, from a run directory (its `model.keras`, else its
  newest checkpoint) or a preset directory; anything else is refused naming
  what each one holds. The new data is encoded with that tokenizer.
- `fine_tune_config`: the trained model's config with the `--set` fields a
  fine-tune may change (`FINE_TUNE_FIELDS`: dropout, label smoothing,
  warmup); `--tokenizer`/`--vocab-size` that disagree with it are refused.
- `enable_lora`: `enable_lora` (Keras's `Dense`, our `ScaledEmbedding`) on
  the chosen projections of every encoder and decoder block and on the
  embedding table (`--lora-targets`), the rank checked against each one;
  with `--lora-token-rows K` also the table's rows of the K pieces the new
  data uses most (`frequent_tokens`), trained in full;
  `freeze_all_but_lora` leaves only the factors trainable.

A LoRA layer's checkpoint state is `run.checkpoints`'s (`lora_state`): Keras
saves merged kernels only. The final model is `merged_model`: a plain
`Transformer` with the factors merged, so everything downstream is unchanged.

The rate: a fine-tune starts a fresh Adam (the trained run's moments are
not carried over, and a LoRA run's variables are new), under its own
schedule (`schedules.FineTuneSchedule`, chosen in `model_setup`): a short
linear warmup, while the second moments are estimates from a few batches,
to a peak ten times higher for LoRA than for full fine-tuning
(`options.FINE_TUNE_PEAKS`), then a linear decay to the last update. The
paper's schedule restarted at step 0 (`--fine-tune-schedule paper`) with a
trained model's own `warmup_steps` (4,000 for `base`) stays far below
those peaks for thousands of updates.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import keras
import numpy as np

from keras_transformer.config import TransformerConfig
from keras_transformer.data.tasks import task_tokenizer
from keras_transformer.data.text_files import sha256_file
from keras_transformer.data.token_pairs import TokenPairs
from keras_transformer.model import build_transformer
from keras_transformer.run import preset_files
from keras_transformer.run.checkpoints import (
    adapted_weight,
    lora_layers,
    lora_variables,
)
from keras_transformer.run.directory import RunDirectory, check_vocabulary
from keras_transformer.training.options import TrainOptions, lora_target_names

_RUN_HOLDS = (
    "a training run (manifest.json, config.json, tokenizer/, and model.keras "
    "or a checkpoint; keras-transformer train makes one)"
)
_PRESET_HOLDS = (
    f"a preset ({', '.join(preset_files.REQUIRED_FILES)} and "
    f"{preset_files.TOKENIZER_ASSETS}/; keras-transformer export --format preset "
    "makes one)"
)


@dataclasses.dataclass(frozen=True)
class InitModel:
    """The trained model a fine-tune starts from (`resolve_init`)."""

    path: Path
    kind: str  # "run" or "preset"
    config: TransformerConfig
    weights_path: Path
    tokenizer_dir: Path
    tokenizer_kind: str

    def identity(self) -> dict[str, Any]:
        """What a resume must find unchanged: the weights (by digest, so a
        trained run moved elsewhere still resumes; the tokenizer is in the
        data's fingerprint)."""
        return {"kind": self.kind, "weights_sha256": sha256_file(self.weights_path)}

    def weights(self) -> list[np.ndarray]:
        """The trained weights, in `Transformer.get_weights` order."""
        if self.kind == "run":
            model = RunDirectory(self.path).load_model(self.weights_path)
        else:
            model = build_transformer(self.config)
            try:
                model.load_weights(self.weights_path)
            except (OSError, ValueError) as error:
                raise ValueError(
                    f"--init-from {self.path}: {self.weights_path} does not load "
                    f"into the model of its config.json ({error})."
                ) from None
        return model.get_weights()


def resolve_init(init_from: str) -> InitModel:
    """`--init-from` as a run or a preset; FileNotFoundError or ValueError
    naming the flag, the path and what each kind of directory holds."""
    path = Path(init_from).expanduser()
    if not path.is_dir():
        raise FileNotFoundError(
            f"--init-from {path}: no such directory; expected {_RUN_HOLDS}, or "
            f"{_PRESET_HOLDS}."
        )
    try:
        if (path / "manifest.json").is_file():
            return _run_init(path)
        if (path / preset_files.METADATA_FILE).is_file():
            return _preset_init(path)
    except (OSError, ValueError) as error:
        raise ValueError(f"--init-from {path}: {error}") from None
    raise ValueError(f"--init-from {path} is neither {_RUN_HOLDS} nor {_PRESET_HOLDS}.")


def _run_init(path: Path) -> InitModel:
    run = RunDirectory(path)
    if not run.config_path.is_file():
        raise FileNotFoundError(f"{run.config_path} is missing: not a trained run.")
    config = run.load_config()
    weights_path = run.resolve_model_path()
    tokenizer = run.load_tokenizer()
    check_vocabulary(tokenizer, config.vocab_size, run.config_path, run)
    return InitModel(
        path, "run", config, weights_path, run.tokenizer_dir, tokenizer.kind
    )


def _preset_init(path: Path) -> InitModel:
    contents = preset_files.read_preset(path)
    return InitModel(
        path,
        "preset",
        contents.config,
        contents.weights_path,
        path / preset_files.TOKENIZER_ASSETS,
        contents.tokenizer.kind,
    )


def fine_tune_config(init: InitModel, options: TrainOptions) -> TransformerConfig:
    """The trained model's config with the fine-tune's `--set` (which
    `TrainOptions` limits to `FINE_TUNE_FIELDS`); refuses a `--tokenizer`,
    `--vocab-size` or `--max-length` that the trained model contradicts."""
    _check_tokenizer_flags(init, options)
    config = init.config
    if options.overrides:
        config = config.replace(**options.overrides)
    limit = config.max_position
    if config.position_encoding == "learned" and limit < options.max_length:
        raise ValueError(
            f"--max-length {options.max_length}: the model of --init-from "
            f"{init.path} has learned positions for {limit} tokens; use "
            f"--max-length {limit} or less."
        )
    return config


def _check_tokenizer_flags(init: InitModel, options: TrainOptions) -> None:
    """A fine-tune encodes with the trained model's tokenizer: a given
    `--tokenizer` or `--vocab-size` must be its (or the default)."""
    fields = dataclasses.fields(TrainOptions)
    vocab_default = next(f.default for f in fields if f.name == "vocab_size")
    given = {
        "--tokenizer": (
            options.tokenizer,
            (task_tokenizer(options.task), init.tokenizer_kind),
            init.tokenizer_kind,
        ),
        "--vocab-size": (
            options.vocab_size,
            (vocab_default, init.config.vocab_size),
            init.config.vocab_size,
        ),
    }
    for flag, (value, accepted, own) in given.items():
        if value not in accepted:
            raise ValueError(
                f"{flag} {value}: --init-from {init.path} encodes with its own "
                f"tokenizer ({init.tokenizer_dir}, {flag} {own}); drop {flag}."
            )


def load_init_weights(model: keras.Model, init: InitModel) -> None:
    """Set `model`'s weights to the trained ones, bit for bit."""
    model.set_weights(init.weights())


def target_layers(model: keras.Model, targets: str) -> list:
    """The layers `--lora-targets` names: the `Dense` projections in every
    encoder and decoder block, and with `embeddings` each embedding table
    (one when shared; tied, it is also the output layer) and an untied
    output projection."""
    names = lora_target_names(targets)
    attention = [n for n in ("query", "key", "value", "output") if n in names]
    chosen = []
    for block in [*model.encoder_blocks, *model.decoder_blocks]:
        layers = [block.self_attention]
        if hasattr(block, "cross_attention"):
            layers.append(block.cross_attention)
        for layer in layers:
            chosen += [getattr(layer, f"{name}_dense") for name in attention]
        if "feed_forward" in names:
            feed_forward = block.feed_forward
            chosen += [feed_forward.intermediate_dense, feed_forward.output_dense]
    if "embeddings" in names:
        chosen += vocabulary_layers(model)
    return chosen


def vocabulary_layers(model: keras.Model) -> list:
    """The layers with a row or column per token, the `embeddings` target:
    each embedding table (one when shared) and an untied output projection."""
    parts = model._parts
    layers = [parts.source_embedding]
    if parts.target_embedding is not parts.source_embedding:
        layers.append(parts.target_embedding)
    if parts.output_projection is not None:  # Untied.
        layers.append(parts.output_projection)
    return layers


def frequent_tokens(pairs: TokenPairs, count: int) -> np.ndarray:
    """The ids of the `count` pieces that occur most often in `pairs`, both
    sides (fewer when fewer occur; ties by id), in ascending order: the
    rows `--lora-token-rows` trains in full."""
    occurrences = np.zeros(pairs.vocab_size, np.int64)
    for side in ("source", "target"):
        tokens = pairs.tokens[side]
        # In blocks: a large store's ids are memory-mapped, not in memory.
        for start in range(0, len(tokens), _COUNT_BLOCK):
            block = np.asarray(tokens[start : start + _COUNT_BLOCK], np.int64)
            occurrences += np.bincount(block, minlength=pairs.vocab_size)
    ranked = np.argsort(-occurrences, kind="stable")[:count]
    return np.sort(ranked[occurrences[ranked] > 0])


_COUNT_BLOCK = 1 << 24


def enable_lora(
    model: keras.Model,
    rank: int,
    targets: str,
    alpha: float | None = None,
    embedding_rank: int | None = None,
    token_rows: Sequence[int] | None = None,
) -> list:
    """Enable LoRA on the target layers, of `embedding_rank` (default
    `rank`) on the vocabulary layers and `rank` on the others (checked
    first: at least 1 and at most each weight's smaller side), then freeze
    every other weight. Returns the layers. `alpha` is every layer's scale
    numerator (its update is alpha / its rank * A B; none: its rank).
    `token_rows`: ids whose rows each embedding table also trains in full
    (an untied output projection keeps its factors only)."""
    layers = target_layers(model, targets)
    vocabulary = {id(layer) for layer in vocabulary_layers(model)}
    ranks = []
    for layer in layers:
        own = id(layer) in vocabulary and embedding_rank is not None
        layer_rank, flag = (
            (embedding_rank, "--lora-embedding-rank") if own else (rank, "--lora-rank")
        )
        rows, columns = (int(d) for d in adapted_weight(layer).shape)
        if not 1 <= layer_rank <= min(rows, columns):
            raise ValueError(
                f"{flag} {layer_rank}: must be at least 1 and at most the "
                f"smaller side of every weight it adapts; {layer.path} is "
                f"{rows}x{columns} (at most {min(rows, columns)})."
            )
        ranks.append(layer_rank)
    for layer, layer_rank in zip(layers, ranks):
        # The tables (`ScaledEmbedding`); an untied output projection is a Dense.
        table = id(layer) in vocabulary and not isinstance(layer, keras.layers.Dense)
        if table and token_rows is not None:
            layer.enable_lora(layer_rank, lora_alpha=alpha, rows=token_rows)
        else:
            layer.enable_lora(layer_rank, lora_alpha=alpha)
    freeze_all_but_lora(model)
    return layers


def freeze_all_but_lora(model: keras.Model) -> None:
    """Only the LoRA factors stay trainable: norms, biases, the base kernels
    and tables are frozen (per variable, so the layers still run)."""
    factors = _factor_ids(model)
    for variable in model.weights:
        if id(variable) not in factors:
            variable.trainable = False


def merged_model(model: keras.Model, config: TransformerConfig) -> keras.Model:
    """A plain `Transformer` (uncompiled: a LoRA run's optimizer state is the
    factors') whose projection kernels are `model`'s with the factors merged,
    as Keras merges them when it saves a LoRA layer."""
    # The merged weight is base + (alpha / rank) A B.
    merged = {
        id(lora_variables(layer)[0]): adapted_weight(layer)
        for layer in lora_layers(model)
    }
    factors = _factor_ids(model)
    values = [
        np.asarray(keras.ops.convert_to_numpy(merged.get(id(variable), variable)))
        for variable in model.weights
        if id(variable) not in factors
    ]
    plain = build_transformer(config)
    plain.set_weights(values)
    return plain


def _factor_ids(model: keras.Model) -> set[int]:
    """The ids of the LoRA factor variables of `model`."""
    layers = lora_layers(model)
    return {id(factor) for layer in layers for factor in lora_variables(layer)[1:]}
