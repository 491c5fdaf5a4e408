"""Parallel text sources: local files, Multi30k and TensorFlow Datasets.

Every reader returns a `ParallelCorpus`: two equally long lists of sentences
plus, for each pair, its 1-based line number in the original files (or its
1-based example number for TFDS), so that later filtering of training pairs
can still point the user at the offending line.

Conventions shared by all file readers:

* A file is plain text or gzip. Gzip is recognised by its magic bytes
  (``1f 8b``), not by the file name: a plain file called ``x.gz`` is read as
  plain text and a gzip file called ``x.txt`` is decompressed.
* Lines end with ``\\n``; one trailing ``\\r`` per line (CRLF files) is removed.
  No other character splits a line (unlike `str.splitlines`, a form feed or
  U+2028 inside a sentence stays inside it). A final line without a newline
  counts as a line; an empty file has no lines.
* A UTF-8 byte-order mark at the very start of a file is removed.
* Nothing else is changed: no stripping of spaces, no Unicode normalisation,
  and no line is dropped. Empty or over-long training pairs are filtered
  elsewhere; evaluation sets must keep every line.
* Text must be UTF-8. Invalid bytes raise `DataError` naming the file, the
  1-based line and the byte offset. With ``lenient_utf8=True`` they are
  replaced with U+FFFD instead, and a `UnicodeWarning` (via `warnings.warn`)
  reports, per file, how many lines were affected and the first of them.

Every problem with the input (missing file, unequal line counts, bad
encoding, malformed TSV, failed download, checksum mismatch, unknown split)
raises `DataError`, a `ValueError`, with a message that names the file or URL
involved. Checks are explicit ``raise`` statements, so they also run under
``python -O``.

TensorFlow is never imported here; `load_tfds` imports `tensorflow_datasets`
only when it is called.
"""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import http.client
import os
import re
import tempfile
import urllib.error
import urllib.request
import warnings
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "MULTI30K_SHA256",
    "MULTI30K_SPLITS",
    "MULTI30K_URL",
    "DataError",
    "ParallelCorpus",
    "download_file",
    "load_multi30k",
    "load_tfds",
    "read_parallel_files",
    "read_tsv",
]

MULTI30K_URL = (
    "https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw"
)
"""Base URL of the raw Multi30k task 1 files (``{split}.{lang}.gz``)."""

MULTI30K_SPLITS = {"train": "train", "valid": "val", "test": "test_2016_flickr"}
"""Split name accepted by `load_multi30k` -> file stem in the Multi30k repository."""

MULTI30K_SHA256 = {
    "train.en.gz": "d79cfa999dd4c51d2cb42499b6796d5a882c3a8a961923c25a898c90f8bbd56f",
    "train.de.gz": "726e39b2fa9eb9ffb6dc763fb35a179f80fae06ffc5d28b6ace5faa883de28a6",
    "val.en.gz": "14f7d25ddd868909a9213e361768460edcacdd6ab9d1e77b92560dc10c10dc28",
    "val.de.gz": "f0cba2f995189cf5770f29a8a9a537a3ad3f51657ad873405082ff6863a5e75a",
    "test_2016_flickr.en.gz": (
        "611d361c6334bc7246101d48097c13cf5c4413c5befc793cc629934359d532d9"
    ),
    "test_2016_flickr.de.gz": (
        "9204244e408ccb38d2a55cfcd344df15005fc42a07a6e55ca6c52b6ababb8cc8"
    ),
}
"""SHA-256 of each downloadable Multi30k file (the gzip bytes as served)."""

_MULTI30K_LANGS = ("en", "de")
_CACHE_ENV = "KERAS_TRANSFORMER_CACHE"
_GZIP_MAGIC = b"\x1f\x8b"
_UTF8_BOM = "\ufeff"
_CHUNK_SIZE = 1 << 16
_SHA256_RE = re.compile(r"[0-9a-f]{64}")


class DataError(ValueError):
    """Bad or unavailable input data (files, downloads, dataset names)."""


