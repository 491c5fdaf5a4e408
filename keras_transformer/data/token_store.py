"""A prepared token store: a corpus's token ids in memory-mapped flat files.

`keras-transformer prepare` (`data.prepare`) writes a store once; `train`
opens it in about a second whatever its size, every process of a
multi-worker run maps the same files (the operating system's page cache
holds them once), and a batch reads only its own rows. The design is
fairseq's binarized datasets (one flat file of ids and an index of offsets
per language), written afresh.

Layout of a store directory, format version 1 (`FORMAT_VERSION`):

    manifest.json              written last: its presence marks a whole store
    tokenizer/                 the joint tokenizer the ids belong to
    SPLIT.SIDE.tokens          every pair's ids of SPLIT (train, valid, test)
                               on SIDE (source, target), one after another,
                               no BOS/EOS: uint16 when the vocabulary fits
                               in 65,536 ids, else int32; little-endian, no
                               header
    SPLIT.SIDE.index           int64, pairs + 1 offsets: pair i is
                               tokens[index[i]:index[i + 1]]
    SPLIT.text.json            valid and test only: their sentences and line
                               numbers (evaluation scores text, not ids)

`manifest.json` holds the format and its version, the package version,
`key` (the SHA-256 of the inputs and settings: `prepare` finds a store by
it), `fingerprint` (the SHA-256 of the content: a run's identity), the
settings (tokenizer, vocabulary size, tokenizer sample, seed, max length,
lenient UTF-8), each source file's path, size, modification time and
SHA-256, the tokenizer's kind, vocabulary size and SHA-256, the token type,
and per split its pair and token counts, its longest pair, every file's
size and SHA-256, and for the training split the filter report (the line
numbers of the empty and over-long pairs dropped).

`open_store` refuses, with a message that names the file and what was
expected: a directory that is not a store, another format version, a
tokenizer other than the one the ids were encoded with, a file of another
size than the manifest says (truncated), an index whose offsets do not
rise from 0 to the token count in steps of at most the longest pair
(damaged), a file whose SHA-256 is not the manifest's (its bytes changed,
however its size), a manifest whose fingerprint does not match what it
lists (an edited entry), and a source file that changed after the store
was made. A file's SHA-256 is computed once per version of the file and
remembered (`digests`), so opening a store again costs a stat per file;
`verify=True` hashes every file regardless (`prepare` does, before reusing
a store).
"""

from __future__ import annotations

import dataclasses
import errno
import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any

import numpy as np

from keras_transformer.data.digests import file_sha256, remember_sha256
from keras_transformer.data.text_files import DataError, ParallelCorpus, sha256_file
from keras_transformer.data.token_pairs import SIDES, TokenPairs
from keras_transformer.data.tokenizer import tokenizer_sha256
from keras_transformer.utils.atomic_files import atomic_write_text
from keras_transformer.utils.version import __version__

__all__ = [
    "FORMAT",
    "FORMAT_VERSION",
    "MANIFEST",
    "SplitWriter",
    "StoreError",
    "StoreWriteError",
    "TokenStore",
    "open_store",
    "store_fingerprint",
    "token_dtype",
    "write_evaluation_text",
    "write_manifest",
]

FORMAT = "keras-transformer token store"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
TOKENIZER_DIR = "tokenizer"
EVAL_SPLITS = ("valid", "test")
_CHECK_PAIRS = 1 << 22  # Offsets read at a time when an index is checked.


class StoreError(DataError):
    """A store that training must not read (the message says why)."""


class StoreWriteError(OSError):
    """A file of a store could not be written (a full disk, most often);
    nothing of the new store was kept."""

    def __init__(self, path: Path, error: OSError, out: Path):
        super().__init__(error.errno, error.strerror or str(error))
        self.path, self.out = Path(path), Path(out)

    def __str__(self) -> str:
        reason = self.strerror
        if self.errno == errno.ENOSPC:
            reason += " (the disk is full)"
        return (
            f"could not write {self.path.name} of the store {self.out}: {reason}. "
            f"Nothing partial was kept ({self.out} is as it was); free some "
            "space and run the same command again."
        )


def token_dtype(vocab_size: int) -> str:
    """uint16 when every id fits (fairseq's choice too), else int32."""
    return "uint16" if vocab_size <= 2**16 else "int32"


