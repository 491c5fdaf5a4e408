"""Local text files: plain or gzip, one sentence per line, or TSV pairs.

Every reader of parallel text returns a `ParallelCorpus`: two equally long
lists of sentences plus, for each pair, its 1-based line number in the
original files, so that later filtering of training pairs can still point the
user at the offending line.

Conventions shared by all file readers:

* A file is plain text or gzip. Gzip is recognised by its magic bytes
  (``1f 8b``), not by the file name: a plain file called ``x.gz`` is read as
  plain text and a gzip file called ``x.txt`` is decompressed.
* Lines end with ``\\n``; one trailing ``\\r`` per line (CRLF files) is removed.
  No other character splits a line (unlike `str.splitlines`, a form feed or
  U+2028 inside a sentence stays inside it). A final line without a newline
  counts as a line; an empty file has no lines. A file with more bare
  ``\r`` (not followed by ``\n``) than ``\n`` uses CR line ends (classic Mac)
  and raises `DataError` naming the file and the first one; a line-count
  mismatch names any bare ``\r`` inside a line.
* A UTF-8 byte-order mark at the very start of a file is removed.
* Nothing else is changed: no stripping of spaces, no Unicode normalisation,
  and no line is dropped. Empty or over-long training pairs are filtered
  elsewhere; evaluation sets must keep every line.
* Text must be UTF-8. Invalid bytes raise `DataError` naming the file, the
  1-based line and the byte offset. With ``lenient_utf8=True`` (``--lenient-utf8``
  on the command line) they are replaced with U+FFFD instead, and a
  `UnicodeWarning` (via `warnings.warn`) reports, per file, how many lines
  were affected and the first of them.
* A NUL byte (``\\x00``) raises `DataError` naming the file, line and byte, in
  lenient mode too. NUL is valid UTF-8 but never part of a sentence: it means
  a binary or UTF-16 file, and replacing or keeping it would only hide that.

Every problem with the input (missing file, unequal line counts, bad
encoding, NUL byte, malformed TSV) raises `DataError`, a `ValueError`, with a
message that names the file involved. Checks are explicit ``raise``
statements, so they also run under ``python -O``.

Only the standard library is imported here.
"""

from __future__ import annotations

import gzip
import os
import re
import warnings
import zlib
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "DataError",
    "ParallelCorpus",
    "decode_text_lines",
    "read_parallel_files",
    "read_text_lines",
    "read_tsv",
]

_GZIP_MAGIC = b"\x1f\x8b"
_UTF8_BOM = "\ufeff"
_NUL = b"\x00"
_BARE_CR = re.compile(rb"\r(?!\n)")


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
    return _gunzip(path, raw)


def _gunzip(name: str | Path, raw: bytes) -> tuple[bytes, bool]:
    if raw[:2] != _GZIP_MAGIC:
        return raw, False
    try:
        return gzip.decompress(raw), True
    except (OSError, EOFError, zlib.error) as error:
        raise DataError(
            f"{name} starts with the gzip signature but is not a valid gzip "
            f"file (corrupt or truncated?): {error}"
        ) from error


def _position(data: bytes, offset: int, is_gzip: bool) -> str:
    """'line L, byte B of that line (byte offset O in the file)', 1-based."""
    line_start = data.rfind(b"\n", 0, offset) + 1
    line_number = data.count(b"\n", 0, offset) + 1
    where = "decompressed data" if is_gzip else "file"
    return (
        f"line {line_number}, byte {offset - line_start + 1} of that line "
        f"(byte offset {offset} in the {where})"
    )


def _check_no_nul(path: str | Path, data: bytes, is_gzip: bool) -> None:
    # Checked on the bytes: in UTF-8 a 0x00 byte is always U+0000 itself.
    offset = data.find(_NUL)
    if offset != -1:
        raise DataError(
            f"{path}: NUL byte (\\x00) at {_position(data, offset, is_gzip)}. "
            "Text files never contain NUL; is this a binary or UTF-16 file? "
            "It is rejected with --lenient-utf8 too."
        )


def _first_bare_cr(data: bytes) -> int:
    """Offset of the first '\\r' not followed by '\\n', or -1."""
    match = _BARE_CR.search(data)
    return match.start() if match else -1