@dataclass(frozen=True)
class ParallelCorpus:
    """Aligned source/target sentences with their original line numbers.

    Attributes:
        source: Source sentences, one per pair, exactly as in the input
            (without the line terminator).
        target: Target sentences, aligned with `source`.
        origin: Human-readable description of where the pairs came from,
            e.g. the two file paths, for error messages and logs.
        line_numbers: 1-based line number of each pair in the original
            file(s) (the example number for TFDS), aligned with `source`, so
            that code filtering pairs later can report where a pair came from.

    Raises:
        DataError: If the three lists do not have the same length.
    """

    source: list[str]
    target: list[str]
    origin: str
    line_numbers: list[int]

    def __post_init__(self) -> None:
        lengths = (len(self.source), len(self.target), len(self.line_numbers))
        if len(set(lengths)) != 1:
            raise DataError(
                f"ParallelCorpus from {self.origin}: source, target and "
                f"line_numbers must have the same length, got {lengths[0]}, "
                f"{lengths[1]} and {lengths[2]}"
            )

    def __len__(self) -> int:
        """Number of sentence pairs."""
        return len(self.source)


# --------------------------------------------------------------------------
# Local files
# --------------------------------------------------------------------------


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def _read_bytes(path: Path) -> tuple[bytes, bool]:
    """Content of `path` (decompressed if it starts with gzip magic), is_gzip."""
    try:
        with open(path, "rb") as handle:
            raw = handle.read()
    except FileNotFoundError as error:
        raise DataError(f"File not found: {path}") from error
    except IsADirectoryError as error:
        raise DataError(f"Expected a file but found a directory: {path}") from error
    except OSError as error:
        raise DataError(f"Cannot read {path}: {error}") from error
    if raw[:2] != _GZIP_MAGIC:
        return raw, False
    try:
        return gzip.decompress(raw), True
    except (OSError, EOFError, zlib.error) as error:
        raise DataError(
            f"{path} starts with the gzip signature but is not a valid gzip "
            f"file (corrupt or truncated?): {error}"
        ) from error


def _split_lines(text: str) -> list[str]:
    """Split on '\\n' only, dropping one trailing '\\r' per line."""
    if not text:
        return []
    lines = text.split("\n")
    if lines[-1] == "":  # The file ends with a newline: no extra line.
        lines.pop()
    return [line[:-1] if line.endswith("\r") else line for line in lines]


def _read_lines(path: Path, lenient_utf8: bool) -> tuple[list[str], list[int]]:
    """Lines of a text file and the 1-based numbers of lines with bad UTF-8.

    The second list is empty unless `lenient_utf8` is true and invalid bytes
    were replaced.
    """
    data, is_gzip = _read_bytes(path)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        if not lenient_utf8:
            line_start = data.rfind(b"\n", 0, error.start) + 1
            line_number = data.count(b"\n", 0, error.start) + 1
            where = "decompressed data" if is_gzip else "file"
            raise DataError(
                f"{path}: invalid UTF-8 at line {line_number}, byte "
                f"{error.start - line_start + 1} of that line (byte offset "
                f"{error.start} in the {where}): {error.reason}. Pass "
                "lenient_utf8=True to replace invalid bytes with U+FFFD."
            ) from error
        lines, bad = [], []
        raw_lines = data.split(b"\n")
        if raw_lines[-1] == b"":
            raw_lines.pop()
        for number, raw_line in enumerate(raw_lines, start=1):
            try:
                line = raw_line.decode("utf-8")
            except UnicodeDecodeError:
                line = raw_line.decode("utf-8", errors="replace")
                bad.append(number)
            lines.append(line[:-1] if line.endswith("\r") else line)
    else:
        lines, bad = _split_lines(text), []
    if lines and lines[0].startswith(_UTF8_BOM):
        lines[0] = lines[0][1:]
    return lines, bad


def _warn_replaced(path: Path, bad_lines: list[int]) -> None:
    if bad_lines:
        warnings.warn(
            f"{path}: replaced invalid UTF-8 bytes with U+FFFD in "
            f"{_plural(len(bad_lines), 'line')} (first at line {bad_lines[0]})",
            UnicodeWarning,
            stacklevel=3,
        )


def read_text_lines(
    path: str | os.PathLike[str], *, lenient_utf8: bool = False
) -> list[str]:
    """Every line of one text file (plain or gzip), with the same handling of
    line ends, BOM and invalid UTF-8 as `read_parallel_files`."""
    path = Path(path)
    lines, bad = _read_lines(path, lenient_utf8)
    _warn_replaced(path, bad)
    return lines