def store_fingerprint(manifest: dict[str, Any]) -> str:
    """SHA-256 of what a store holds: its format, tokenizer, token type and
    every file's digest. Equal fingerprints, equal training data."""
    content = {
        "format_version": manifest["format_version"],
        "tokenizer": manifest["tokenizer"]["sha256"],
        "token_dtype": manifest["token_dtype"],
        "splits": {
            name: {
                "pairs": split["pairs"],
                "files": {f: info["sha256"] for f, info in split["files"].items()},
            }
            for name, split in sorted(manifest["splits"].items())
        },
    }
    return hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()


# --- writing ---------------------------------------------------------------------


class _HashedFile:
    """A file written once, front to back, hashed as it goes."""

    def __init__(self, path: Path, out: Path):
        self.path, self._out = path, out
        self._digest = hashlib.sha256()
        self.size = 0
        self._handle = self._guard(lambda: open(path, "wb"))

    def _guard(self, action):
        try:
            return action()
        except OSError as error:
            raise StoreWriteError(self.path, error, self._out) from error

    def write(self, data) -> None:
        """Append bytes, or a contiguous array's bytes."""
        view = memoryview(data).cast("B")
        self._digest.update(view)
        self.size += view.nbytes
        self._guard(lambda: self._handle.write(view))

    def close(self) -> dict[str, Any]:
        def flush():
            self._handle.flush()
            os.fsync(self._handle.fileno())
            self._handle.close()

        self._guard(flush)
        return {"bytes": self.size, "sha256": self._digest.hexdigest()}


class SplitWriter:
    """Appends encoded blocks of one split to its token and index files."""

    def __init__(self, directory: Path, split: str, dtype: str, out: Path):
        self.split, self.dtype = split, dtype
        self.pairs = 0
        self.longest = 0  # Tokens the longest pair needs (shifted target).
        self._files = {}
        self._ends = dict.fromkeys(SIDES, 0)
        for side in SIDES:
            for kind in ("tokens", "index"):
                name = f"{split}.{side}.{kind}"
                self._files[name] = _HashedFile(directory / name, out)
            self._files[f"{split}.{side}.index"].write(np.zeros(1, "<i8").tobytes())

    def append(self, block) -> None:
        """Add an `EncodedBlock` (or anything with its four arrays)."""
        arrays = {
            "source": (block.source_ids, block.source_lengths),
            "target": (block.target_ids, block.target_lengths),
        }
        for side, (ids, lengths) in arrays.items():
            offsets = self._ends[side] + np.cumsum(lengths, dtype=np.int64)
            little = np.dtype(self.dtype).newbyteorder("<")
            self._files[f"{self.split}.{side}.tokens"].write(
                np.ascontiguousarray(ids, dtype=little)
            )
            self._files[f"{self.split}.{side}.index"].write(offsets.astype("<i8"))
            if len(offsets):
                self._ends[side] = int(offsets[-1])
        if len(block.source_lengths):
            needed = np.maximum(block.source_lengths, block.target_lengths + 1)
            self.longest = max(self.longest, int(needed.max()))
        self.pairs += len(block.source_lengths)

    def close(self) -> dict[str, Any]:
        """Flush every file; return the split's manifest entry."""
        files = {name: file.close() for name, file in self._files.items()}
        return {
            "pairs": self.pairs,
            "tokens": dict(self._ends),
            "longest": self.longest,
            "files": files,
        }


def write_evaluation_text(
    directory: Path, split: str, corpus: ParallelCorpus, out: Path
) -> dict[str, Any]:
    """`SPLIT.text.json`: an evaluation split's sentences and line numbers
    (read back by `TokenStore.eval_corpus`); returns its manifest entry."""
    text = {
        "source": corpus.source,
        "target": corpus.target,
        "line_numbers": corpus.line_numbers,
    }
    name = f"{split}.text.json"
    file = _HashedFile(directory / name, out)
    file.write(json.dumps(text, ensure_ascii=False).encode("utf-8"))
    return {name: file.close()}


def write_manifest(directory: Path, manifest: dict[str, Any], out: Path) -> None:
    """The manifest, with its fingerprint, last (it marks a whole store)."""
    manifest = {**manifest, "fingerprint": store_fingerprint(manifest)}
    path = directory / MANIFEST
    try:
        atomic_write_text(path, json.dumps(manifest, indent=1) + "\n")
    except OSError as error:
        raise StoreWriteError(path, error, out) from error


def new_manifest(**fields: Any) -> dict[str, Any]:
    """The fields every manifest starts with, then `fields`."""
    return {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "package_version": __version__,
        **fields,
    }


# --- reading ---------------------------------------------------------------------


