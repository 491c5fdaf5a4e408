"""Ensembles of Transformers at decode time: the mean of their log-probabilities.

`Ensemble([model_a, model_b, ...])` has the decoding interface of one
`Transformer` (`encode`, `cross_key_values`, `init_decode_cache`,
`decode_step`, `decode`, `attention_weights`, `config`, `variables`), so
`SequenceGenerator`, `Translator` and `ConstrainedGenerator` take it as they
take a model. At each step it gives the mean over its models of their
log-probabilities, as Marian and OpenNMT ensembles do (fairseq averages the
probabilities instead, the log of their arithmetic mean: on the parsing
recipe's two runs that parsed no differently, docs/decoding-options.md); the
search then takes the log_softmax of that, which renormalises the geometric
mean of the models' distributions.

The models must share the vocabularies (and so the tokenizer); their depth,
width and heads may differ. `open_ensemble` loads the members named on the
command line (`--ensemble`), each a run directory or a `.keras` file, and
checks that each was trained with the main run's tokenizer
(`check_same_tokenizer`).

Legend: B batch, S source length, T target length, D d_model, V vocabulary,
N rows (B, or B * k in beam search), H heads, L cache length, K head size.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Sequence
from pathlib import Path

import keras
from keras import ops

from keras_transformer.data.tokenizer import TOKENIZER_META_FILE, tokenizer_sha256
from keras_transformer.model import Transformer
from keras_transformer.run.directory import InferenceRun, RunDirectory


class Ensemble:
    """Several `Transformer`s decoding as one: each step's scores are the
    mean of the models' log-probabilities (module docstring).

    A plain object, not a `keras.Model`: it holds no weights of its own and
    is never trained or saved; it exposes what decoding reads of a model.
    Each method that returns one value per model for a `Transformer`
    (cross-attention keys/values, caches) returns a tuple with one such
    value per model, in order; nested tuples and lists of (N, H, L, K)
    tensors, so a search can grow and gather them as a model's.

    Args:
        models: one or more `Transformer`s with the same source and output
            vocabulary sizes. Depths, widths and heads may differ.

    Raises:
        ValueError: no model, or vocabulary sizes that differ (named).
        TypeError: something that is not a `Transformer`.

    Examples:
        >>> generator = SequenceGenerator(Ensemble([model_a, model_b]))
        >>> sequences, scores = generator(source_ids)
    """

    def __init__(self, models: Sequence[Transformer]):
        models = tuple(models)
        if not models:
            raise ValueError(
                "An ensemble needs at least one model. Received an empty list."
            )
        for index, model in enumerate(models):
            if not isinstance(model, Transformer):
                raise TypeError(
                    f"Ensemble members must be Transformers; model {index} is a "
                    f"{type(model).__name__}."
                )
        first = models[0].config
        for index, model in enumerate(models[1:], start=1):
            config = model.config
            differences = [
                f"{what} {mine} (model 0: {theirs})"
                for what, mine, theirs in (
                    ("source vocabulary size", config.vocab_size, first.vocab_size),
                    (
                        "output vocabulary size",
                        config.output_vocab_size,
                        first.output_vocab_size,
                    ),
                )
                if mine != theirs
            ]
            if differences:
                raise ValueError(
                    "The models of an ensemble must share their vocabularies (and "
                    f"tokenizer): model {index} ({model.name}) has "
                    + " and ".join(differences)
                    + f", model 0 is {models[0].name}."
                )
        self.models = models

    def __repr__(self) -> str:
        return f"Ensemble({[model.name for model in self.models]})"

    def __len__(self) -> int:
        return len(self.models)

    @property
    def config(self):
        """The first model's `TransformerConfig` (the vocabularies, and the
        layer count `Translator.generate` aligns with, are its)."""
        return self.models[0].config

    @property
    def variables(self) -> list:
        """Every model's variables, in model order, each once (a model given
        twice shares them): the inputs of a compiled search on JAX."""
        seen, variables = set(), []
        for model in self.models:
            for variable in model.variables:
                if id(variable) not in seen:
                    seen.add(id(variable))
                    variables.append(variable)
        return variables

    def encode(self, source_ids, training=None):
        """(B, S) ids -> (B, S, D_1 + ... + D_n): the models' encoder
        outputs side by side on the last axis.

        One tensor rather than a tuple, because a search treats the memory as
        a tensor (uncached beam search repeats it per beam with
        `ops.repeat`); `decode` and `cross_key_values` split it. Outputs of
        different dtypes (mixed precision in some models only) are stored
        as float32, which holds each exactly."""
        outputs = [model.encode(source_ids, training) for model in self.models]
        if len(outputs) == 1:
            return outputs[0]
        dtypes = {keras.backend.standardize_dtype(x.dtype) for x in outputs}
        if len(dtypes) > 1:
            outputs = [ops.cast(x, "float32") for x in outputs]
        return ops.concatenate(outputs, axis=-1)

    def _memories(self, memory) -> list:
        """`encode`'s output split back into each model's (B, S, D_i), in
        each model's own compute dtype."""
        if len(self.models) == 1:
            return [memory]
        widths = [model.config.d_model for model in self.models]
        bounds = [sum(widths[: i + 1]) for i in range(len(widths) - 1)]
        parts = ops.split(memory, bounds, axis=-1)
        return [
            ops.cast(part, model.compute_dtype)
            for part, model in zip(parts, self.models)
        ]

    def cross_key_values(self, memory) -> tuple:
        """Each model's cross-attention keys/values (`Transformer.
        cross_key_values`) of `encode`'s output: a tuple, one list per model."""
        return tuple(
            model.cross_key_values(part)
            for model, part in zip(self.models, self._memories(memory))
        )

    def init_decode_cache(self, batch_size: int, max_length: int) -> tuple:
        """Each model's empty self-attention caches, (N, H_i, L, K_i): a
        tuple, one list per model (the same L for all)."""
        return tuple(
            model.init_decode_cache(batch_size, max_length) for model in self.models
        )

    def decode_step(
        self, target_ids, step, cache, cross_key_values, source_ids, beams: int = 1
    ):
        """`Transformer.decode_step` of every model on its own caches.

        In place of logits it returns the mean over the models of each
        one's log_softmax, in float32: the average of the models'
        log-probabilities at each step. A search takes the log_softmax of
        whatever it is given, so it decodes with that mean renormalised,
        log of the normalised geometric mean of the models' distributions
        (log_softmax of log-probabilities is a no-op: an ensemble of one
        model, or of a model with itself, decodes as the model does).

        Returns:
            ((N, T_new, V) float32 mean of the models' log_softmax in place
            of logits, the tuple of updated caches).
        """
        log_probs, new_cache = [], []
        for model, model_cache, key_values in zip(self.models, cache, cross_key_values):
            logits, model_cache = model.decode_step(
                target_ids, step, model_cache, key_values, source_ids, beams
            )
            log_probs.append(_log_softmax(logits))
            new_cache.append(model_cache)
        return _mean(log_probs), tuple(new_cache)

    def decode(self, target_ids, memory, source_ids, training=None):
        """Every model's decoder on a whole target prefix: (B, T) ids,
        `encode`'s output, (B, S) source ids -> (B, T, V) float32 mean of
        the models' log_softmax (in place of logits)."""
        return _mean(
            [
                _log_softmax(model.decode(target_ids, part, source_ids, training))
                for model, part in zip(self.models, self._memories(memory))
            ]
        )

    def attention_weights(self, source_ids, target_ids) -> dict[str, list]:
        """Attention weights of every layer, as `Transformer.
        attention_weights`: the mean over the models of each layer's
        weights when all the models have the same numbers of layers and
        heads (as fairseq's ensembles average their attention; rows still
        sum to 1), else the first model's alone."""
        if not self._same_attention_shapes():
            return self.models[0].attention_weights(source_ids, target_ids)
        each = [
            model.attention_weights(source_ids, target_ids) for model in self.models
        ]
        return {
            name: [
                _mean([ops.cast(weights[name][layer], "float32") for weights in each])
                for layer in range(len(layers))
            ]
            for name, layers in each[0].items()
        }

    def _same_attention_shapes(self) -> bool:
        def shape(config):
            return (
                config.num_encoder_layers,
                config.num_decoder_layers,
                config.num_heads,
            )

        return len({shape(model.config) for model in self.models}) == 1