def read_parallel_files(
    source_path: str | os.PathLike[str],
    target_path: str | os.PathLike[str],
    *,
    lenient_utf8: bool = False,
) -> ParallelCorpus:
    """Read two line-aligned files: line i of one translates line i of the other.

    Each file holds one sentence per line, plain text or gzip (detected by the
    magic bytes). CRLF line ends and a UTF-8 byte-order mark at the start are
    handled; the text is otherwise returned unchanged and no line is dropped,
    empty lines included.

    Args:
        source_path: File of source sentences.
        target_path: File of target sentences, with as many lines.
        lenient_utf8: If true, replace invalid UTF-8 bytes with U+FFFD
            instead of raising. For each file with replacements a
            `UnicodeWarning` is issued with `warnings.warn`, giving the
            number of affected lines and the first of them.

    Returns:
        The pairs, with `origin` ``"<source_path> | <target_path>"`` and
        `line_numbers` ``1..n``.

    Raises:
        DataError: If a file is missing or unreadable, is a corrupt gzip
            file, contains invalid UTF-8 (unless `lenient_utf8`; the message
            names the file, line and byte offset), or if the two files have
            different numbers of lines (the message names both files, both
            counts and the first line number past the end of the shorter).
    """
    source_path, target_path = Path(source_path), Path(target_path)
    source, source_bad = _read_lines(source_path, lenient_utf8)
    target, target_bad = _read_lines(target_path, lenient_utf8)
    if len(source) != len(target):
        shorter, longer = (
            (source_path, target_path)
            if len(source) < len(target)
            else (target_path, source_path)
        )
        first_extra = min(len(source), len(target)) + 1
        raise DataError(
            "Parallel files have different line counts: "
            f"{source_path} has {_plural(len(source), 'line')}, "
            f"{target_path} has {_plural(len(target), 'line')}. "
            f"Line {first_extra} of {longer} is the first with no counterpart "
            f"in {shorter}."
        )
    _warn_replaced(source_path, source_bad)
    _warn_replaced(target_path, target_bad)
    return ParallelCorpus(
        source=source,
        target=target,
        origin=f"{source_path} | {target_path}",
        line_numbers=list(range(1, len(source) + 1)),
    )


def read_tsv(
    path: str | os.PathLike[str], *, lenient_utf8: bool = False
) -> ParallelCorpus:
    """Read ``source<TAB>target`` pairs, one per line.

    Plain text or gzip (detected by the magic bytes), with the same handling
    of CRLF, byte-order mark and UTF-8 as `read_parallel_files`. Each line
    must contain exactly one tab; either side may be empty. A single,
    completely empty line at the very end of the file (i.e. the file ends
    with a blank line) is ignored; any other empty line is an error.

    Args:
        path: The TSV file.
        lenient_utf8: If true, replace invalid UTF-8 bytes with U+FFFD and
            issue a `UnicodeWarning` with the number of affected lines.

    Returns:
        The pairs, with `origin` the path and `line_numbers` the 1-based
        line of each pair in the file.

    Raises:
        DataError: If the file is missing, unreadable or not valid UTF-8, or
            if a line does not have exactly one tab (the message names the
            file and the line number).
    """
    path = Path(path)
    lines, bad = _read_lines(path, lenient_utf8)
    if lines and lines[-1] == "":
        lines.pop()
    source, target = [], []
    for number, line in enumerate(lines, start=1):
        tabs = line.count("\t")
        if tabs != 1:
            preview = line if len(line) <= 60 else line[:57] + "..."
            raise DataError(
                f"{path}, line {number}: expected exactly one tab between source "
                f"and target, found {tabs}: {preview!r}"
            )
        left, right = line.split("\t")
        source.append(left)
        target.append(right)
    _warn_replaced(path, bad)
    return ParallelCorpus(
        source=source,
        target=target,
        origin=str(path),
        line_numbers=list(range(1, len(source) + 1)),
    )


# --------------------------------------------------------------------------
# Downloads
# --------------------------------------------------------------------------


def _sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(_CHUNK_SIZE):
            digest.update(chunk)
    return digest.hexdigest()


def _network_error(url: str, destination: Path, reason: object) -> DataError:
    return DataError(
        f"Could not download {url}: {reason}. If this machine has no network "
        f"access, download the file manually and save it in the directory "
        f"{destination.parent} as {destination.name}."
    )


