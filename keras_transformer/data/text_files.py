"""Local text files: plain or gzip, one sentence per line, or TSV pairs.

Every reader of parallel text returns a `ParallelCorpus`: two equally long
lists of sentences plus, for each pair, its 1-based line number in the
original files, so that later filtering of training pairs can still point the
user at the offending line. `iter_parallel_files` and `iter_tsv` give the
same pairs block by block (`PairBlock`), with the same checks, for corpora
too large to hold: `keras-transformer prepare` streams them. The readers of
whole files collect those blocks, so both paths share every check.

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
import hashlib
import io
import os
import re
import warnings
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

__all__ = [
    "DataError",
    "PairBlock",
    "ParallelCorpus",
    "TextStream",
    "collect_pairs",
    "decode_text_lines",
    "iter_parallel_files",
    "iter_tsv",
    "lines_text",
    "open_text_stream",
    "read_parallel_files",
    "read_text_lines",
    "read_tsv",
    "sha256_file",
]

_GZIP_MAGIC = b"\x1f\x8b"
_UTF8_BOM = "\ufeff"
_NUL = b"\x00"
_BARE_CR = re.compile(rb"\r(?!\n)")
# Bytes that text never holds: C0 controls but tab, line feed, form feed and
# carriage return, and DEL. Over 5% of a file's first 64 KiB: a binary file
# (random bytes hold about 12%; text, none or a stray few).
_CONTROL_BYTES = bytes([*range(0x09), 0x0B, *range(0x0E, 0x20), 0x7F])
_BINARY_SAMPLE = 1 << 16
_BINARY_SHARE = 0.05
_BINARY_MIN = 8  # A stray escape in a short file is not binary.
_LINE_BREAKS = re.compile(r"\r\n|[\r\n]")


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


def sha256_file(path: str | os.PathLike[str]) -> str:
    """The SHA-256 of a file's bytes (read 1 MiB at a time); a file that
    cannot be read is the readers' DataError."""
    digest = hashlib.sha256()
    with _open_bytes(Path(path)) as handle:
        while block := handle.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


# Bytes read at a time. Blocks end at a line end, so a block holds whole
# lines (and whole UTF-8 characters): the checks and the decoding run on
# each block alone, and memory is bounded by a block, not by the file.
_BLOCK_BYTES = 1 << 22


def _open_bytes(path: Path) -> BinaryIO:
    try:
        return open(path, "rb")
    except FileNotFoundError as error:
        raise DataError(f"File not found: {path}") from error
    except IsADirectoryError as error:
        raise DataError(f"Expected a file but found a directory: {path}") from error
    except OSError as error:
        raise DataError(f"Cannot read {path}: {error}") from error


def _open(path: Path) -> tuple[BinaryIO, bool]:
    """`path` opened for reading bytes (decompressing if it starts with the
    gzip magic), and whether it is gzip."""
    handle = _open_bytes(path)
    if handle.read(2) != _GZIP_MAGIC:
        handle.seek(0)
        return handle, False
    handle.seek(0)
    return gzip.GzipFile(fileobj=handle, mode="rb"), True


def _gunzip(name: str | Path, raw: bytes) -> tuple[bytes, bool]:
    if raw[:2] != _GZIP_MAGIC:
        return raw, False
    try:
        return gzip.decompress(raw), True
    except (OSError, EOFError, zlib.error) as error:
        raise _corrupt_gzip(name, error) from error


def _corrupt_gzip(name: str | Path, error: BaseException) -> DataError:
    return DataError(
        f"{name} starts with the gzip signature but is not a valid gzip "
        f"file (corrupt or truncated?): {error}"
    )


