"""The settings of a token store, their one owner: `PrepareOptions` and more.

`PrepareOptions` holds every setting of `keras-transformer prepare`; the
functions below say how a training run takes the settings a store fixes
(the tokenizer, its vocabulary, the length filter).

`train` shares those settings with `prepare`: each is made by one function
here, which `TrainOptions` uses too, so their defaults, ranges and help
cannot drift apart. A store records them; `train --dataset store:DIR` takes
them from it (`with_store_settings`), and refuses a value given on the
command line that disagrees (`check_store_settings`). Light to import: the
command line reads it before Keras starts.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from keras_transformer.data.datasets import DatasetSpec
from keras_transformer.data.tokenizer import TOKENIZER_KINDS
from keras_transformer.utils.setting_fields import check_setting, flag_name, setting

if TYPE_CHECKING:
    from keras_transformer.data.token_store import TokenStore

# The settings `train` shares with `prepare`: a store records them, and
# `train --dataset store:DIR` takes them from it.
STORE_SETTINGS = ("tokenizer", "vocab_size", "max_length")


def tokenizer_setting(*, task_default: bool = False):
    if task_default:  # train: the task decides (words for parsing).
        return setting(
            None,
            "joint tokenizer (none: the task's, sentencepiece; words for parsing; "
            "marian: an imported checkpoint's, given by --init-from, not learned)",
            choices=TOKENIZER_KINDS,
        )
    return setting(
        "sentencepiece",
        "joint subword tokenizer (marian: an imported checkpoint's, given by "
        "--tokenizer-from, not learned)",
        choices=TOKENIZER_KINDS,
    )


def vocab_size_setting():
    return setting(4000, "joint subword vocabulary to learn", minimum=8)


def max_length_setting():
    return setting(128, "longer training pairs are dropped (and reported)", minimum=2)


def tokenizer_sample_setting():
    # SentencePiece learns a vocabulary of tens of thousands of pieces from a
    # million pairs as well as from all of WMT, in minutes and a few GB;
    # fairseq's and OpenNMT's recipes sample similar numbers. A corpus at most
    # this size is learned from whole, in its own order.
    return setting(
        2_000_000,
        "sentences (both sides) the tokenizer learns from: a seeded sample of "
        "the training set when it holds more",
        minimum=1,
    )


@dataclasses.dataclass
class PrepareOptions:
    """Settings of `keras-transformer prepare` (`prepare_store`): which
    corpus, how to learn the tokenizer and filter it, and where the store
    goes. `train` on text prepares with these settings on first use."""

    out: str | None = setting(
        None,
        "the store's directory; none: a cache directory found by the inputs' "
        "fingerprint ($KERAS_TRANSFORMER_CACHE/stores/, else "
        "~/.cache/keras_transformer/stores/)",
    )
    data: DatasetSpec = setting(DatasetSpec(), "the corpus", flag=False)
    tokenizer: str = tokenizer_setting()
    vocab_size: int = vocab_size_setting()
    tokenizer_sample: int = tokenizer_sample_setting()
    tokenizer_from: str | None = setting(
        None,
        "encode with the tokenizer saved in this directory (a run's tokenizer/, "
        "a preset's assets/tokenizer/) instead of learning one (a fine-tune's "
        "data, --init-from); the flags of the learning are then refused",
    )
    max_length: int = max_length_setting()
    seed: int = setting(
        0, "seed of the tokenizer's sample", minimum=0, maximum=2**32 - 1
    )
    workers: int | None = setting(
        None, "encoding processes; none: one per core this process may use", minimum=1
    )
    overwrite: bool = setting(
        False,
        "replace a store in --out made from other inputs or settings (the old "
        "one is moved to OUT.backup-<time>); never anything but a store",
    )

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            check_setting(field, getattr(self, field.name))
        if self.tokenizer_from is not None:
            _refuse_learning_flags(self)
        if self.data.name.startswith("store:"):
            raise ValueError(
                f"--dataset {self.data.name} is already a store; prepare reads "
                "text (builtin, multi30k, files, tfds:NAME)."
            )


#: The settings of learning a tokenizer, which `tokenizer_from` replaces.
LEARNING_SETTINGS = ("tokenizer", "vocab_size", "tokenizer_sample", "seed")


def _refuse_learning_flags(options: PrepareOptions) -> None:
    """A tokenizer loaded from a directory is not learned: a learning flag
    given with it would be ignored, so it is an error."""
    defaults = {field.name: field.default for field in dataclasses.fields(options)}
    for name in LEARNING_SETTINGS:
        if getattr(options, name) != defaults[name]:
            raise ValueError(
                f"{flag_name(name)} {getattr(options, name)} sets how a tokenizer "
                f"is learned; --tokenizer-from {options.tokenizer_from} encodes "
                f"with the one saved there: drop {flag_name(name)}."
            )


def with_tokenizer_from(options: PrepareOptions, directory: str) -> PrepareOptions:
    """`options` encoding with the tokenizer in `directory` (learning settings
    back at their defaults: the loaded tokenizer has its own)."""
    defaults = {field.name: field.default for field in dataclasses.fields(options)}
    learning = {name: defaults[name] for name in LEARNING_SETTINGS}
    return dataclasses.replace(options, tokenizer_from=directory, **learning)


def prepare_options_for(options: Any) -> PrepareOptions:
    """The `prepare` settings `train` uses on text (`options` is a
    `TrainOptions`): its data, tokenizer, vocabulary and length filter; the
    rest at their defaults (the sample's seed is prepare's own, so runs of
    other seeds share one store)."""
    return PrepareOptions(
        data=options.data,
        **{name: getattr(options, name) for name in STORE_SETTINGS},
    )


def check_store_settings(options: Any, store: TokenStore) -> None:
    """A store fixes the tokenizer, its vocabulary and the length filter:
    `options` (a `TrainOptions`) takes them from it (through
    `with_store_settings`); a value that is not the default and differs from
    the store's is refused."""
    from keras_transformer.data.tasks import task_tokenizer

    defaults = {field.name: field.default for field in dataclasses.fields(options)}
    # train's tokenizer default is the task's, filled in before this check.
    defaults["tokenizer"] = task_tokenizer(getattr(options, "task", "translation"))
    for name in STORE_SETTINGS:
        given, stored = getattr(options, name), store.settings[name]
        if given != stored and given != defaults[name]:
            flag = flag_name(name)
            raise ValueError(
                f"{flag} {given}: the store {store.path} was prepared with "
                f"{flag} {stored}, which training on it uses. Drop {flag}, or "
                "prepare another store with it."
            )


def with_store_settings(options: Any, store: TokenStore) -> Any:
    """`options` with the store's tokenizer, vocabulary and length filter."""
    return dataclasses.replace(
        options, **{name: store.settings[name] for name in STORE_SETTINGS}
    )