def _log_softmax(logits):
    return ops.log_softmax(ops.cast(logits, "float32"), axis=-1)


def _mean(tensors: list):
    total = tensors[0]
    for tensor in tensors[1:]:
        total = ops.add(total, tensor)
    return total if len(tensors) == 1 else ops.divide(total, float(len(tensors)))


def tokenizer_directory(path: str | os.PathLike | RunDirectory) -> Path:
    """The saved tokenizer of a run directory (its `tokenizer/`), or `path`
    itself when it is a tokenizer directory."""
    directory = path.path if isinstance(path, RunDirectory) else Path(path)
    if not (directory / TOKENIZER_META_FILE).is_file():
        directory = RunDirectory(directory).tokenizer_dir
    if not (directory / TOKENIZER_META_FILE).is_file():
        raise ValueError(
            f"{path} holds no tokenizer: expected a run directory (with "
            f"tokenizer/{TOKENIZER_META_FILE}) or a tokenizer directory."
        )
    return directory


def check_same_tokenizer(
    first: str | os.PathLike | RunDirectory,
    second: str | os.PathLike | RunDirectory,
) -> None:
    """Raise ValueError, naming both directories, unless two runs (or
    tokenizer directories) hold the same tokenizer (`data.tokenizer.
    tokenizer_sha256`, the identity the token store and a run's copy are
    checked by). Ids mean nothing across tokenizers, so an ensemble of their
    models would average unrelated tokens."""
    directories = [tokenizer_directory(first), tokenizer_directory(second)]
    digests = [tokenizer_sha256(directory) for directory in directories]
    if digests[0] != digests[1]:
        raise ValueError(
            "The models of an ensemble must share the tokenizer, but "
            f"{directories[0]} (sha256 {digests[0][:12]}) and {directories[1]} "
            f"(sha256 {digests[1][:12]}) differ: ensemble only models trained "
            "on the same prepared data (the same tokenizer)."
        )


