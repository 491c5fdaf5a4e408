"""The token store a training run reads, and the tokenizer it takes from it.

The store is opened (`--dataset store:DIR`) or prepared on first use (by
process 0 alone in a multi-process run); it fixes the tokenizer, which the
run keeps a copy of (`run_tokenizer`, the one place that decides which
tokenizer a run uses).
"""

from __future__ import annotations

from pathlib import Path

from keras_transformer.data.datasets import STORE_PREFIX
from keras_transformer.data.pipeline import FilterReport
from keras_transformer.data.prepare import prepare_store, store_location
from keras_transformer.data.store_options import (
    PrepareOptions,
    check_store_settings,
    prepare_options_for,
    with_tokenizer_from,
)
from keras_transformer.data.text_files import DataError
from keras_transformer.data.token_store import (
    StoreError,
    TokenStore,
    open_store,
    tokenizer_sha256,
)
from keras_transformer.run.directory import RunConflict, RunDirectory
from keras_transformer.training.distribution import DistributionPlan
from keras_transformer.training.options import TrainOptions
from keras_transformer.utils.console import log


def prepare_training_store(
    options: TrainOptions,
    plan: DistributionPlan | None = None,
    tokenizer_from: Path | None = None,
) -> TokenStore:
    """The store `train` reads: `--dataset store:DIR` opened (refused if its
    source files changed since), or the store of the text corpus, prepared
    on first use into the cache and found there by its fingerprint after.

    `tokenizer_from` (a fine-tune's: the trained model's tokenizer
    directory): the text is encoded with that tokenizer, and a store of
    another tokenizer is refused.

    In a multi-process run the chief (process 0) prepares alone while the
    others wait; then every process maps the same files. A failure on the
    chief is raised there, and the others stop too, naming it."""
    plan = plan or DistributionPlan("none")
    name = options.data.name
    if name.startswith(STORE_PREFIX):
        store = open_store(name[len(STORE_PREFIX) :])
    else:
        prepare = prepare_options_for(options)
        if tokenizer_from is not None:
            # Its --tokenizer and --vocab-size were checked against the model.
            prepare = with_tokenizer_from(prepare, str(tokenizer_from))
        store = _prepared_by_the_chief(prepare, plan)
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


def _prepared_by_the_chief(options: PrepareOptions, plan: DistributionPlan):
    store, error = None, None
    if plan.is_chief:
        try:
            store = prepare_store(options, log=log, verify_reused=False)
        except Exception as caught:  # noqa: BLE001 - raised below, on every process.
            error = caught
    if not plan.all_ok(error is None, "store-prepared"):
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
                f"process {plan.shard_index} cannot read the store process 0 "
                f"prepared in {where} ({error}). Every process must read the "
                "same store: prepare it on a file system they all see "
                "(keras-transformer prepare ... --out DIR) and train with "
                "--dataset store:DIR."
            ) from error
    return store


def log_store(store: TokenStore) -> None:
    splits = store.manifest["splits"]
    counts = ", ".join(f"{name} {info['pairs']:,}" for name, info in splits.items())
    log(
        f"data: {store.origin()}: {counts} (store {store.path}, fingerprint "
        f"{store.fingerprint[:12]})"
    )
    log(FilterReport(**store.filter_report()).summary(store.origin()))


def _check_copy_whole(copy: Path, store: TokenStore) -> None:
    """Name a file of the run's tokenizer copy that is missing or of another
    size than the store's (a damaged copy, not another tokenizer)."""
    for original in sorted(store.tokenizer_dir.iterdir()):
        mine = copy / original.name
        if mine.is_file() and mine.stat().st_size == original.stat().st_size:
            continue
        damage = (
            f"is {mine.stat().st_size:,} bytes, the store's {original.stat().st_size:,}"
            if mine.is_file()
            else "is missing"
        )
        raise RunConflict(
            f"{mine} {damage}: the run's copy of its tokenizer is damaged. The "
            f"token store it trained on, {store.path}, holds the same tokenizer: "
            f"copy {store.tokenizer_dir} to {copy} and run the same command again."
        )


def run_tokenizer(run: RunDirectory, store: TokenStore, resuming: bool):
    """The tokenizer a run uses, and whether the run still has to save it:
    the store's, of which the run keeps a copy. A resumed run reuses its
    copy (a run stopped before it saved one saves it again), refused when
    it is not the store's."""
    copy = run.tokenizer_dir
    if not (resuming and (copy / "tokenizer.json").exists()):
        return store.tokenizer(), True
    _check_copy_whole(copy, store)
    if tokenizer_sha256(copy) != tokenizer_sha256(store.tokenizer_dir):
        raise RunConflict(
            f"{copy} is not the tokenizer of the store {store.path} "
            "that the run's data comes from (was one of them replaced?); "
            "pass --overwrite to start afresh."
        )
    log(f"reusing this run's tokenizer in {copy}")
    return run.load_tokenizer(), False