class _StoredPairs(TokenPairs):
    """`TokenPairs` over a store's mapped files. Pickles as its path, so a
    data-loading worker process maps the files again instead of copying."""

    def __init__(self, store: TokenStore, split: str):
        self._where = (str(store.path), split, store.fingerprint)
        info = store.manifest["splits"][split]
        arrays = []
        for side in SIDES:
            tokens = store.path / f"{split}.{side}.tokens"
            index = store.path / f"{split}.{side}.index"
            arrays += [
                _map(tokens, store.manifest["token_dtype"], info["tokens"][side]),
                _map(index, "<i8", info["pairs"] + 1),
            ]
        self._index_paths = {
            side: store.path / f"{split}.{side}.index" for side in SIDES
        }
        names = {side: str(store.path / f"{split}.{side}.tokens") for side in SIDES}
        super().__init__(*arrays, vocab_size=store.vocab_size, names=names)

    def _offsets_block(self, side: str, start: int, stop: int) -> np.ndarray:
        count = stop + 1 - start
        return np.fromfile(self._index_paths[side], "<i8", count, offset=8 * start)

    def __reduce__(self):
        return _reopen_pairs, self._where


def _reopen_pairs(path: str, split: str, fingerprint: str) -> TokenPairs:
    store = open_store(path, check_sources=False)
    if store.fingerprint != fingerprint:
        raise StoreError(
            f"{path} was replaced (prepare --overwrite?) after this run opened "
            f"it: fingerprint {store.fingerprint[:12]}, the run's {fingerprint[:12]}. "
            "A run reads one store to its end; start it again to train on the new one."
        )
    return store.pairs(split)


def _map(path: Path, dtype: str, count: int) -> np.ndarray:
    if count == 0:  # An empty file cannot be mapped.
        return np.zeros(0, dtype)
    return np.memmap(path, dtype=dtype, mode="r", shape=(count,))


@dataclasses.dataclass
class TokenStore:
    """An opened store (see the module doc): `pairs(split)` maps its ids,
    `eval_corpus(split)` gives back the text of valid and test."""

    path: Path
    manifest: dict[str, Any]

    @property
    def fingerprint(self) -> str:
        return self.manifest["fingerprint"]

    @property
    def key(self) -> str:
        return self.manifest["key"]

    @property
    def settings(self) -> dict[str, Any]:
        return self.manifest["settings"]

    @property
    def vocab_size(self) -> int:
        return self.manifest["tokenizer"]["vocab_size"]

    @property
    def splits(self) -> list[str]:
        return list(self.manifest["splits"])

    @property
    def tokenizer_dir(self) -> Path:
        return self.path / TOKENIZER_DIR

    def origin(self, split: str = "train") -> str:
        return self.manifest["splits"][split]["origin"]

    def pairs(self, split: str = "train") -> TokenPairs:
        """The split's pairs, mapped from the files (nothing is read yet)."""
        return _StoredPairs(self, split)

    def tokenizer(self):
        """The tokenizer the ids were encoded with; one of another size than
        the manifest's is refused (the model is built to its size)."""
        from keras_transformer.data.tokenizer import load_tokenizer

        tokenizer = load_tokenizer(self.tokenizer_dir)
        if tokenizer.vocab_size != self.vocab_size:
            raise StoreError(
                f"{self.tokenizer_dir} has {tokenizer.vocab_size:,} pieces, but "
                f"{self.path / MANIFEST} says the ids were encoded with "
                f"{self.vocab_size:,}. Prepare the store again."
            )
        return tokenizer

    def eval_corpus(self, split: str) -> ParallelCorpus | None:
        """The text of `split` (valid or test), or None without it."""
        if split not in self.manifest["splits"] or split not in EVAL_SPLITS:
            return None
        path = self.path / f"{split}.text.json"
        text = json.loads(path.read_text(encoding="utf-8"))
        return ParallelCorpus(
            text["source"], text["target"], self.origin(split), text["line_numbers"]
        )

    def filter_report(self) -> dict[str, Any]:
        return self.manifest["splits"]["train"]["filter"]

    def line_numbers(self, split: str = "train") -> np.ndarray:
        """The line (or example) number of each pair of `split`: for the
        training split, the lines the filter report does not list, in
        order. (An array of the split's size: for inspection, not training.)"""
        corpus = self.eval_corpus(split)
        if corpus is not None:
            return np.asarray(corpus.line_numbers, np.int64)
        report = self.filter_report()
        dropped = np.asarray(report["empty_lines"] + report["too_long_lines"])
        read = report["kept"] + len(dropped)
        return np.setdiff1d(np.arange(1, read + 1), dropped)


