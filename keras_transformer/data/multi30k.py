"""Multi30k task 1 (English-German image captions): local files or download.

Downloads go through `keras.utils.get_file`, which fetches, verifies the
SHA-256 and caches. This module adds what `get_file` leaves out: a file whose
checksum does not match is deleted (`get_file` keeps it), a cache directory
that does not exist yet is created first (`get_file` would otherwise fall
back to ``/tmp/.keras``), and every failure becomes a `DataError` naming the
URL and the destination. Keras is imported only when something is
downloaded.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import socket
import urllib.error
from collections.abc import Iterator
from pathlib import Path

from keras_transformer.data.text_files import (
    DataError,
    ParallelCorpus,
    read_parallel_files,
    sha256_file,
)
from keras_transformer.utils.user_cache import user_cache_root

__all__ = [
    "MULTI30K_SHA256",
    "MULTI30K_SPLITS",
    "MULTI30K_URL",
    "download_file",
    "load_multi30k",
    "multi30k_files",
    "multi30k_origin",
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
_SHA256_RE = re.compile(r"[0-9a-f]{64}")


# --------------------------------------------------------------------------
# Downloads
# --------------------------------------------------------------------------


def _network_error(url: str, destination: Path, reason: object) -> DataError:
    return DataError(
        f"Could not download {url}: {reason}. If this machine has no network "
        f"access, download the file manually and save it in the directory "
        f"{destination.parent} as {destination.name}."
    )


def _failure_reason(error: Exception) -> str:
    # get_file re-raises HTTP and URL errors as a bare Exception whose message
    # is less clear than the original, which it leaves as the context.
    for candidate in (error, error.__cause__, error.__context__):
        if isinstance(candidate, urllib.error.HTTPError):
            return f"HTTP {candidate.code} {candidate.reason}"
        if isinstance(candidate, urllib.error.URLError):
            return str(candidate.reason)
    return str(error) or type(error).__name__


def _expected_sha256(sha256: str | None) -> str | None:
    if sha256 is None:
        return None
    # get_file compares hex digests as strings: lower case only.
    expected = sha256.strip().lower()
    if not _SHA256_RE.fullmatch(expected):
        raise DataError(f"sha256 must be 64 hexadecimal digits, got {sha256!r}")
    return expected


def _prepare_directory(directory: Path) -> None:
    # get_file silently downloads to /tmp/.keras when its cache_dir is not
    # writable, and a directory that does not exist yet counts as such.
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise DataError(
            f"Cannot create the download directory {directory}: {error}"
        ) from error
    if not os.access(directory, os.W_OK):
        raise DataError(f"Download directory is not writable: {directory}")


@contextlib.contextmanager
def _socket_timeout(seconds: float) -> Iterator[None]:
    # get_file has no timeout argument and would wait forever on a stalled
    # server; its urllib sockets take the process-wide default instead.
    previous = socket.getdefaulttimeout()
    socket.setdefaulttimeout(seconds)
    try:
        yield
    finally:
        socket.setdefaulttimeout(previous)


def download_file(
    url: str,
    destination: str | os.PathLike[str],
    *,
    sha256: str | None = None,
    timeout: float = 60,
) -> Path:
    """Download `url` to the file `destination`, verifying its checksum.

    Uses ``keras.utils.get_file(destination.name, url, file_hash=sha256,
    hash_algorithm="sha256", cache_dir=destination.parent, cache_subdir="")``.
    If `destination` already exists and `sha256` is given, the file is
    hashed: a match returns it without downloading, a mismatch downloads it
    again. Without `sha256` an existing file is returned as is.

    After any failure nothing is left at `destination`: `get_file` removes a
    partial download, and a download with the wrong checksum is deleted
    here. (Only a process killed mid-download can leave a partial file; with
    `sha256` the next call detects and replaces it.)

    Args:
        url: What to download (http, https or anything `urllib` opens).
        destination: Path of the file to create (not a directory). Missing
            parent directories are created.
        sha256: Expected SHA-256 hex digest, or None to skip verification.
        timeout: Socket timeout in seconds for the connection and each read.
            `get_file` has no such argument, so it is set as the process-wide
            socket default for the duration of the download.

    Returns:
        `destination` as a `Path`.

    Raises:
        DataError: On a network or HTTP error or a truncated download (with
            the URL and a hint to download the file manually into the
            destination directory), or on a checksum mismatch (with the URL
            and both digests). Also if `sha256` is not 64 hex digits or
            `destination` is a directory or cannot be written.
    """
    # get_file expands "~" in its cache_dir; expand it here too, so that the
    # path it returns matches.
    destination = Path(destination).expanduser()
    expected = _expected_sha256(sha256)
    if destination.is_dir():
        raise DataError(f"Download destination is a directory: {destination}")
    _prepare_directory(destination.parent)

    import keras

    try:
        with _socket_timeout(timeout):
            path = keras.utils.get_file(
                fname=destination.name,
                origin=url,
                file_hash=expected,
                hash_algorithm="sha256",
                cache_dir=str(destination.parent),
                cache_subdir="",
            )
    except Exception as error:  # get_file raises bare Exception and others.
        # A file left behind is a complete download with the wrong checksum:
        # get_file deletes the file on every other failure.
        if expected is not None and destination.is_file():
            actual = sha256_file(destination)
            if actual != expected:
                size = destination.stat().st_size
                destination.unlink()
                raise DataError(
                    f"Checksum mismatch for {url}: expected SHA-256 {expected}, "
                    f"got {actual} ({size} bytes). The download was discarded "
                    f"and nothing was written to {destination}."
                ) from error
        raise _network_error(url, destination, _failure_reason(error)) from error
    if Path(path) != destination:  # get_file chose another directory.
        raise DataError(
            f"keras.utils.get_file saved {url} to {path} instead of {destination}"
        )
    return destination


# --------------------------------------------------------------------------
# Multi30k
# --------------------------------------------------------------------------


def _default_cache_dir() -> Path:
    return user_cache_root() / "multi30k"


def _local_multi30k_file(data_dir: Path, stem: str, lang: str) -> Path:
    compressed = data_dir / f"{stem}.{lang}.gz"
    plain = data_dir / f"{stem}.{lang}"
    for candidate in (compressed, plain):
        if candidate.is_file():
            return candidate
    if not data_dir.is_dir():
        raise DataError(f"Multi30k --data-dir (data_dir) does not exist: {data_dir}")
    raise DataError(
        f"Multi30k file not found: expected {compressed} (or {plain}). "
        f"Download {MULTI30K_URL}/{stem}.{lang}.gz into {data_dir}, or leave "
        "out --data-dir (data_dir=None from Python) to download it into the "
        "cache."
    )


def _multi30k_stem(split: str) -> str:
    if split in MULTI30K_SPLITS:
        return MULTI30K_SPLITS[split]
    if split in MULTI30K_SPLITS.values():
        return split
    stems = (s for s in MULTI30K_SPLITS.values() if s != "train")
    raise DataError(
        f"Unknown Multi30k split {split!r}; valid splits are "
        f"{', '.join(map(repr, MULTI30K_SPLITS))} (or the file stems "
        f"{', '.join(map(repr, stems))})"
    )


def _check_languages(source_lang: str, target_lang: str) -> None:
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
    paths = multi30k_files(
        split,
        source_lang=source_lang,
        target_lang=target_lang,
        data_dir=data_dir,
        cache_dir=cache_dir,
        base_url=base_url,
    )
    corpus = read_parallel_files(*paths)
    return dataclasses.replace(
        corpus, origin=multi30k_origin(split, source_lang, target_lang, corpus.origin)
    )


def multi30k_origin(split: str, source_lang: str, target_lang: str, files: str) -> str:
    """How a Multi30k split is named in logs and errors."""
    return f"Multi30k {split} {source_lang}-{target_lang}: {files}"


def multi30k_files(
    split: str,
    *,
    source_lang: str = "en",
    target_lang: str = "de",
    data_dir: str | os.PathLike[str] | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    base_url: str = MULTI30K_URL,
) -> tuple[Path, Path]:
    """The source and target files of a split, found in `data_dir` or
    downloaded and checked as `load_multi30k` describes (which reads them)."""
    stem = _multi30k_stem(split)
    _check_languages(source_lang, target_lang)
    if data_dir is not None:
        return tuple(
            _local_multi30k_file(Path(data_dir), stem, lang)
            for lang in (source_lang, target_lang)
        )
    cache = Path(cache_dir) if cache_dir is not None else _default_cache_dir()
    paths = []
    for lang in (source_lang, target_lang):
        name = f"{stem}.{lang}.gz"
        paths.append(
            download_file(
                f"{base_url.rstrip('/')}/{name}",
                cache / name,
                sha256=MULTI30K_SHA256[name],
            )
        )
    return tuple(paths)