def _raw_blocks(
    name: str | Path, handle: BinaryIO, is_gzip: bool, block_bytes: int
) -> Iterator[tuple[bytes, bool]]:
    """(block, is_last): blocks of whole lines; each but the last ends with
    a newline (a file without newlines is one block)."""
    pending: list[bytes] = []
    ready = None
    while True:
        try:
            data = handle.read(block_bytes)
        except (OSError, EOFError, zlib.error) as error:
            if is_gzip:
                raise _corrupt_gzip(name, error) from error
            raise DataError(f"Cannot read {name}: {error}") from error
        if not data:
            break
        # A read with a NUL stays whole, so that the NUL check (first in each
        # block) names a binary file before a UTF-8 error earlier in it.
        cut = len(data) if _NUL in data else data.rfind(b"\n") + 1
        if not cut:
            pending.append(data)
            continue
        if ready is not None:
            yield ready, False
        ready = b"".join([*pending, data[:cut]])
        pending = [data[cut:]] if cut < len(data) else []
    tail = b"".join(pending)
    if ready is not None:
        yield ready, not tail
    if tail:
        yield tail, True


def _position(
    data: bytes, offset: int, is_gzip: bool, first_line: int = 1, base: int = 0
) -> str:
    """'line L, byte B of that line (byte offset O in the file)', 1-based,
    for `offset` in `data`, a block that starts at line `first_line` and
    at byte `base` of the file."""
    line_start = data.rfind(b"\n", 0, offset) + 1
    line_number = first_line + data.count(b"\n", 0, offset)
    where = "decompressed data" if is_gzip else "file"
    return (
        f"line {line_number}, byte {offset - line_start + 1} of that line "
        f"(byte offset {base + offset} in the {where})"
    )


def _first_bare_cr(data: bytes) -> int:
    """Offset of the first '\\r' not followed by '\\n', or -1."""
    match = _BARE_CR.search(data)
    return match.start() if match else -1


def _split_lines(text: str) -> list[str]:
    """Split on '\\n' only, dropping one trailing '\\r' per line."""
    if not text:
        return []
    lines = text.split("\n")
    if lines[-1] == "":  # The block ends with a newline: no extra line.
        lines.pop()
    if "\r" not in text:  # Most files: no line to look at.
        return lines
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