def download_file(
    url: str,
    destination: str | os.PathLike[str],
    *,
    sha256: str | None = None,
    timeout: float = 60,
) -> Path:
    """Download `url` to the file `destination`, verifying its checksum.

    The data is written to a temporary file in the destination's directory,
    checked, and only then renamed onto `destination` (atomically), so an
    interrupted or corrupt download never leaves a partial file there.

    If `destination` already exists and `sha256` is given, the file is
    hashed: a match returns it without downloading, a mismatch deletes it
    and downloads again. Without `sha256` an existing file is returned as is.

    Args:
        url: What to download (http, https or anything `urllib` opens).
        destination: Path of the file to create (not a directory). Missing
            parent directories are created.
        sha256: Expected SHA-256 hex digest, or None to skip verification.
        timeout: Socket timeout in seconds for the connection and each read.

    Returns:
        `destination` as a `Path`.

    Raises:
        DataError: On a network or HTTP error (with the URL and a hint to
            download the file manually into the destination directory), on a
            truncated download, or on a checksum mismatch (with the URL and
            both digests; nothing is left at `destination`). Also if `sha256`
            is not 64 hex digits or `destination` is a directory.
    """
    destination = Path(destination)
    expected = None
    if sha256 is not None:
        expected = sha256.strip().lower()
        if not _SHA256_RE.fullmatch(expected):
            raise DataError(f"sha256 must be 64 hexadecimal digits, got {sha256!r}")
    if destination.is_dir():
        raise DataError(f"Download destination is a directory: {destination}")
    if destination.exists():
        if expected is None or _sha256_file(destination) == expected:
            return destination
        destination.unlink()  # Stale or corrupt: never leave it in place.

    destination.parent.mkdir(parents=True, exist_ok=True)
    handle, temp_name = tempfile.mkstemp(
        dir=destination.parent, prefix=f".{destination.name}.", suffix=".part"
    )
    temp_path = Path(temp_name)
    try:
        with os.fdopen(handle, "wb") as out:
            actual, size, announced = _fetch(url, destination, out, timeout)
        if announced is not None and size != announced:
            raise _network_error(
                url,
                destination,
                f"incomplete download ({size} of {announced} bytes)",
            )
        if expected is not None and actual != expected:
            raise DataError(
                f"Checksum mismatch for {url}: expected SHA-256 {expected}, got "
                f"{actual} ({size} bytes). The download was discarded and "
                f"nothing was written to {destination}."
            )
        os.chmod(temp_path, 0o644)  # mkstemp creates 0600.
        os.replace(temp_path, destination)
    finally:
        temp_path.unlink(missing_ok=True)
    return destination


def _fetch(
    url: str, destination: Path, out: Any, timeout: float
) -> tuple[str, int, int | None]:
    """Stream `url` into `out`; return (sha256 hex, byte count, Content-Length)."""
    try:
        response = urllib.request.urlopen(url, timeout=timeout)
    except urllib.error.HTTPError as error:
        raise _network_error(
            url, destination, f"HTTP {error.code} {error.reason}"
        ) from error
    except (OSError, http.client.HTTPException, ValueError) as error:
        raise _network_error(url, destination, error) from error
    digest = hashlib.sha256()
    size = 0
    with response:
        length = response.headers.get("Content-Length")
        announced = int(length) if length and length.isdigit() else None
        while True:
            try:
                chunk = response.read(_CHUNK_SIZE)
            except (OSError, http.client.HTTPException) as error:
                raise _network_error(url, destination, error) from error
            if not chunk:
                break
            digest.update(chunk)
            out.write(chunk)  # A local disk error propagates as OSError.
            size += len(chunk)
    return digest.hexdigest(), size, announced


# --------------------------------------------------------------------------
# Multi30k
# --------------------------------------------------------------------------


def _default_cache_dir() -> Path:
    root = os.environ.get(_CACHE_ENV)
    if root:
        return Path(root).expanduser() / "multi30k"
    return Path.home() / ".cache" / "keras_transformer" / "multi30k"


def _local_multi30k_file(data_dir: Path, stem: str, lang: str) -> Path:
    compressed = data_dir / f"{stem}.{lang}.gz"
    plain = data_dir / f"{stem}.{lang}"
    for candidate in (compressed, plain):
        if candidate.is_file():
            return candidate
    if not data_dir.is_dir():
        raise DataError(f"Multi30k data_dir does not exist: {data_dir}")
    raise DataError(
        f"Multi30k file not found: expected {compressed} (or {plain}). "
        f"Download {MULTI30K_URL}/{stem}.{lang}.gz into {data_dir}, or pass "
        "data_dir=None to download into the cache."
    )


