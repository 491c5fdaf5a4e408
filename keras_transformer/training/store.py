"""The token store a training run reads, and the tokenizer it takes from it.

The store is opened, or prepared on first use by process 0 alone, in one
call (`data.train_store.open_training_store`); it fixes the tokenizer,
which the run keeps a copy of (`run_tokenizer`, the one place that decides
which tokenizer a run uses).
"""

from __future__ import annotations

from pathlib import Path

from keras_transformer.data.pipeline import FilterReport
from keras_transformer.data.token_store import TokenStore
from keras_transformer.data.tokenizer import TOKENIZER_META_FILE, tokenizer_sha256
from keras_transformer.data.train_store import open_training_store
from keras_transformer.run.directory import RunConflict, RunDirectory
from keras_transformer.training.distribution import DistributionPlan
from keras_transformer.training.options import TrainOptions
from keras_transformer.utils.console import log


def prepare_training_store(
    options: TrainOptions,
    plan: DistributionPlan | None = None,
    tokenizer_from: Path | None = None,
) -> TokenStore:
    """The store `train` reads with `options`, for the processes of `plan`
    (default: this one alone): `data.train_store.open_training_store`."""
    return open_training_store(
        options, plan or DistributionPlan("none"), tokenizer_from
    )


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
    if not (resuming and (copy / TOKENIZER_META_FILE).exists()):
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