class TextStream:
    """The lines of one text file (or of bytes), block by block, with every
    check of the module notes. Iterating yields (lines, is_last) per block;
    `lines_read` counts the lines so far. `finish` (after the last block)
    warns about lenient replacements.

    Use `open_text_stream`; a stream is read once.
    """

    def __init__(
        self,
        name: str | Path,
        handle: BinaryIO,
        is_gzip: bool,
        *,
        lenient_utf8: bool = False,
        block_bytes: int | None = None,
    ):
        self.name = name
        self.lenient_utf8 = lenient_utf8
        self._handle, self._is_gzip = handle, is_gzip
        self._block_bytes = block_bytes or _BLOCK_BYTES
        self.lines_read = 0
        self.first_cr_line: int | None = None  # A '\r' kept inside a line.
        self._offset = 0
        self._bare_cr = self._newlines = 0
        self._first_bare_cr: str | None = None
        self._replaced = 0
        self._first_replaced: int | None = None

    def __iter__(self) -> Iterator[tuple[list[str], bool]]:
        try:
            blocks = _raw_blocks(
                self.name, self._handle, self._is_gzip, self._block_bytes
            )
            for data, is_last in blocks:
                yield self._lines(data, is_last), is_last
        finally:
            self._handle.close()

    def lines(self) -> Iterator[list[str]]:
        """The blocks' lines alone."""
        for lines, _ in self:
            yield lines

    def _lines(self, data: bytes, is_last: bool) -> list[str]:
        first = self.lines_read + 1
        self._check_no_nul(data, first)
        if first == 1:
            self._check_not_binary(data)
        bare = self._count_bare_crs(data, first) if b"\r" in data else 0
        if is_last and self._bare_cr:
            self._check_line_ends(data)
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as error:
            if not self.lenient_utf8:
                where = _position(data, error.start, self._is_gzip, first, self._offset)
                raise DataError(
                    f"{self.name}: invalid UTF-8 at {where}: {error.reason}. Pass "
                    "--lenient-utf8 (lenient_utf8=True from Python) to replace "
                    "invalid bytes with U+FFFD."
                ) from error
            lines, bad = _decode_leniently(data)
            self._note_replaced(first, bad)
        else:
            lines = _split_lines(text)
        if first == 1 and lines and lines[0].startswith(_UTF8_BOM):
            lines[0] = lines[0][1:]
        if bare and self.first_cr_line is None:  # A CR kept inside a line.
            inner = next((n for n, line in enumerate(lines) if "\r" in line), None)
            if inner is not None:
                self.first_cr_line = first + inner
        # Every line but an unterminated last one ends with a newline.
        self._newlines += len(lines) - (not data.endswith(b"\n"))
        self.lines_read += len(lines)
        self._offset += len(data)
        return lines

    def _check_no_nul(self, data: bytes, first: int) -> None:
        # Checked on the bytes: in UTF-8 a 0x00 byte is always U+0000 itself.
        offset = data.find(_NUL)
        if offset != -1:
            where = _position(data, offset, self._is_gzip, first, self._offset)
            raise DataError(
                f"{self.name}: NUL byte (\\x00) at {where}. Text files never "
                "contain NUL; is this a binary or UTF-16 file? It is rejected "
                "with --lenient-utf8 too."
            )

    def _check_not_binary(self, data: bytes) -> None:
        # Before the line-end and UTF-8 checks, which would otherwise describe
        # a binary file's bytes as classic Mac line ends or bad UTF-8.
        sample = data[:_BINARY_SAMPLE]
        controls = len(sample) - len(sample.translate(None, _CONTROL_BYTES))
        if controls >= _BINARY_MIN and controls / len(sample) > _BINARY_SHARE:
            offset = next(i for i, byte in enumerate(sample) if byte in _CONTROL_BYTES)
            where = _position(data, offset, self._is_gzip)
            raise DataError(
                f"{self.name}: this looks like a binary file, not text: "
                f"{controls} of its first {len(sample)} bytes are control "
                f"characters (the first at {where}). Give UTF-8 text, one "
                "sentence per line (or its gzip)."
            )

    def _count_bare_crs(self, data: bytes, first: int) -> int:
        """Count the block's CRs that are not in a CRLF; note the first."""
        bare = data.count(b"\r") - data.count(b"\r\n")
        self._bare_cr += bare
        if bare and self._first_bare_cr is None:
            offset = _first_bare_cr(data)
            self._first_bare_cr = _position(
                data, offset, self._is_gzip, first, self._offset
            )
        return bare

    def _check_line_ends(self, last: bytes) -> None:
        # More bare CRs than newlines in the whole file: the CRs are the line
        # ends (classic Mac files), and the file would read as a few huge
        # lines. A stray CR inside a sentence of an LF file stays text (see
        # the module notes). Checked at the last block, before it is decoded;
        # a file's last CR ends its last line either way: not counted.
        newlines = self._newlines + last.count(b"\n")
        if self._bare_cr - last.endswith(b"\r") > newlines:
            raise DataError(
                f"{self.name}: lines end with a bare carriage return (\\r without "
                f"\\n, classic Mac line ends): {self._bare_cr} of them, the first "
                f"at {self._first_bare_cr}. Only \\n or \\r\\n ends a line here; "
                "convert the file, e.g. tr '\\r' '\\n' < IN > OUT."
            )

    def _note_replaced(self, first: int, bad: list[int]) -> None:
        if bad and self._first_replaced is None:
            self._first_replaced = first + bad[0] - 1
        self._replaced += len(bad)

    def finish(self) -> None:
        """Warn (`UnicodeWarning`) about lines with replaced bytes, if any."""
        if self._replaced:
            warnings.warn(
                f"{self.name}: replaced invalid UTF-8 bytes with U+FFFD in "
                f"{_plural(self._replaced, 'line')} (first at line "
                f"{self._first_replaced})",
                UnicodeWarning,
                stacklevel=3,
            )

    def check_no_inner_cr(self) -> None:
        """Refuse a bare CR kept inside a line (training text: the model
        would learn it as text; it is almost always a line end from another
        system, or a stray control character)."""
        if self.first_cr_line is None:
            return
        raise DataError(
            f"{self.name}: line {self.first_cr_line} holds a bare carriage return "
            "(\\r without \\n) inside it; a model trained on it would learn it "
            "as text. Convert it to a space (tr '\\r' ' ' < IN > OUT), or to \\n "
            "if it ends a line (then check that both sides still align). "
            "Validation and test files keep it as text."
        )

    def bare_cr_hint(self) -> str:
        """Why line counts may differ: CRs that some editor meant as line ends."""
        if self.first_cr_line is None:
            return ""
        return (
            f" {self.name} has a bare carriage return (\\r without \\n) inside line "
            f"{self.first_cr_line}: if it was meant as a line end, convert it to \\n."
        )


