"""`keras-transformer prepare`: read a corpus once and write a token store.

`prepare_store(options)` makes the store `token_store` describes, from any
corpus `train` reads (text files, TSV, gzip, `multi30k`, `builtin`,
`tfds:NAME`), in passes that hold one block of pairs at a time:

1. The evaluation splits (small) are read whole; the training split is
   streamed once with every check of `text_files` (line counts, UTF-8, NUL
   bytes: errors name the file and line) while a seeded sample of at most
   `tokenizer_sample` sentences is drawn for the tokenizer (all of them,
   in the corpus's order, when there are no more).
2. The joint tokenizer is learned from the sample.
3. The training split is streamed again and encoded by `workers`
   processes (`block_encoding.EncoderPool`; SentencePiece), results in
   order; empty and over-long pairs are dropped and reported with their
   line numbers. Then the evaluation splits are encoded, unfiltered.

Everything is written into a staging directory beside the store and
renamed into place when whole (`manifest.json` last), so an interrupted or
failed prepare (a full disk: `StoreWriteError`) leaves nothing that
training would accept. The store is found again by its key, the SHA-256 of
the inputs (each source file's bytes, or what identifies a generated or
TFDS corpus) and the settings: preparing the same inputs again reuses it,
after checking every file's SHA-256, and says so. Without `out` the store
goes to `$KERAS_TRANSFORMER_CACHE/stores/KEY` (else
`~/.cache/keras_transformer/stores/KEY`), which is where `train` on text
looks for it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import hashlib
import itertools
import json
import os
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from keras_transformer.data import unknown_words
from keras_transformer.data.block_encoding import (
    EncoderPool,
    encode_block,
    encode_corpus,
)
from keras_transformer.data.datasets import STORE_PREFIX, SplitSource, dataset_sources
from keras_transformer.data.digests import file_sha256
from keras_transformer.data.pipeline import FilterReport
from keras_transformer.data.store_options import PrepareOptions
from keras_transformer.data.text_files import (
    DataError,
    ParallelCorpus,
    collect_pairs,
)
from keras_transformer.data.token_store import (
    EVAL_SPLITS,
    FORMAT_VERSION,
    MANIFEST,
    TOKENIZER_DIR,
    SplitWriter,
    StoreError,
    StoreWriteError,
    TokenStore,
    holds_store_manifest,
    new_manifest,
    open_store,
    remember_digests,
    token_dtype,
    write_evaluation_text,
    write_manifest,
)
from keras_transformer.data.tokenizer import (
    SentencePieceTokenizer,
    learn_tokenizer,
    tokenizer_sha256,
)
from keras_transformer.utils import console
from keras_transformer.utils.atomic_files import (
    PARTIAL_MARK,
    atomic_directory,
    backup_path,
)
from keras_transformer.utils.cpu import available_cores
from keras_transformer.utils.user_cache import user_cache_root

__all__ = [
    "default_store_path",
    "prepare_store",
    "store_key",
    "store_location",
]


def default_store_path(key: str) -> Path:
    """Where a store of inputs and settings `key` goes without `out`."""
    return user_cache_root() / "stores" / key[:24]


def locate_store(
    fingerprint: str, dataset: dict[str, Any] | None = None
) -> Path | None:
    """A store on this machine whose fingerprint is `fingerprint`: the
    `store:DIR` that `dataset` (a run's recorded `DatasetSpec`) names, else
    one in the cache; None if there is none. A run's tokenizer is a copy of
    its store's, so a damaged copy can be restored from it."""
    candidates = []
    name = str((dataset or {}).get("name", ""))
    if name.startswith(STORE_PREFIX):
        candidates.append(Path(name[len(STORE_PREFIX) :]).expanduser())
    candidates += sorted((user_cache_root() / "stores").glob("*"))
    for path in candidates:
        try:
            manifest = json.loads((path / MANIFEST).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(manifest, dict) and manifest.get("fingerprint") == fingerprint:
            return path
    return None


def _settings(options: PrepareOptions) -> dict[str, Any]:
    """What, besides the inputs, decides a store's content. A given
    tokenizer (`tokenizer_from`) counts by its SHA-256, so two tokenizers
    never share a store; its kind and size replace the learning settings."""
    settings = {
        "tokenizer": options.tokenizer,
        "vocab_size": options.vocab_size,
        "tokenizer_sample": options.tokenizer_sample,
        "max_length": options.max_length,
        "seed": options.seed,
        "lenient_utf8": options.data.lenient_utf8,
    }
    if options.tokenizer == "words":  # Stores learned before the classes differ.
        settings["unknown_word_classes"] = unknown_words.CLASSES_VERSION
    if options.tokenizer_from is not None:
        given = given_tokenizer(options.tokenizer_from)
        del settings["tokenizer_sample"], settings["seed"]  # Nothing is learned.
        settings.update(
            tokenizer=given.kind,
            vocab_size=given.vocab_size,
            tokenizer_sha256=tokenizer_sha256(Path(options.tokenizer_from)),
        )
    return settings


def given_tokenizer(directory: str | os.PathLike):
    """The tokenizer saved in `directory` (`--tokenizer-from`); an error
    naming the flag and the directory when there is none."""
    from keras_transformer.data.tokenizer import load_tokenizer

    try:
        return load_tokenizer(directory)
    except (OSError, ValueError) as error:
        raise DataError(
            f"--tokenizer-from {directory}: no readable tokenizer there ({error})."
        ) from None


def _source_records(sources: dict[str, SplitSource]) -> list[dict[str, Any]]:
    """Each source file's path, size, time and SHA-256 (the manifest's
    `sources`), hashed once per version of the file (`file_sha256`)."""
    records = []
    for split, source in sorted(sources.items()):
        for path in source.files:
            stat, digest = file_sha256(path)  # DataError for a missing file.
            records.append(
                {
                    "split": split,
                    "path": str(path.resolve()),
                    "size": stat.st_size,
                    "mtime_ns": stat.st_mtime_ns,
                    "sha256": digest,
                }
            )
    return records


def store_key(
    options: PrepareOptions,
    sources: dict[str, SplitSource],
    records: list[dict[str, Any]],
) -> str:
    """SHA-256 of the inputs' content and the settings (not of paths: the
    same files elsewhere give the same store)."""
    splits = {
        name: {
            "files": [(r["size"], r["sha256"]) for r in records if r["split"] == name],
            "identity": source.identity,
        }
        for name, source in sorted(sources.items())
    }
    payload = {
        "format_version": FORMAT_VERSION,
        "settings": _settings(options),
        "splits": splits,
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


@dataclasses.dataclass
class _Inputs:
    """The corpus to prepare, identified (its files hashed once)."""

    sources: dict[str, SplitSource]
    records: list[dict[str, Any]]
    key: str
    out: Path

    @classmethod
    def of(cls, options: PrepareOptions) -> _Inputs:
        sources = dataset_sources(options.data)
        records = _source_records(sources)
        key = store_key(options, sources, records)
        out = Path(options.out).expanduser() if options.out else None
        return cls(sources, records, key, out or default_store_path(key))


def store_location(options: PrepareOptions) -> Path:
    """Where `prepare_store(options)` puts (or finds) its store."""
    return _Inputs.of(options).out


def prepare_store(
    options: PrepareOptions,
    *,
    log: Callable[[str], None] = console.log,
    verify_reused: bool = True,
) -> TokenStore:
    """Make the store of `options` (see the module doc), or find it made
    (with `verify_reused`, every file's SHA-256 is checked first; `train`
    leaves that to `prepare`, and checks sizes and indexes only).

    Raises DataError naming the file and line for bad input (also an
    empty training set, or nothing left after the length filter),
    StoreError when `options.out` holds something else (a store of other
    inputs, unless `overwrite`; anything that is not a store, always), and
    StoreWriteError when a write fails."""
    started = time.monotonic()
    inputs = _Inputs.of(options)
    _check_out_is_a_directory(inputs.out)
    with _locked(inputs.out, log):
        store = _reusable(inputs, options, log, verify_reused)
        if store is not None:
            return store
        _remove_partials(inputs.out)
        aside = backup_path(inputs.out) if options.out is not None else None
        atomic_directory(
            inputs.out,
            lambda staging: _write_store(staging, inputs, options, log),
            replace=True,
            set_aside_to=aside,
        )
        if aside is not None and aside.exists():
            log(
                f"the store that was in {inputs.out} is now {aside}; delete it "
                "when you no longer need it"
            )
    remember_digests(inputs.out, json.loads((inputs.out / MANIFEST).read_text()))
    store = open_store(inputs.out, check_sources=False)
    log(_summary(store, time.monotonic() - started))
    return store


def _check_out_is_a_directory(out: Path) -> None:
    """A store is a directory: `out`, and every folder above it that
    exists, must be one (else the OS says "Not a directory" or "File
    exists" about some path)."""
    for path in (out, *out.parents):
        if path.exists():
            if not path.is_dir():
                where = "" if path == out else f" ({path} is a file)"
                raise StoreError(
                    f"--out {out}: a store is a directory{where}; name a new or "
                    f"empty directory, or a store to reuse. {path} is left as it is."
                )
            return


@contextlib.contextmanager
def _locked(out: Path, log: Callable[[str], None]):
    """Hold `.OUT.lock` beside the store: a second prepare of the same store
    waits for the first, then finds its store made."""
    out.parent.mkdir(parents=True, exist_ok=True)
    lock = out.parent / f".{out.name}.lock"
    with open(lock, "a+b") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            log(f"waiting for another process that prepares {out} ...")
            fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def _remove_partials(out: Path) -> None:
    """Staging directories a killed prepare left beside `out` (the lock is
    held: no other process writes them)."""
    for path in out.parent.glob(f".{out.name}{PARTIAL_MARK}-*"):
        shutil.rmtree(path, ignore_errors=True)


def _not_a_store(out: Path) -> StoreError:
    """The refusal for a directory that holds something other than a store:
    no flag replaces it (it may be a training run, or the user's files)."""
    what = "no token store"
    manifest = out / MANIFEST
    if manifest.is_file():
        try:
            found = json.loads(manifest.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            found = None
        if isinstance(found, dict) and "run_id" in found:
            what = "a training run, not a token store"
        else:
            what = f"no token store ({manifest} is not a store's manifest)"
    return StoreError(
        f"{out} is not empty and holds {what}; prepare will not write into it, "
        "with or without --overwrite. Choose another --out."
    )


def _reusable(
    inputs: _Inputs, options: PrepareOptions, log: Callable[[str], None], verify: bool
) -> TokenStore | None:
    """The store already in `out` for these inputs, else None when `out`
    may be (re)written; refuses to replace what it must not."""
    out = inputs.out
    if not out.exists() or not any(out.iterdir()):
        return None
    explicit = options.out is not None
    try:
        store = open_store(out, check_sources=False, verify=verify)
    except StoreError as error:
        if not holds_store_manifest(out):
            raise _not_a_store(out) from None
        if explicit and not options.overwrite:
            raise StoreError(
                f"{error} Pass --overwrite to replace it with a new store."
            ) from None
        log(f"replacing the damaged store in {out}: {error}")
        return None
    if store.key == inputs.key:
        checked = "every file checked" if verify else "sizes and indexes checked"
        log(
            f"reusing the prepared store in {out}: the same inputs and settings "
            f"(key {inputs.key[:12]}; {checked})"
        )
        _say_where_it_was_made(store, inputs, log)
        return store
    if explicit and not options.overwrite:
        raise StoreError(
            f"{out} holds a store of other inputs or settings "
            f"({_differences(store, options)}); nothing was changed. Pass "
            "--overwrite to replace it, or choose another --out."
        )
    return None


def _say_where_it_was_made(
    store: TokenStore, inputs: _Inputs, log: Callable[[str], None]
) -> None:
    """A store found by its inputs' content may have been made from files of
    other names: its records (and line numbers in its messages) keep those."""
    for split, source in inputs.sources.items():
        made_from = store.origin(split)
        if made_from != source.origin:
            log(
                f"the {split} split of this store was made from {made_from}; "
                f"{source.origin} holds the same content, and the store's "
                f"messages name {made_from}"
            )


def _differences(store: TokenStore, options: PrepareOptions) -> str:
    wanted = _settings(options)
    changed = [
        f"{name}: stored {store.settings.get(name)!r}, requested {value!r}"
        for name, value in wanted.items()
        if store.settings.get(name) != value
    ]
    return "; ".join(changed) or "the source files or dataset differ"


def _write_store(staging: Path, inputs: _Inputs, options: PrepareOptions, log) -> None:
    sources, out = inputs.sources, inputs.out
    evaluation = {
        name: collect_pairs(sources[name].blocks(), sources[name].origin)
        for name in EVAL_SPLITS
        if name in sources
    }
    train = sources["train"]
    tokenizer_dir = staging / TOKENIZER_DIR
    try:
        tokenizer = _store_tokenizer(tokenizer_dir, train, options, log)
    except OSError as error:
        raise StoreWriteError(tokenizer_dir, error, out) from error
    dtype = token_dtype(tokenizer.vocab_size)
    splits = {"train": _encode_train(staging, train, tokenizer, options, out, log)}
    for name, corpus in evaluation.items():
        splits[name] = _encode_evaluation(staging, name, corpus, tokenizer, dtype, out)
    _check_unchanged(inputs.records)
    manifest = new_manifest(
        key=inputs.key,
        settings=_settings(options),
        dataset=dataclasses.asdict(options.data),
        sources=inputs.records,
        tokenizer={
            "kind": tokenizer.kind,
            "vocab_size": tokenizer.vocab_size,
            "sha256": tokenizer_sha256(tokenizer_dir),
        },
        token_dtype=dtype,
        splits=splits,
    )
    write_manifest(staging, manifest, out)


def _store_tokenizer(tokenizer_dir: Path, train: SplitSource, options, log):
    """The store's tokenizer, saved in `tokenizer_dir`: learned from the
    training split, or `tokenizer_from`'s files copied byte for byte (so the
    store's copy has the same SHA-256 as the one it came from)."""
    if options.tokenizer_from is None:
        tokenizer = learn_tokenizer(
            train.blocks(),
            train.origin,
            kind=options.tokenizer,
            vocab_size=options.vocab_size,
            sample_size=options.tokenizer_sample,
            seed=options.seed,
            log=log,
            target_vocabulary=train.identity.get("target_vocabulary", False),
        )
        tokenizer.save(tokenizer_dir)
        return tokenizer
    source = Path(options.tokenizer_from)
    tokenizer_dir.mkdir(parents=True)
    for path in sorted(source.iterdir()):
        if path.is_file() and not path.name.startswith("."):
            shutil.copyfile(path, tokenizer_dir / path.name)
    log(f"encoding with the tokenizer of {source} (not learning one)")
    return given_tokenizer(tokenizer_dir)


# --- encoding ---------------------------------------------------------------------


@contextlib.contextmanager
def _encoded(blocks: Iterator, tokenizer, tokenizer_dir: Path, options, dtype: str):
    """The `EncodedBlock`s of (line numbers, source, target) blocks, in
    order: from worker processes for SentencePiece with more than one
    worker and more than one block, else from this process (a single block
    gains nothing from workers; WordPiece is a TensorFlow op that each
    worker would have to load)."""
    workers = options.workers or available_cores()
    head = list(itertools.islice(blocks, 2))
    blocks = itertools.chain(head, blocks)
    if workers > 1 and len(head) > 1 and isinstance(tokenizer, SentencePieceTokenizer):
        model_file = str(tokenizer_dir / SentencePieceTokenizer.model_file)
        with EncoderPool(
            model_file, workers, max_length=options.max_length, dtype=dtype
        ) as pool:
            yield pool.map(blocks)
        return
    yield (
        encode_block(
            tokenizer.encode,
            source,
            target,
            lines,
            max_length=options.max_length,
            dtype=dtype,
            encode_target=getattr(tokenizer, "encode_target", None),
        )
        for lines, source, target in blocks
    )


def _encode_train(
    staging: Path, source: SplitSource, tokenizer, options, out: Path, log
) -> dict[str, Any]:
    """Pass 2 over the training split: the kept pairs into the store."""
    dtype = token_dtype(tokenizer.vocab_size)
    writer = SplitWriter(staging, "train", dtype, out)
    empty: list[int] = []
    too_long: list[int] = []
    progress = console.Progress(log, source.origin)
    blocks = (
        (range(b.first_line, b.first_line + len(b.source)), b.source, b.target)
        for b in source.blocks()
    )
    tokenizer_dir = staging / TOKENIZER_DIR
    with _encoded(blocks, tokenizer, tokenizer_dir, options, dtype) as results:
        for result in results:
            writer.append(result)
            empty += result.empty_lines
            too_long += result.too_long_lines
            progress.add(result.pairs_read)
    info = writer.close()
    report = FilterReport(info["pairs"], empty, too_long)
    report.log_and_check(source.origin, log)
    return {**info, "origin": source.origin, "filter": dataclasses.asdict(report)}


def _encode_evaluation(
    staging: Path,
    name: str,
    corpus: ParallelCorpus,
    tokenizer,
    dtype: str,
    out: Path,
) -> dict[str, Any]:
    """An evaluation split: every pair (never filtered), and its text."""
    block = encode_corpus(
        tokenizer.encode,
        corpus,
        max_length=None,
        dtype=dtype,
        encode_target=getattr(tokenizer, "encode_target", None),
    )
    writer = SplitWriter(staging, name, dtype, out)
    writer.append(block)
    info = writer.close()
    info["files"].update(write_evaluation_text(staging, name, corpus, out))
    return {**info, "origin": corpus.origin}


def _check_unchanged(records: list[dict[str, Any]]) -> None:
    """A source file rewritten while it was read would leave a store of
    neither version."""
    for record in records:
        stat = os.stat(record["path"])
        if (stat.st_size, stat.st_mtime_ns) != (record["size"], record["mtime_ns"]):
            raise DataError(
                f"{record['path']} changed while it was being prepared "
                f"({record['size']:,} bytes before, {stat.st_size:,} now); nothing "
                "was written. Run prepare again once it is final."
            )


def _summary(store: TokenStore, seconds: float) -> str:
    splits = store.manifest["splits"]
    train = splits["train"]
    size = sum(f.stat().st_size for f in store.path.rglob("*") if f.is_file())
    others = "".join(
        f", {name} {splits[name]['pairs']:,}" for name in EVAL_SPLITS if name in splits
    )
    return (
        f"prepared {store.path}: train {train['pairs']:,} pairs "
        f"({train['tokens']['source']:,} + {train['tokens']['target']:,} tokens)"
        f"{others}; {size / 2**20:,.1f} MiB; {seconds:.1f}s "
        f"({train['pairs'] / max(seconds, 1e-9):,.0f} pairs/s); fingerprint "
        f"{store.fingerprint[:12]}"
    )
