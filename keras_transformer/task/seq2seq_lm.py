"""`TransformerSeq2SeqLM`: strings to strings the Keras way: preset, fit, generate.

The task role of keras-hub's Seq2SeqLM over this package's parts: the
backbone is the `Transformer`, the preprocessor `TransformerPreprocessor`
(the token-budget batches of `train`), `generate` the verified search of
`Translator`, and a preset directory keras-hub's layout (`run.preset_files`).
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import keras

from keras_transformer.config import PRESETS, TransformerConfig
from keras_transformer.data.tokenizer import (
    SubwordTokenizer,
    load_tokenizer,
    train_tokenizer,
)
from keras_transformer.decoding.sampling import SamplingSettings
from keras_transformer.decoding.settings import SearchSettings
from keras_transformer.decoding.translator import Translator
from keras_transformer.model import TokenLossLogs, build_transformer
from keras_transformer.run import preset_files
from keras_transformer.task.preprocessor import TransformerPreprocessor
from keras_transformer.training.model_setup import paper_compile_arguments
from keras_transformer.training.options import TrainOptions

_INPUTS = ("source_ids", "target_ids")
_PREPROCESSOR_FIELDS = ("max_length", "tokens_per_batch", "seed")
_SEARCH_FIELDS = tuple(SearchSettings().to_dict())
# What a trained preset may change: rates of training, not weight shapes.
_TRAINING_FIELDS = (
    "dropout_rate",
    "attention_dropout_rate",
    "relu_dropout_rate",
    "label_smoothing",
    "warmup_steps",
)


@keras.saving.register_keras_serializable(package="keras_transformer")
class TransformerSeq2SeqLM(TokenLossLogs, keras.Model):
    """A `Transformer` with its tokenizer and search: text in, text out.

    Args:
        backbone: the `Transformer`.
        preprocessor: a `TransformerPreprocessor` (holds the tokenizer);
            needed by `fit` on texts and by `generate`.
        search: the `SearchSettings` of `generate`. Defaults to the
            paper's (beam 4, alpha 0.6, source + 50).
        training_data: where the weights were trained, for the preset's
            `metadata.json`.

    Examples:
        >>> lm = TransformerSeq2SeqLM.from_preset("tiny", texts=sources + targets)
        >>> lm.fit(x=(sources, targets), epochs=5)  # Compiled with the paper's.
        >>> lm.generate(["The dog sleeps."], beam_size=1)
        >>> lm.save_to_preset("presets/my-model")
    """

    def __init__(
        self,
        backbone: keras.Model,
        preprocessor: TransformerPreprocessor | None = None,
        search: SearchSettings | None = None,
        training_data: str | None = None,
        *,
        compile: bool = True,
        **kwargs: Any,
    ):
        inputs = {
            name: keras.Input(shape=(None,), dtype="int32", name=name)
            for name in _INPUTS
        }
        super().__init__(inputs=inputs, outputs=backbone(inputs), **kwargs)
        self.backbone = backbone
        self.preprocessor = preprocessor
        self.search_settings = search or SearchSettings()
        self.training_data = training_data
        self._translators: dict[tuple, Translator] = {}
        if compile:  # As keras-hub's tasks: fit() works at once; compile() replaces it.
            self.compile()

    @property
    def tokenizer(self) -> SubwordTokenizer | None:
        return None if self.preprocessor is None else self.preprocessor.tokenizer

    # -- presets -----------------------------------------------------------

    @classmethod
    def from_preset(
        cls,
        preset: str | os.PathLike,
        *,
        tokenizer: SubwordTokenizer | str | os.PathLike | None = None,
        texts: Sequence[str] | None = None,
        vocab_size: int | None = None,
        load_weights: bool = True,
        **overrides: Any,
    ) -> TransformerSeq2SeqLM:
        """A model from a preset directory, or an untrained one of a paper
        configuration (`tiny`, `small`, `base`, `big`).

        For a configuration name the tokenizer is `tokenizer` (a trained
        `SubwordTokenizer` or the directory it was saved to) or one learned
        here from `texts` (both languages' sentences) with `vocab_size`
        pieces (default: `train`'s). `overrides` may name
        `TransformerConfig` fields (a configuration name only; a trained
        preset takes its dropout rates, label smoothing and warmup),
        `SearchSettings` fields (`beam_size=1`) and the preprocessor's
        `max_length`, `tokens_per_batch` and `seed`.
        """
        name = os.fspath(preset)
        if name in PRESETS and not Path(name).is_dir():
            return cls._from_configuration(
                name, tokenizer, texts, vocab_size, overrides
            )
        given = (("tokenizer", tokenizer), ("texts", texts), ("vocab_size", vocab_size))
        for argument, value in given:
            if value is not None:
                raise ValueError(
                    f"{argument} is for a configuration name ({', '.join(PRESETS)}); "
                    f"the preset {name} brings its own tokenizer."
                )
        contents = preset_files.read_preset(name)
        model_changes, preprocessing, search = _split_overrides(
            overrides, _TRAINING_FIELDS, f"the trained preset {name}"
        )
        config = contents.config.replace(**model_changes) if model_changes else None
        backbone = build_transformer(config or contents.config)
        if load_weights:
            preset_files.load_weights(backbone, contents)
        return cls(
            backbone,
            TransformerPreprocessor(
                contents.tokenizer, **{**contents.preprocessor, **preprocessing}
            ),
            _preset_search(contents).replace(**search),
            training_data=contents.metadata.get("training_data"),
        )

    @classmethod
    def _from_configuration(cls, name, tokenizer, texts, vocab_size, overrides):
        config_fields = tuple(TransformerConfig.preset(name).to_dict())
        model_changes, preprocessing, search = _split_overrides(
            overrides, config_fields, f"the configuration {name!r}"
        )
        tokenizer = _resolve_tokenizer(tokenizer, texts, vocab_size)
        config = TransformerConfig.preset(
            name, **{**model_changes, "vocab_size": tokenizer.vocab_size}
        )
        return cls(
            build_transformer(config),
            TransformerPreprocessor(tokenizer, **preprocessing),
            SearchSettings().replace(**search),
        )

    def save_to_preset(self, directory: str | os.PathLike, *, overwrite: bool = False):
        """Write a preset (keras-hub's layout) that `from_preset` loads on
        any backend: whole or not at all; an existing non-empty directory
        only with `overwrite` (moved aside, not deleted)."""
        self._need_preprocessor("save_to_preset")
        return preset_files.write_preset(
            directory,
            self.backbone,
            self.tokenizer,
            self.preprocessor.get_config(),
            self.search_settings.to_dict(),
            training_data=self.training_data,
            overwrite=overwrite,
        )

    # -- Hugging Face --------------------------------------------------------

    @classmethod
    def from_huggingface(
        cls, directory: str | os.PathLike, **search: Any
    ) -> TransformerSeq2SeqLM:
        """A MarianMT checkpoint (`transformers`' format: the OPUS-MT
        family) from a directory on this machine (nothing is downloaded),
        converted exactly (`decoding.opening.open_huggingface`); `search` changes
        its search settings (`beam_size=1`).

        Examples:
            >>> lm = TransformerSeq2SeqLM.from_huggingface("opus-mt-en-de")
            >>> lm.generate("The dog sleeps.")
        """
        from keras_transformer.decoding.opening import open_huggingface

        backbone, checkpoint = open_huggingface(directory)
        return cls(
            backbone,
            TransformerPreprocessor(checkpoint.tokenizer),
            SearchSettings(**{**checkpoint.search, **search}),
            training_data=f"imported MarianMT checkpoint {Path(directory).resolve()}",
        )

    def save_to_huggingface(
        self, directory: str | os.PathLike, *, max_positions: int = 512
    ) -> Path:
        """Write a MarianMT checkpoint that `transformers` loads
        (`MarianMTModel`, `MarianTokenizer`): whole or not at all, checked
        against this model's logits when `transformers` is installed
        (`export.huggingface`; what differs is in its README.md)."""
        from keras_transformer.export.huggingface import save_huggingface

        self._need_preprocessor("save_to_huggingface")
        return save_huggingface(
            self.backbone,
            self.tokenizer,
            directory,
            self.search_settings,
            max_positions,
            card={"training_data": self.training_data},
        )

    def logits(self, source_ids, decoder_input_ids):
        """Teacher-forced logits, the way a conversion is checked: (B, S)
        source ids and (B, T) decoder input ids (BOS, then the target's
        ids; PAD 0 after both) -> (B, T, V) float32 logits, one row per
        decoder position for the next token. Ids are this package's
        (`tokenizer.encode`, `tokenizer.encode_target`); an imported
        checkpoint's tokenizer maps them to Marian's with `marian_ids`."""
        return self.backbone(
            {
                "source_ids": keras.ops.convert_to_tensor(source_ids, "int32"),
                "target_ids": keras.ops.convert_to_tensor(decoder_input_ids, "int32"),
            },
            training=False,
        )

    # -- training ----------------------------------------------------------

    def compile(
        self,
        optimizer: Any = None,
        loss: Any = None,
        metrics: Any = None,
        *,
        learning_rate_scale: float = 1.0,
        **kwargs: Any,
    ) -> None:
        """Keras's `compile`, with the paper's Adam(0.9, 0.98, 1e-9) and
        warmup schedule (times `learning_rate_scale`), label-smoothed loss
        and per-token metrics for what is not given (`metrics=[]`: none)."""
        paper = paper_compile_arguments(self.backbone.config, learning_rate_scale)
        # Keras's own compile and fit, named: keras-hub's subclass
        # (`task.hub`) inherits keras-hub's versions of both too.
        keras.Model.compile(
            self,
            optimizer=paper["optimizer"] if optimizer is None else optimizer,
            loss=paper["loss"] if loss is None else loss,
            metrics=paper["metrics"] if metrics is None else metrics,
            **kwargs,
        )

    def fit(self, x: Any = None, y: Any = None, **kwargs: Any):
        """Keras's `fit`; text pairs are tokenized and batched first.

        `x=(source_texts, target_texts)`, `x=source_texts, y=target_texts`,
        or `x` an iterable of (source, target) string pairs (a generator or
        a `tf.data.Dataset` too; UTF-8 bytes are read as text);
        `validation_data` the same way. The batches are `train`'s: length
        buckets of about `tokens_per_batch` padded target tokens (set on the
        preprocessor), or `batch_size` sentences each when given. Anything
        else (batches of ids) goes to Keras unchanged."""
        x, pairs = _text_pairs(x, y)
        if pairs is None:
            return keras.Model.fit(self, x, y, **kwargs)
        self._need_preprocessor("fit on texts")
        rows = kwargs.pop("batch_size", None)
        if rows is not None and (
            isinstance(rows, bool) or not isinstance(rows, int) or rows < 1
        ):
            raise ValueError(
                f"batch_size must be an integer >= 1 (sentences per batch), or "
                f"None for tokens_per_batch. Received: {rows!r}"
            )
        validation = kwargs.pop("validation_data", None)
        validation, validation_pairs = _text_pairs(validation, None, "validation_data")
        data = self.preprocessor.batches(pairs, validation_pairs, rows_per_batch=rows)
        if validation_pairs is not None:
            validation = data.valid.for_fit() if data.valid is not None else None
        kwargs.setdefault("shuffle", False)  # The batches shuffle themselves.
        return keras.Model.fit(
            self, data.train.for_fit(), validation_data=validation, **kwargs
        )

    def compile_from_config(self, config: dict[str, Any]) -> None:
        """Recompile a loaded `.keras` model with what it was compiled with
        (its optimizer built, so that its saved state loads)."""
        self.compile(**keras.saving.deserialize_keras_object(config))
        if self.built:
            self.optimizer.build(self.trainable_variables)

    # -- generation --------------------------------------------------------

    def generate(
        self,
        texts: str | Sequence[str],
        *,
        batch_size: int = 64,
        sampling: SamplingSettings | None = None,
        details: bool = False,
        n_best: bool = False,
        **changes: Any,
    ) -> str | list[str] | dict | list[dict]:
        """Translations of `texts` (one string gives one string), with the
        model's search settings changed by `changes` (`beam_size=1` for
        greedy search, `alpha`, `max_extra_length`, ...). Equal to
        `keras-transformer translate` with the same settings.

        `sampling` draws them (`SamplingSettings`, with `beam_size=1`);
        `details` or `n_best` give a dict per text instead of a string: the
        score, tokens, token log-probabilities and word alignment
        (`Translator.generate`, `translate --format jsonl`)."""
        self._need_preprocessor("generate")
        single = isinstance(texts, str)
        texts = [texts] if single else _check_texts(texts)
        settings = self.search_settings.replace(**changes)
        key = (settings, batch_size, sampling)
        if key not in self._translators:
            self._translators[key] = Translator(
                self.backbone,
                self.tokenizer,
                settings,
                batch_size=batch_size,
                sampling=sampling,
            )
        translator = self._translators[key]
        if details or n_best:
            outputs = translator.generate(texts, n_best=n_best)
        else:
            outputs = translator(texts)
        return outputs[0] if single else outputs

    def _need_preprocessor(self, what: str) -> None:
        if self.tokenizer is None:
            raise ValueError(
                f"{what} needs the tokenizer: build the model with "
                "preprocessor=TransformerPreprocessor(tokenizer), or load it "
                "with from_preset."
            )

    # -- Keras serialization ------------------------------------------------

    def get_config(self) -> dict[str, Any]:
        return {
            "backbone": keras.saving.serialize_keras_object(self.backbone),
            "preprocessor": None
            if self.preprocessor is None
            else self.preprocessor.get_config(),
            "search": self.search_settings.to_dict(),
            "training_data": self.training_data,
            "name": self.name,
            "trainable": self.trainable,
        }

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> TransformerSeq2SeqLM:
        config = dict(config)
        backbone = keras.saving.deserialize_keras_object(config.pop("backbone"))
        settings = config.pop("preprocessor", None)
        if isinstance(settings, dict) and "config" in settings:  # a task.json
            settings = settings["config"]
        search = SearchSettings.from_dict(config.pop("search", {}))
        # Its tokenizer comes with the assets: `load_assets` (a `.keras`
        # file) or `load_preset_assets` (keras-hub's preset loader).
        preprocessor = None
        if settings is not None:
            preprocessor = TransformerPreprocessor(None, **settings)
        return cls(backbone, preprocessor, search, **config)

    def save_assets(self, dir_path: str) -> None:
        if self.tokenizer is not None:
            self.tokenizer.save(Path(dir_path) / "tokenizer")

    def load_assets(self, dir_path: str) -> None:
        if self.preprocessor is not None and (Path(dir_path) / "tokenizer").is_dir():
            self.preprocessor.tokenizer = load_tokenizer(Path(dir_path) / "tokenizer")


def _split_overrides(
    overrides: dict[str, Any], model_fields: Sequence[str], what: str
) -> tuple[dict, dict, dict]:
    """`overrides` as (model, preprocessor, search) changes; a name that is
    none of them is refused with the names that are."""
    parts: tuple[dict, dict, dict] = ({}, {}, {})
    for name, value in overrides.items():
        for part, fields in zip(
            parts, (model_fields, _PREPROCESSOR_FIELDS, _SEARCH_FIELDS)
        ):
            if name in fields:
                part[name] = value
                break
        else:
            allowed = [*model_fields, *_PREPROCESSOR_FIELDS, *_SEARCH_FIELDS]
            raise ValueError(
                f"{name}={value!r} cannot be set on {what}. Settable: "
                f"{', '.join(sorted(allowed))}."
            )
    return parts


def _resolve_tokenizer(tokenizer, texts, vocab_size) -> SubwordTokenizer:
    if tokenizer is not None and texts is not None:
        raise ValueError("Pass tokenizer= or texts= to learn one, not both.")
    if vocab_size is not None and texts is None:
        raise ValueError(
            "vocab_size is the tokenizer's: pass vocab_size= with texts= to "
            "learn one of that size."
        )
    if isinstance(tokenizer, SubwordTokenizer):
        return tokenizer
    if tokenizer is not None:
        return load_tokenizer(tokenizer)
    if texts is None:
        raise ValueError(
            "A configuration name is an architecture without a vocabulary: pass "
            "tokenizer= (a trained tokenizer or its directory) or texts= (both "
            "languages' sentences) to learn one."
        )
    size = TrainOptions().vocab_size if vocab_size is None else vocab_size
    return train_tokenizer(_check_texts(texts, "texts"), size)


def _check_texts(texts: Any, argument: str = "texts") -> list[str]:
    if isinstance(texts, (str, bytes)) or not isinstance(texts, Sequence):
        raise TypeError(
            f"{argument} must be a list of strings. Received: {type(texts).__name__}"
        )
    for index, text in enumerate(texts):
        if not isinstance(text, str):
            raise TypeError(
                f"{argument}[{index}] is a {type(text).__name__}, not a string: "
                f"{text!r:.80}"
            )
    return list(texts)


def _text_pairs(x: Any, y: Any, argument: str = "x") -> tuple[Any, Any]:
    """(`x`, the text pairs it holds) for `fit`, or (`x`, None) when it is
    not text; a generator is peeked at, and given back whole either way."""
    if y is not None and _is_texts(x):
        return x, (x, y)
    if isinstance(x, tuple) and len(x) == 2 and _is_texts(x[0]):
        return x, x
    if _is_texts(x):  # Texts alone: Keras would print them all.
        raise ValueError(
            f"{argument} holds texts but no targets: pass y=target_texts, "
            f"{argument}=(source_texts, target_texts), or (source, target) pairs."
        )
    if (
        isinstance(x, list)
        and x
        and isinstance(x[0], (tuple, list))
        and _is_texts(x[0])
    ):
        return x, x
    if isinstance(x, Iterator) and not _is_keras_data(x):
        first = next(x, None)
        x = itertools.chain([] if first is None else [first], x)
        if isinstance(first, (tuple, list)) and _is_texts(first):
            return x, x
    if _is_string_dataset(x):
        return x, x
    return x, None


def _is_texts(value: Any) -> bool:
    """A non-empty sequence whose first item is a string or UTF-8 bytes (the
    rest are checked by the preprocessor, which names the one that is not)."""
    if isinstance(value, (str, bytes)) or not hasattr(value, "__len__"):
        return False
    try:
        return len(value) > 0 and isinstance(value[0], (str, bytes))
    except (TypeError, KeyError, IndexError):
        return False


def _is_keras_data(x: Any) -> bool:
    """Iterators Keras reads itself (a PyDataset, a torch DataLoader's)."""
    return isinstance(x, keras.utils.PyDataset) or type(x).__module__.startswith(
        ("torch", "tensorflow")
    )


def _is_string_dataset(x: Any) -> bool:
    spec = getattr(x, "element_spec", None)
    if not isinstance(spec, tuple) or len(spec) != 2:
        return False
    return all(
        getattr(getattr(s, "dtype", None), "name", None) == "string" for s in spec
    )


def _preset_search(contents: preset_files.PresetContents) -> SearchSettings:
    """The preset's search settings; bad ones are an error naming its file."""
    try:
        return SearchSettings.from_dict(contents.search)
    except (TypeError, ValueError) as error:
        path = contents.path / preset_files.TASK_FILE
        raise ValueError(f"{path}: bad search settings ({error}).") from None