def load_multi30k(
    split: str,
    *,
    source_lang: str = "en",
    target_lang: str = "de",
    data_dir: str | os.PathLike[str] | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    base_url: str = MULTI30K_URL,
) -> ParallelCorpus:
    """Load a split of Multi30k task 1 (English-German image captions).

    With `data_dir`, the files ``{data_dir}/{stem}.{lang}.gz`` (or the same
    name without ``.gz``) are read and nothing is downloaded or checksummed.
    Otherwise the gzip files are taken from `cache_dir`, downloading any that
    are missing (or whose checksum is wrong) from `base_url`; every file is
    verified against `MULTI30K_SHA256` before use.

    Args:
        split: ``"train"`` (29,000 pairs), ``"valid"`` (1,014) or ``"test"``
            (test2016, 1,000). The file stems ``"val"`` and
            ``"test_2016_flickr"`` are accepted too.
        source_lang: ``"en"`` or ``"de"``.
        target_lang: ``"en"`` or ``"de"``, different from `source_lang`.
        data_dir: Directory already holding the files; disables downloading.
        cache_dir: Download cache. Default: ``$KERAS_TRANSFORMER_CACHE/multi30k``
            if that environment variable is set, else
            ``~/.cache/keras_transformer/multi30k``.
        base_url: Where to download ``{stem}.{lang}.gz`` from.

    Returns:
        Every pair of the split, unfiltered, with `line_numbers` ``1..n``.

    Raises:
        DataError: For an unknown split or language (listing the valid
            choices), a missing file in `data_dir` (naming the expected
            path), a failed download or a checksum mismatch, or unaligned
            files.
    """
    stems = set(MULTI30K_SPLITS.values())
    if split in MULTI30K_SPLITS:
        stem = MULTI30K_SPLITS[split]
    elif split in stems:
        stem = split
    else:
        raise DataError(
            f"Unknown Multi30k split {split!r}; valid splits are "
            f"{', '.join(map(repr, MULTI30K_SPLITS))} (or the file stems "
            f"{', '.join(repr(s) for s in MULTI30K_SPLITS.values() if s != 'train')})"
        )
    for role, lang in (("source_lang", source_lang), ("target_lang", target_lang)):
        if lang not in _MULTI30K_LANGS:
            raise DataError(
                f"Unknown Multi30k language {role}={lang!r}; valid languages are "
                f"{', '.join(map(repr, _MULTI30K_LANGS))}"
            )
    if source_lang == target_lang:
        raise DataError(
            f"source_lang and target_lang must differ, both are {source_lang!r}"
        )

    paths = []
    if data_dir is not None:
        for lang in (source_lang, target_lang):
            paths.append(_local_multi30k_file(Path(data_dir), stem, lang))
    else:
        cache = Path(cache_dir) if cache_dir is not None else _default_cache_dir()
        for lang in (source_lang, target_lang):
            name = f"{stem}.{lang}.gz"
            paths.append(
                download_file(
                    f"{base_url.rstrip('/')}/{name}",
                    cache / name,
                    sha256=MULTI30K_SHA256[name],
                )
            )
    corpus = read_parallel_files(paths[0], paths[1])
    return dataclasses.replace(
        corpus,
        origin=f"Multi30k {split} {source_lang}-{target_lang}: {corpus.origin}",
    )


# --------------------------------------------------------------------------
# TensorFlow Datasets
# --------------------------------------------------------------------------


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

    source, target, numbers = [], [], []
    for number, example in enumerate(tfds.as_numpy(dataset), start=1):
        for lang in (src, tgt):
            if lang not in example:
                raise DataError(
                    f"{label}, example {number}: no feature {lang!r}; the "
                    f"example has {sorted(example)!r}"
                )
        source.append(_tfds_text(example[src], f"{label}, example {number}, {src}"))
        target.append(_tfds_text(example[tgt], f"{label}, example {number}, {tgt}"))
        numbers.append(number)
    return ParallelCorpus(
        source=source,
        target=target,
        origin=f"{label} {src}-{tgt}",
        line_numbers=numbers,
    )