def _targets(run: RunDirectory) -> str:
    """What a run's model writes: its task and, parsing, its linearization
    ("translation", "parsing (tags)")."""
    task = run.task or "translation"
    if task != "parsing":
        return task
    data = (run.manifest() or {}).get("identity", {}).get("data", {})
    return f"{task} ({data.get('linearization', 'tags')})"  # Left out when tags.


def check_same_targets(first: RunDirectory, second: RunDirectory) -> None:
    """Raise ValueError, naming both runs, unless they were trained to write
    the same kind of target: the same task and, for parsing, the same
    `--linearization` (one tokenizer can serve several, whose sequences
    follow different grammars: averaging them mixes two languages)."""
    mine, theirs = _targets(first), _targets(second)
    if mine != theirs:
        raise ValueError(
            "The models of an ensemble must write the same targets, but "
            f"{first.path} was trained for {mine} and {second.path} for {theirs}."
        )


# How far above a `.keras` file its run directory may be: RUN/model.keras,
# RUN/checkpoints/ckpt-N.keras.
_RUN_LEVELS = 2


def run_holding(path: Path) -> RunDirectory | None:
    """The run directory a `.keras` file sits in (up to `_RUN_LEVELS`
    levels above it): the nearest with a tokenizer; None if none."""
    for directory in list(path.resolve().parents)[:_RUN_LEVELS]:
        run = RunDirectory(directory)
        if (run.tokenizer_dir / TOKENIZER_META_FILE).is_file():
            return run
    return None