def open_text_stream(
    path: str | os.PathLike[str],
    *,
    lenient_utf8: bool = False,
    block_bytes: int | None = None,
) -> TextStream:
    """The lines of a text file (plain or gzip) as a `TextStream`."""
    path = Path(path)
    handle, is_gzip = _open(path)
    return TextStream(
        path, handle, is_gzip, lenient_utf8=lenient_utf8, block_bytes=block_bytes
    )


def _all_lines(stream: TextStream) -> list[str]:
    lines = [line for block in stream.lines() for line in block]
    stream.finish()
    return lines


def read_text_lines(
    path: str | os.PathLike[str], *, lenient_utf8: bool = False
) -> list[str]:
    """Every line of one text file (plain or gzip), with the same handling of
    line ends, BOM, NUL bytes and invalid UTF-8 as `read_parallel_files`."""
    return _all_lines(open_text_stream(path, lenient_utf8=lenient_utf8))


def decode_text_lines(
    data: bytes, name: str = "<stdin>", *, lenient_utf8: bool = False
) -> list[str]:
    """`read_text_lines` for bytes that are not in a file (standard input):
    the same checks, with `name` in every message."""
    data, is_gzip = _gunzip(name, data)
    stream = TextStream(name, io.BytesIO(data), is_gzip, lenient_utf8=lenient_utf8)
    return _all_lines(stream)


def lines_text(lines: Iterable[str], name: str) -> str:
    """The text of a file of `lines`, one per line, that these readers read
    back as the same number of lines.

    A line break inside a line (a translation may hold one: SentencePiece's
    byte pieces can spell \\n or \\r) would shift every later line against
    its source and reference, so each becomes a space, and a `UserWarning`
    names `name`, how many lines changed and the first (1-based)."""
    changed: list[int] = []
    kept = []
    for number, line in enumerate(lines, start=1):
        if "\n" in line or "\r" in line:
            changed.append(number)
            line = _LINE_BREAKS.sub(" ", line)
        kept.append(f"{line}\n")
    if changed:
        warnings.warn(
            f"{name}: {_plural(len(changed), 'line')} held a line break, written "
            f"as a space to keep one line per sentence (first at line {changed[0]})",
            UserWarning,
            stacklevel=2,
        )
    return "".join(kept)


@dataclass(frozen=True)
class PairBlock:
    """Consecutive pairs of a corpus: `source[i]` and `target[i]` come from
    line (or example) `first_line + i`."""

    first_line: int
    source: list[str]
    target: list[str]