def open_store(
    path: str | os.PathLike, *, check_sources: bool = True, verify: bool = False
) -> TokenStore:
    """Open the store in `path` after the checks of the module doc.

    Every file's SHA-256 is compared with the manifest's: hashed once per
    version of the file and then remembered (`digests`), so a store opened
    before costs a stat per file; `verify` hashes every file regardless.
    `check_sources`: refuse a store whose source files still exist but
    changed since it was made (a stat, and a SHA-256 only when the size or
    time changed). Raises StoreError naming the file and what was expected."""
    path = Path(path)
    manifest = _read_manifest(path)
    _check_fingerprint(path, manifest)
    store = TokenStore(path, manifest)
    _check_tokenizer(store)
    for split, info in manifest["splits"].items():
        for name, expected in info["files"].items():
            _check_size(path / name, expected["bytes"])
        for side in SIDES:  # Read whole, and hashed, by their own check.
            _check_index(path / f"{split}.{side}.index", info, side)
        for name, expected in info["files"].items():
            if not name.endswith(".index"):
                _check_digest(path / name, expected["sha256"], verify)
    if check_sources:
        _check_sources(store)
    return store


def holds_store_manifest(path: Path) -> bool:
    """Whether `path/manifest.json` names itself a token store's (however
    damaged the rest): what `prepare --overwrite` may replace. A training
    run's directory also holds a `manifest.json`, of another format."""
    try:
        manifest = json.loads((path / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(manifest, dict) and manifest.get("format") == FORMAT


def _read_manifest(path: Path) -> dict[str, Any]:
    manifest_path = path / MANIFEST
    if not manifest_path.is_file():
        raise StoreError(
            f"{path} is not a prepared token store: {manifest_path} is missing "
            "(an interrupted prepare leaves none). Make one with "
            f"keras-transformer prepare ... --out {path}"
        )
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    except ValueError as error:
        raise StoreError(f"{manifest_path} is unreadable ({error}).") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise StoreError(f"{manifest_path} is not the manifest of a token store.")
    version = manifest.get("format_version")
    if version != FORMAT_VERSION:
        raise StoreError(
            f"{path} is a token store of format version {version}; this version "
            f"of keras-transformer ({__version__}) reads format version "
            f"{FORMAT_VERSION}. Prepare it again with this version "
            "(keras-transformer prepare)."
        )
    missing = _missing_field(manifest)
    if missing:
        raise StoreError(
            f"{manifest_path} is damaged: it lacks {missing}, or holds something "
            "else there. Prepare the store again."
        )
    return manifest


# The fields a reader relies on: a name maps to the type of its value, or to
# the fields of a dictionary; "*" stands for every key of one.
_SPLIT_FIELDS = {
    "pairs": int,
    "longest": int,
    "origin": str,
    "tokens": {side: int for side in SIDES},
    "files": {"*": {"bytes": int, "sha256": str}},
}
_MANIFEST_FIELDS = {
    "fingerprint": str,
    "key": str,
    "settings": dict,
    "token_dtype": str,
    "tokenizer": {"sha256": str, "vocab_size": int},
    "splits": {"train": {**_SPLIT_FIELDS, "filter": dict}, "*": _SPLIT_FIELDS},
}


def _missing_field(value: Any, fields: Any = None, where: str = "") -> str | None:
    """The first field of `fields` that `value` lacks or holds in another
    type, as a path (`splits.train.tokens.source`), or None."""
    fields = _MANIFEST_FIELDS if fields is None else fields
    if not isinstance(fields, dict):
        return None if isinstance(value, fields) else where
    if not isinstance(value, dict):
        return where or "everything"
    for name, inner in fields.items():
        names = [key for key in value if key not in fields] if name == "*" else [name]
        for key in names:
            if key not in value:
                return f"{where}.{key}".lstrip(".")
            found = _missing_field(value[key], inner, f"{where}.{key}")
            if found:
                return found.lstrip(".")
    if "splits" in fields:  # Each split's four files.
        for split, info in value["splits"].items():
            for side in SIDES:
                for kind in ("tokens", "index"):
                    if f"{split}.{side}.{kind}" not in info["files"]:
                        return f"splits.{split}.files.{split}.{side}.{kind}"
    return None


def remember_digests(path: Path, manifest: dict[str, Any]) -> None:
    """Remember the digests a writer computed for the store it just put in
    `path`, so that opening it does not hash what was just hashed."""
    for info in manifest["splits"].values():
        for name, written in info["files"].items():
            remember_sha256(path / name, written["sha256"])


def _check_digest(path: Path, expected: str, fresh: bool) -> None:
    """The file's SHA-256 against the manifest's: remembered per version of
    the file (a stat when opened before), or hashed afresh."""
    digest = sha256_file(path) if fresh else file_sha256(path)[1]
    if digest != expected:
        raise StoreError(
            f"{path} is damaged: its SHA-256 differs from the one in the "
            f"manifest (its bytes changed since the store was made). Prepare "
            "the store again."
        )


def _check_fingerprint(path: Path, manifest: dict[str, Any]) -> None:
    """The manifest's fingerprint covers its tokenizer and file digests: an
    edited entry (a tokenizer swapped with its digest) shows here."""
    if store_fingerprint(manifest) != manifest["fingerprint"]:
        raise StoreError(
            f"{path / MANIFEST} was edited: its fingerprint does not match the "
            "tokenizer and files it lists, so the ids may not be the "
            "tokenizer's. Prepare the store again."
        )


def _check_tokenizer(store: TokenStore) -> None:
    expected = store.manifest["tokenizer"]["sha256"]
    directory = store.tokenizer_dir
    actual = tokenizer_sha256(directory) if directory.is_dir() else "missing"
    if actual != expected:
        raise StoreError(
            f"{directory} is not the tokenizer the ids of {store.path} were "
            f"encoded with (SHA-256 {actual[:12]}, the manifest says "
            f"{expected[:12]}): the ids would name other pieces. Prepare the "
            "store again."
        )


def _check_size(path: Path, expected: int) -> None:
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        raise StoreError(
            f"{path} is missing (the manifest lists it). Prepare the store again."
        ) from None
    if size != expected:
        what = "truncated" if size < expected else "damaged"
        raise StoreError(
            f"{path} is {what}: {size:,} bytes, the manifest says {expected:,} "
            "(an interrupted copy?). Copy or prepare the store again."
        )


def _check_index(path: Path, info: dict[str, Any], side: str) -> None:
    """Offsets rise from 0 to the token count in steps of at most the
    longest pair, and the file's SHA-256 is the manifest's (a damaged
    offset can still rise); read in blocks through plain reads, not the
    mapping."""
    pairs, tokens, longest = info["pairs"], info["tokens"][side], info["longest"]
    previous = 0  # What offset 0 must be, then the last offset read.
    digest = hashlib.sha256()
    for start in range(0, pairs + 1, _CHECK_PAIRS):
        block = np.fromfile(
            path, "<i8", count=min(_CHECK_PAIRS, pairs + 1 - start), offset=8 * start
        )
        digest.update(block.tobytes())
        before = np.concatenate([[previous], block[:-1]])
        steps = block - before
        bad = np.flatnonzero((steps < 0) | (steps > longest))
        if start == 0 and block[0] != 0:
            bad = np.zeros(1, np.int64)
        if bad.size:
            where = int(bad[0])
            raise StoreError(
                f"{path} is damaged: offset {start + where} is {int(block[where])}, "
                f"the one before {int(before[where])}; offsets rise from 0 in steps "
                f"of at most {longest} (the longest pair). Prepare the store again."
            )
        previous = int(block[-1])
    if previous != tokens:
        raise StoreError(
            f"{path} is damaged: its last offset is {previous:,}, the manifest "
            f"counts {tokens:,} tokens. Prepare the store again."
        )
    if digest.hexdigest() != info["files"][path.name]["sha256"]:
        raise StoreError(
            f"{path} is damaged: its offsets rise as they should, but its SHA-256 "
            "differs from the manifest's, so some pair would start or end in the "
            "wrong place. Prepare the store again."
        )


def _check_sources(store: TokenStore) -> None:
    for source in store.manifest.get("sources", []):
        path = Path(source["path"])
        try:
            stat = path.stat()
        except OSError:
            continue  # Moved or deleted: the store holds the data on its own.
        if (stat.st_size, stat.st_mtime_ns) == (source["size"], source["mtime_ns"]):
            continue
        if stat.st_size == source["size"] and sha256_file(path) == source["sha256"]:
            continue  # Touched, not changed.
        raise StoreError(
            f"{path} changed after the store {store.path} was made from it "
            f"({source['size']:,} bytes, SHA-256 {source['sha256'][:12]} then; "
            f"{stat.st_size:,} bytes now): the store holds the old text. Prepare "
            "it again (keras-transformer prepare ... --overwrite)."
        )
