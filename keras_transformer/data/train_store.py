"""The store `train` reads, opened in one call: `open_training_store`.

`--dataset store:DIR` is opened (refused if its source files changed
since); a text corpus's store is prepared on first use into the cache and
found there by its fingerprint after (`prepare.prepare_store`). In a
multi-process run process 0 prepares alone while the others wait, then
every process maps the same files. A fine-tune's store must hold the
trained model's tokenizer (`tokenizer.tokenizer_sha256`), and the store's
settings are checked against the run's once (`store_options`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

from keras_transformer.data.datasets import STORE_PREFIX
from keras_transformer.data.prepare import prepare_store, store_location
from keras_transformer.data.store_options import (
    PrepareOptions,
    check_store_settings,
    prepare_options_for,
    with_tokenizer_from,
)
from keras_transformer.data.text_files import DataError
from keras_transformer.data.token_store import StoreError, TokenStore, open_store
from keras_transformer.data.tokenizer import tokenizer_sha256
from keras_transformer.utils.console import log


class Processes(Protocol):
    """The processes of one run that read one store
    (`training.distribution.DistributionPlan`)."""

    shard_index: int

    @property
    def is_chief(self) -> bool: ...

    def all_ok(self, ok: bool, tag: str) -> bool:
        """True on every process when `ok` is true on every one."""


def open_training_store(
    options: Any, processes: Processes, tokenizer_from: Path | None = None
) -> TokenStore:
    """The store `train` reads with `options` (a `TrainOptions`): its
    `--dataset store:DIR`, or its text corpus's store, prepared by the chief
    on first use (module doc).

    `tokenizer_from` (a fine-tune's: the trained model's tokenizer
    directory): the text is encoded with that tokenizer, and a store of
    another tokenizer is refused. A failure on the chief is raised there,
    and the other processes stop too, naming it."""
    name = options.data.name
    if name.startswith(STORE_PREFIX):
        store = open_store(name[len(STORE_PREFIX) :])
    else:
        prepare = prepare_options_for(options)
        if tokenizer_from is not None:
            # Its --tokenizer and --vocab-size were checked against the model.
            prepare = with_tokenizer_from(prepare, str(tokenizer_from))
        store = _prepared_by_the_chief(prepare, processes)
    if tokenizer_from is not None:
        _check_store_tokenizer(store, tokenizer_from)
    check_store_settings(options, store)
    return store


def _check_store_tokenizer(store: TokenStore, tokenizer_from: Path) -> None:
    """A fine-tune's data must be encoded with the trained model's tokenizer."""
    if tokenizer_sha256(store.tokenizer_dir) != tokenizer_sha256(tokenizer_from):
        raise ValueError(
            f"--dataset store:{store.path} was encoded with the tokenizer in "
            f"{store.tokenizer_dir}, not the one of --init-from "
            f"({tokenizer_from}): its token ids would mean other pieces. "
            "Prepare the data with keras-transformer prepare --tokenizer-from "
            f"{tokenizer_from}, or train on the text files."
        )


def _prepared_by_the_chief(options: PrepareOptions, processes: Processes):
    store, error = None, None
    if processes.is_chief:
        try:
            store = prepare_store(options, log=log, verify_reused=False)
        except Exception as caught:  # noqa: BLE001 - raised below, on every process.
            error = caught
    if not processes.all_ok(error is None, "store-prepared"):
        if error is not None:
            raise error
        raise DataError(
            "process 0 could not prepare the training data; its error message "
            "says why (nothing was trained)."
        )
    if store is None:  # Process 0 prepared it: the same inputs' path.
        where = store_location(options)
        try:
            store = open_store(where, check_sources=False)
        except StoreError as error:
            raise StoreError(
                f"process {processes.shard_index} cannot read the store process 0 "
                f"prepared in {where} ({error}). Every process must read the "
                "same store: prepare it on a file system they all see "
                "(keras-transformer prepare ... --out DIR) and train with "
                "--dataset store:DIR."
            ) from error
    return store
