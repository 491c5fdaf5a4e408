"""Translation datasets from TensorFlow Datasets (TFDS).

`load_tfds` imports `tensorflow_datasets` only when it is called, so this
module imports nothing heavy.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Iterator
from typing import Any

from keras_transformer.data.text_files import (
    DataError,
    PairBlock,
    ParallelCorpus,
    collect_pairs,
)

__all__ = ["TfdsSplit", "load_tfds", "tfds_source"]


def _tfds_text(value: Any, where: str) -> str:
    if hasattr(value, "numpy"):  # A tf.Tensor, if the caller skipped as_numpy.
        value = value.numpy()
    if hasattr(value, "ndim") and getattr(value, "ndim", None) == 0:
        value = value.item()  # A 0-d numpy array.
    if isinstance(value, str):
        return value
    if isinstance(value, (bytes, bytearray)):
        try:
            return bytes(value).decode("utf-8")
        except UnicodeDecodeError as error:
            raise DataError(
                f"{where}: invalid UTF-8 at byte {error.start}: {error.reason}"
            ) from error
    raise DataError(f"{where}: expected a string, got {type(value).__name__}")


def _tfds_languages(
    info: Any, source_lang: str | None, target_lang: str | None, label: str
) -> tuple[str, str]:
    if source_lang is not None and target_lang is not None:
        languages = (source_lang, target_lang)
    else:
        keys = getattr(info, "supervised_keys", None)
        if not (
            isinstance(keys, (tuple, list))
            and len(keys) == 2
            and all(isinstance(key, str) for key in keys)
        ):
            raise DataError(
                f"{label}: cannot infer the language pair from the supervised "
                f"keys {keys!r}; pass source_lang and target_lang explicitly"
            )
        given = source_lang if source_lang is not None else target_lang
        if given is None:
            languages = (keys[0], keys[1])
        elif given not in keys:
            raise DataError(
                f"{label}: language {given!r} is not one of the dataset's "
                f"supervised keys {tuple(keys)!r}"
            )
        else:
            other = keys[1] if given == keys[0] else keys[0]
            languages = (given, other) if source_lang is not None else (other, given)
    if languages[0] == languages[1]:
        raise DataError(
            f"{label}: source_lang and target_lang must differ, both are "
            f"{languages[0]!r}"
        )
    return languages


def load_tfds(
    name: str,
    split: str,
    *,
    source_lang: str | None = None,
    target_lang: str | None = None,
    data_dir: str | os.PathLike[str] | None = None,
) -> ParallelCorpus:
    """Load a translation dataset from TensorFlow Datasets.

    Calls ``tfds.load(name, split=split, data_dir=data_dir, with_info=True)``
    (which may download and prepare the dataset, as TFDS does) and reads the
    two language features of every example, e.g. ``{"de": b"...", "en":
    b"..."}`` for ``"wmt14_translate/de-en"``. `tensorflow_datasets` is
    imported only here.

    Language choice: if both `source_lang` and `target_lang` are given they
    are used as feature names. Otherwise the dataset's
    ``info.supervised_keys`` (a pair such as ``("de", "en")``) decides: with
    neither given, the first key is the source and the second the target;
    with only one given, the other is the remaining supervised key.

    Args:
        name: TFDS name, optionally with config, e.g. ``"wmt14_translate/de-en"``.
        split: One TFDS split string, e.g. ``"train"`` or ``"validation[:10%]"``.
        source_lang: Feature name of the source language.
        target_lang: Feature name of the target language.
        data_dir: TFDS data directory (None: the TFDS default).

    Returns:
        All examples in dataset order; `line_numbers` holds the 1-based
        example index within the split, `origin` ``"tfds:<name>[<split>]
        <src>-<tgt>"``. Text is decoded as UTF-8 and otherwise unchanged.

    Raises:
        DataError: If `tensorflow_datasets` is not installed (the message
            says ``pip install tensorflow-datasets``), `tfds.load` fails, the
            language pair cannot be determined or is not in an example, or
            a text is not valid UTF-8.
    """
    source = tfds_source(
        name, split, source_lang=source_lang, target_lang=target_lang, data_dir=data_dir
    )
    return collect_pairs(source.blocks(), source.origin)


@dataclasses.dataclass(frozen=True)
class TfdsSplit:
    """One TFDS split, loaded: `blocks()` reads its examples block by block
    (again at each call); `version` is the dataset's; `languages` the
    (source, target) features read."""

    origin: str
    version: str
    blocks: Callable[[], Iterator[PairBlock]]
    languages: tuple[str, str]


def tfds_source(
    name: str,
    split: str,
    *,
    source_lang: str | None = None,
    target_lang: str | None = None,
    data_dir: str | os.PathLike[str] | None = None,
    block_pairs: int = 50_000,
) -> TfdsSplit:
    """`load_tfds` without reading the examples yet (the same arguments and
    errors): for corpora too large to hold."""
    try:
        import tensorflow_datasets as tfds
    except ImportError as error:
        raise DataError(
            f"load_tfds({name!r}) needs TensorFlow Datasets, which could not be "
            f"imported ({error}). Install it with: pip install tensorflow-datasets"
        ) from error
    label = f"tfds:{name}[{split}]"
    try:
        loaded = tfds.load(name, split=split, data_dir=data_dir, with_info=True)
    except Exception as error:  # TFDS raises many types; keep the cause.
        raise DataError(f"{label}: tfds.load failed: {error}") from error
    if not (isinstance(loaded, tuple) and len(loaded) == 2):
        raise DataError(f"{label}: expected one split (a string), got {split!r}")
    dataset, info = loaded
    src, tgt = _tfds_languages(info, source_lang, target_lang, label)

    def blocks() -> Iterator[PairBlock]:
        source, target, first = [], [], 1
        for number, example in enumerate(tfds.as_numpy(dataset), start=1):
            for lang in (src, tgt):
                if lang not in example:
                    raise DataError(
                        f"{label}, example {number}: no feature {lang!r}; the "
                        f"example has {sorted(example)!r}"
                    )
            source.append(_tfds_text(example[src], f"{label}, example {number}, {src}"))
            target.append(_tfds_text(example[tgt], f"{label}, example {number}, {tgt}"))
            if len(source) == block_pairs:
                yield PairBlock(first, source, target)
                source, target, first = [], [], number + 1
        if source:
            yield PairBlock(first, source, target)

    version = str(getattr(info, "version", ""))
    return TfdsSplit(f"{label} {src}-{tgt}", version, blocks, (src, tgt))