def open_ensemble(
    run: InferenceRun,
    specs: Sequence[str | os.PathLike],
    *,
    model: Transformer | None = None,
    quantize: str | None = None,
) -> Ensemble:
    """The main run's model and the members `specs` name, as an `Ensemble`.

    Each spec (an `--ensemble` argument) is:

    - a run directory: its model as `RunDirectory.open_for_inference` picks
      it (the final model, else the newest checkpoint) and its tokenizer;
    - a `.keras` file in a run (`RUN/model.keras`,
      `RUN/checkpoints/ckpt-N.keras`: the run is the nearest directory, up
      to two levels above the file, with a `tokenizer/`): that model, with
      that run's tokenizer;
    - a `.keras` file outside any run: that model, whose tokenizer cannot
      be checked; taken (with a warning) only if its vocabulary sizes are
      the main model's.

    Every member's tokenizer must be the main run's (`check_same_tokenizer`).

    Args:
        run: the main run, opened by `RunDirectory.open_for_inference`.
        specs: the members' paths.
        model: the main model to use in place of `run.model` (a quantized
            copy, say). Defaults to `run.model`.
        quantize: "int8" quantizes each member as `--quantize` does the
            main model (`quantization.quantize_model`; the main model is the
            caller's to quantize). Defaults to None: as they are.

    Raises:
        ValueError: a path that is none of the above (named), a tokenizer
            that differs (both files named), or vocabularies that differ.
    """
    main = run.model if model is None else model
    if main is None:
        raise ValueError(
            f"{run.run.path} was opened without its model "
            "(open_for_inference(load_model=False)); an ensemble needs it."
        )
    from keras_transformer.decoding.quantization import quantize_model

    members = [_open_member(run, main, Path(spec)) for spec in specs]
    for member in members:
        quantize_model(member, quantize)
    return Ensemble([main, *members])


def _open_member(run: InferenceRun, main: Transformer, path: Path) -> Transformer:
    expected = (
        "expected a run directory (with a tokenizer/ and a model.keras or "
        "checkpoints) or a .keras model file"
    )
    if path.is_dir():
        if not (RunDirectory(path).tokenizer_dir / TOKENIZER_META_FILE).is_file():
            raise ValueError(
                f"--ensemble {path} is a directory without a tokenizer: {expected}."
            )
        member_run = RunDirectory(path)
        opened = member_run.open_for_inference()
    elif path.is_file() and path.suffix == ".keras":
        member_run = run_holding(path)
        if member_run is None:
            return _outside_model(run, main, path)
        opened = member_run.open_for_inference(path)
    else:
        what = "does not exist" if not path.exists() else "is not a .keras file"
        raise ValueError(f"--ensemble {path} {what}: {expected}.")
    check_same_tokenizer(run.run, member_run)
    check_same_targets(run.run, member_run)
    return _transformer(opened.model, opened.model_path)


def _outside_model(run: InferenceRun, main: Transformer, path: Path) -> Transformer:
    """A `.keras` file in no run: taken only if its vocabularies match."""
    model = _transformer(RunDirectory(path.parent).load_model(path), path)
    mine = (model.config.vocab_size, model.config.output_vocab_size)
    theirs = (main.config.vocab_size, main.config.output_vocab_size)
    if mine != theirs:
        raise ValueError(
            f"--ensemble {path} is in no run directory, so its tokenizer cannot be "
            f"checked, and its vocabulary sizes (source, output) {mine} differ from "
            f"those of {run.model_path} {theirs}: it was not trained with the "
            f"tokenizer of {run.run.path}. Pass its run directory instead."
        )
    warnings.warn(
        f"--ensemble {path} is in no run directory: its tokenizer cannot be "
        f"checked; it is assumed to be that of {run.run.path} (the vocabulary "
        "sizes match). Pass its run directory to have it checked.",
        stacklevel=3,
    )
    return model


def _transformer(model, path: Path) -> Transformer:
    if not isinstance(model, Transformer):
        raise ValueError(
            f"--ensemble {path} holds a {type(model).__name__}, not a "
            "keras_transformer Transformer."
        )
    return model