def _check_line_ends(path: Path, data: bytes, is_gzip: bool) -> None:
    # More bare CRs than newlines: the CRs are the line ends (classic Mac
    # files), and the file would read as a few huge lines. A stray CR
    # inside a sentence of an LF file stays text (see the module notes).
    bare = data.count(b"\r") - data.count(b"\r\n")
    # A file's last CR ends its last line either way: not counted against it.
    if bare - data.endswith(b"\r") > data.count(b"\n"):
        offset = _first_bare_cr(data)
        raise DataError(
            f"{path}: lines end with a bare carriage return (\\r without \\n, "
            f"classic Mac line ends): {bare} of them, the first at "
            f"{_position(data, offset, is_gzip)}. Only \\n or \\r\\n ends a "
            "line here; convert the file, e.g. tr '\\r' '\\n' < IN > OUT."
        )


def _bare_cr_hint(path: Path, lines: list[str]) -> str:
    """Why line counts may differ: CRs that some editor meant as line ends."""
    number = next((n for n, line in enumerate(lines, 1) if "\r" in line), None)
    if number is None:
        return ""
    return (
        f" {path} has a bare carriage return (\\r without \\n) inside line "
        f"{number}: if it was meant as a line end, convert it to \\n."
    )


def _split_lines(text: str) -> list[str]:
    """Split on '\\n' only, dropping one trailing '\\r' per line."""
    if not text:
        return []
    lines = text.split("\n")
    if lines[-1] == "":  # The file ends with a newline: no extra line.
        lines.pop()
    return [line[:-1] if line.endswith("\r") else line for line in lines]


def _decode_leniently(data: bytes) -> tuple[list[str], list[int]]:
    """Lines with invalid bytes replaced, and the 1-based numbers of those."""
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
    return lines, bad


def _read_lines(path: Path, lenient_utf8: bool) -> tuple[list[str], list[int]]:
    """Lines of a text file and the 1-based numbers of lines with bad UTF-8.

    The second list is empty unless `lenient_utf8` is true and invalid bytes
    were replaced.
    """
    data, is_gzip = _read_bytes(path)
    return _decode_lines(path, data, is_gzip, lenient_utf8)


def _decode_lines(
    name: str | Path, data: bytes, is_gzip: bool, lenient_utf8: bool
) -> tuple[list[str], list[int]]:
    _check_no_nul(name, data, is_gzip)
    _check_line_ends(name, data, is_gzip)
    try:
        lines, bad = _split_lines(data.decode("utf-8")), []
    except UnicodeDecodeError as error:
        if not lenient_utf8:
            raise DataError(
                f"{name}: invalid UTF-8 at {_position(data, error.start, is_gzip)}: "
                f"{error.reason}. Pass --lenient-utf8 (lenient_utf8=True from "
                "Python) to replace invalid bytes with U+FFFD."
            ) from error
        lines, bad = _decode_leniently(data)
    if lines and lines[0].startswith(_UTF8_BOM):
        lines[0] = lines[0][1:]
    return lines, bad


def _warn_replaced(path: str | Path, bad_lines: list[int]) -> None:
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
    line ends, BOM, NUL bytes and invalid UTF-8 as `read_parallel_files`."""
    path = Path(path)
    lines, bad = _read_lines(path, lenient_utf8)
    _warn_replaced(path, bad)
    return lines


def decode_text_lines(
    data: bytes, name: str = "<stdin>", *, lenient_utf8: bool = False
) -> list[str]:
    """`read_text_lines` for bytes that are not in a file (standard input):
    the same checks, with `name` in every message."""
    data, is_gzip = _gunzip(name, data)
    lines, bad = _decode_lines(name, data, is_gzip, lenient_utf8)
    _warn_replaced(name, bad)
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
            file, contains a NUL byte, contains invalid UTF-8 (unless
            `lenient_utf8`; the message names the file, line and byte
            offset), or if the two files have different numbers of lines
            (the message names both files, both counts and the first line
            number past the end of the shorter).
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
            + _bare_cr_hint(source_path, source)
            + _bare_cr_hint(target_path, target)
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
    of CRLF, byte-order mark, NUL bytes and UTF-8 as `read_parallel_files`.
    Each line must contain exactly one tab; either side may be empty. A
    single, completely empty line at the very end of the file (i.e. the file
    ends with a blank line) is ignored; any other empty line is an error.

    Args:
        path: The TSV file.
        lenient_utf8: If true, replace invalid UTF-8 bytes with U+FFFD and
            issue a `UnicodeWarning` with the number of affected lines.

    Returns:
        The pairs, with `origin` the path and `line_numbers` the 1-based
        line of each pair in the file.

    Raises:
        DataError: If the file is missing, unreadable, contains a NUL byte
            or is not valid UTF-8, or if a line does not have exactly one
            tab (the message names the file and the line number).
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
