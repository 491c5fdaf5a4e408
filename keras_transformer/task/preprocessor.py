"""`TransformerPreprocessor`: text pairs to the token-budget batches `train` uses.

The preprocessor role of keras-hub's Seq2SeqLM (tokenize, shift for
teacher forcing, batch), for a whole in-memory corpus at once: token-budget
batches in length buckets are cut from the lengths of all pairs, which a
per-example preprocessing layer cannot see.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from keras_transformer.data.pipeline import DEFAULT_BUCKETS, encode_pairs
from keras_transformer.data.text_files import ParallelCorpus
from keras_transformer.run.preset_files import PREPROCESSOR_FIELDS, read_tokenizer
from keras_transformer.training.batches import TrainingData, token_budget_batches
from keras_transformer.training.options import TrainOptions

_DEFAULTS = TrainOptions()


class TransformerPreprocessor:
    """Strings to batches for `fit`, with the joint tokenizer of a model.

    Training pairs longer than `max_length` tokens on either side are
    dropped and counted (as `train` does; validation pairs never are), and
    batches hold about `tokens_per_batch` padded target tokens, reshuffled
    every epoch with `seed`: the same batches `keras-transformer train`
    makes from the same pairs and settings.

    Args:
        tokenizer: the joint `SubwordTokenizer` (None until
            `load_preset_assets` reads it from a preset).
        max_length: longest training pair kept, in tokens. Defaults to
            `train`'s (128).
        tokens_per_batch: padded target tokens per batch. Defaults to
            `train`'s (2048).
        seed: shuffling seed. Defaults to 0.
    """

    def __init__(
        self,
        tokenizer,
        *,
        max_length: int = _DEFAULTS.max_length,
        tokens_per_batch: int = _DEFAULTS.tokens_per_batch,
        seed: int = _DEFAULTS.seed,
    ):
        for name, value, minimum in (
            ("max_length", max_length, 2),
            ("tokens_per_batch", tokens_per_batch, 1),
            ("seed", seed, 0),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
                raise ValueError(
                    f"{name} must be an int >= {minimum}. Received: {value!r}"
                )
        self.tokenizer = tokenizer
        self.max_length = max_length
        self.tokens_per_batch = tokens_per_batch
        self.seed = seed

    def batches(
        self,
        pairs: Any,
        validation_pairs: Any = None,
        *,
        argument: str = "x",
        rows_per_batch: int | None = None,
    ) -> TrainingData:
        """Token-budget batches of the training `pairs` and, if given, of
        `validation_pairs`; `argument` names the training pairs in errors.
        With `rows_per_batch`, batches of that many pairs instead (still in
        length buckets: `fit`'s `batch_size`).

        Pairs are `(source_texts, target_texts)`, or an iterable of
        `(source, target)` string pairs (a `tf.data.Dataset` of them too)."""
        train = self.corpus(pairs, argument)
        encoded, report = encode_pairs(train, self.tokenizer, self.max_length)
        report.log_and_check(train.origin)
        valid = None
        if validation_pairs is not None:
            corpus = self.corpus(validation_pairs, "validation_data")
            valid = (
                encode_pairs(corpus, self.tokenizer, None)[0] if corpus.source else None
            )
        return token_budget_batches(
            encoded,
            valid,
            train.origin,
            tokens_per_batch=None if rows_per_batch else self.tokens_per_batch,
            rows_per_batch=rows_per_batch,
            max_length=self.max_length,
            seed=self.seed,
            buckets=DEFAULT_BUCKETS,
        )

    @staticmethod
    def corpus(pairs: Any, argument: str) -> ParallelCorpus:
        """`pairs` checked and aligned; errors name `argument` and the item."""
        source, target = _split_pairs(pairs, argument)
        for side, texts in (("source", source), ("target", target)):
            for index, text in enumerate(texts):
                if not isinstance(text, str):
                    raise TypeError(
                        f"{argument}: {side} text {index} is a "
                        f"{type(text).__name__}, not a string: {text!r:.80}"
                    )
        if len(source) != len(target):
            raise ValueError(
                f"{argument}: {len(source)} source texts but {len(target)} "
                "target texts; they must pair up one to one."
            )
        if not source:
            raise ValueError(f"{argument}: no text pairs.")
        lines = list(range(1, len(source) + 1))
        return ParallelCorpus(source, target, f"{argument} (text pairs)", lines)

    def load_preset_assets(self, preset: str | os.PathLike) -> None:
        """Read the tokenizer of a preset directory (keras-hub's loaders
        call this after building a task from its `task.json`)."""
        self.tokenizer = read_tokenizer(Path(preset))

    def get_config(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in PREPROCESSOR_FIELDS}


def _split_pairs(pairs: Any, argument: str) -> tuple[list, list]:
    if isinstance(pairs, tuple) and len(pairs) == 2 and _is_text_list(pairs[0]):
        return [_text(t) for t in pairs[0]], [_text(t) for t in pairs[1]]
    if isinstance(pairs, (str, bytes)) or not isinstance(pairs, Iterable):
        raise TypeError(
            f"{argument} must be (source_texts, target_texts) or an iterable "
            f"of (source, target) string pairs. Received: {type(pairs).__name__}"
        )
    source, target = [], []
    for index, pair in enumerate(_as_python(pairs)):
        if not isinstance(pair, (tuple, list)) or len(pair) != 2:
            raise TypeError(
                f"{argument}: item {index} is not a (source, target) pair: {pair!r:.80}"
            )
        source.append(_text(pair[0]))
        target.append(_text(pair[1]))
    return source, target


def _is_text_list(value: Any) -> bool:
    if isinstance(value, np.ndarray):
        return value.ndim == 1
    return isinstance(value, Sequence) and not isinstance(value, (str, bytes))


def _as_python(pairs: Iterable) -> Iterable:
    """A `tf.data.Dataset` yields tensors: read it as NumPy values."""
    as_numpy = getattr(pairs, "as_numpy_iterator", None)
    return as_numpy() if callable(as_numpy) else pairs


def _text(value: Any) -> Any:
    """UTF-8 bytes (what a string tensor gives) as `str`; anything else as
    it is, for the type check to name."""
    if isinstance(value, bytes):
        return value.decode("utf-8")
    item = getattr(value, "item", None)  # NumPy scalars of a dataset
    if callable(item) and getattr(value, "shape", None) == ():
        return _text(item())
    return value