def iter_parallel_files(
    source_path: str | os.PathLike[str],
    target_path: str | os.PathLike[str],
    *,
    lenient_utf8: bool = False,
    block_bytes: int | None = None,
    refuse_inner_cr: bool = False,
) -> Iterator[PairBlock]:
    """`read_parallel_files` block by block: memory is bounded by a block.

    The checks and errors are `read_parallel_files`'s; a line-count mismatch
    is found when the shorter file ends (the longer is then read to its end
    to count its lines). `refuse_inner_cr` (training text): a bare CR kept
    inside a line is a `DataError` once the files are read."""
    streams = [
        open_text_stream(path, lenient_utf8=lenient_utf8, block_bytes=block_bytes)
        for path in (source_path, target_path)
    ]
    blocks = [stream.lines() for stream in streams]
    pending: list[list[str] | None] = [[], []]
    first = 1
    while True:
        for side in (0, 1):
            if pending[side] == []:
                pending[side] = next(blocks[side], None)
        if pending[0] is None or pending[1] is None:
            break
        count = min(len(pending[0]), len(pending[1]))
        yield PairBlock(first, pending[0][:count], pending[1][:count])
        pending = [pending[0][count:], pending[1][count:]]
        first += count
    for side in (0, 1):
        for _ in blocks[side]:  # Counts (and checks) the rest of the longer.
            pass
    _check_same_length(*streams)
    for stream in streams:
        if refuse_inner_cr:
            stream.check_no_inner_cr()
        stream.finish()


def _check_same_length(source: TextStream, target: TextStream) -> None:
    if source.lines_read == target.lines_read:
        return
    shorter, longer = (
        (source, target) if source.lines_read < target.lines_read else (target, source)
    )
    raise DataError(
        "Parallel files have different line counts: "
        f"{source.name} has {_plural(source.lines_read, 'line')}, "
        f"{target.name} has {_plural(target.lines_read, 'line')}. "
        f"Line {shorter.lines_read + 1} of {longer.name} is the first with no "
        f"counterpart in {shorter.name}."
        + source.bare_cr_hint()
        + target.bare_cr_hint()
    )


def collect_pairs(blocks: Iterable[PairBlock], origin: str) -> ParallelCorpus:
    """The pairs of `blocks`, held in memory, with their line numbers."""
    source: list[str] = []
    target: list[str] = []
    lines: list[int] = []
    for block in blocks:
        source += block.source
        target += block.target
        lines += range(block.first_line, block.first_line + len(block.source))
    return ParallelCorpus(
        source=source, target=target, origin=origin, line_numbers=lines
    )


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
    blocks = iter_parallel_files(source_path, target_path, lenient_utf8=lenient_utf8)
    return collect_pairs(blocks, f"{Path(source_path)} | {Path(target_path)}")


def iter_tsv(
    path: str | os.PathLike[str],
    *,
    lenient_utf8: bool = False,
    block_bytes: int | None = None,
    refuse_inner_cr: bool = False,
) -> Iterator[PairBlock]:
    """`read_tsv` block by block: memory is bounded by a block;
    `refuse_inner_cr` as in `iter_parallel_files`."""
    stream = open_text_stream(path, lenient_utf8=lenient_utf8, block_bytes=block_bytes)
    first = 1
    for lines, is_last in stream:
        if is_last and lines and lines[-1] == "":
            lines.pop()  # One blank line at the very end is not a pair.
        source, target = [], []
        for number, line in enumerate(lines, start=first):
            if line.count("\t") != 1:
                raise _bad_tsv_line(stream.name, number, line)
            left, right = line.split("\t")
            source.append(left)
            target.append(right)
        yield PairBlock(first, source, target)
        first += len(lines)
    if refuse_inner_cr:
        stream.check_no_inner_cr()
    stream.finish()


def _bad_tsv_line(path: str | Path, number: int, line: str) -> DataError:
    preview = line if len(line) <= 60 else line[:57] + "..."
    tabs = line.count("\t")
    return DataError(
        f"{path}, line {number}: expected exactly one tab between source "
        f"and target, found {tabs}: {preview!r}"
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
    return collect_pairs(iter_tsv(path, lenient_utf8=lenient_utf8), str(Path(path)))
