"""Tests for keras_transformer.data.text_files (local text and TSV files)."""

from __future__ import annotations

import gzip
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from keras_transformer.data import text_files
from keras_transformer.data.text_files import (
    DataError,
    ParallelCorpus,
    read_parallel_files,
    read_text_lines,
    read_tsv,
)
from tests.data.helpers import assert_imports_nothing_heavy, write

pytestmark = pytest.mark.backend_neutral

# --------------------------------------------------------------------------
# ParallelCorpus
# --------------------------------------------------------------------------


def test_parallel_corpus_len_and_validation():
    corpus = ParallelCorpus(["a", "b"], ["x", "y"], "here", [1, 2])
    assert len(corpus) == 2
    with pytest.raises(DataError, match="same length"):
        ParallelCorpus(["a"], ["x", "y"], "here", [1])
    assert issubclass(DataError, ValueError)


# --------------------------------------------------------------------------
# read_parallel_files
# --------------------------------------------------------------------------


@pytest.mark.parametrize("compress", [False, True])
def test_read_parallel_files_plain_and_gzip(tmp_path, compress):
    ext = ".gz" if compress else ""
    src = write(tmp_path / f"a.en{ext}", b"Hello .\nTwo  spaces \n", compress=compress)
    tgt = write(
        tmp_path / f"a.de{ext}", "Hallo .\nZwei Ä\n".encode(), compress=compress
    )
    corpus = read_parallel_files(src, tgt)
    assert corpus.source == ["Hello .", "Two  spaces "]
    assert corpus.target == ["Hallo .", "Zwei Ä"]
    assert corpus.line_numbers == [1, 2]
    assert len(corpus) == 2
    assert str(src) in corpus.origin and str(tgt) in corpus.origin


def test_gzip_detected_by_magic_not_extension(tmp_path):
    src = write(tmp_path / "src.txt", b"one\ntwo\n", compress=True)
    tgt = write(tmp_path / "tgt.gz", b"eins\nzwei\n")  # plain despite .gz
    corpus = read_parallel_files(str(src), str(tgt))
    assert corpus.source == ["one", "two"]
    assert corpus.target == ["eins", "zwei"]


def test_crlf_bom_and_text_kept_verbatim(tmp_path):
    src = write(
        tmp_path / "s",
        b"\xef\xbb\xbf first\r\nin\rner\r\n\tlead tab\r\n\r\nlast no newline",
    )
    tgt = write(
        tmp_path / "t",
        "a\x0cb\r\nc\u2028d\n  \n\nend\r".encode(),
        compress=True,
    )
    corpus = read_parallel_files(src, tgt)
    # BOM removed, one CR per line removed, nothing else touched or split.
    assert corpus.source == [" first", "in\rner", "\tlead tab", "", "last no newline"]
    assert corpus.target == ["a\x0cb", "c\u2028d", "  ", "", "end"]
    assert corpus.line_numbers == [1, 2, 3, 4, 5]


def test_empty_lines_are_kept_and_empty_files_are_empty(tmp_path):
    corpus = read_parallel_files(
        write(tmp_path / "s", b"\n\nx\n"), write(tmp_path / "t", b"a\n\n\n")
    )
    assert corpus.source == ["", "", "x"]
    assert corpus.target == ["a", "", ""]
    empty = read_parallel_files(
        write(tmp_path / "e1", b""), write(tmp_path / "e2", b"")
    )
    assert len(empty) == 0


def test_mismatched_line_counts(tmp_path):
    src = write(tmp_path / "long.en", b"1\n2\n3\n4\n5\n")
    tgt = write(tmp_path / "short.de", b"1\n2\n3\n", compress=True)
    with pytest.raises(DataError) as info:
        read_parallel_files(src, tgt)
    message = str(info.value)
    assert str(src) in message and str(tgt) in message
    assert "5 lines" in message and "3 lines" in message
    assert "Line 4 of" in message
    # Also when the target is the longer one.
    with pytest.raises(DataError, match=r"Line 4 of .*long\.en"):
        read_parallel_files(tgt, src)


def test_mismatched_line_counts_raise_under_python_O(tmp_path):
    src = write(tmp_path / "a.en", b"1\n2\n3\n")
    tgt = write(tmp_path / "a.de", b"1\n")
    script = textwrap.dedent(
        """
        import importlib.util, sys
        if not sys.flags.optimize:
            sys.exit(3)
        spec = importlib.util.spec_from_file_location("text_files_O", sys.argv[1])
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
        try:
            module.read_parallel_files(sys.argv[2], sys.argv[3])
        except module.DataError as error:
            print(error)
            sys.exit(0)
        sys.exit(2)
        """
    )
    result = subprocess.run(
        [sys.executable, "-O", "-c", script, text_files.__file__, str(src), str(tgt)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "has 3 lines" in result.stdout and "has 1 line." in result.stdout
    assert "Line 2 of" in result.stdout


@pytest.mark.parametrize("compress", [False, True])
def test_invalid_utf8_names_file_line_and_offset(tmp_path, compress):
    src = write(tmp_path / "bad.en", b"ok\nab\xffcd\nfine\n", compress=compress)
    tgt = write(tmp_path / "good.de", b"a\nb\nc\n")
    with pytest.raises(DataError) as info:
        read_parallel_files(src, tgt)
    message = str(info.value)
    assert str(src) in message
    assert "line 2" in message
    assert "byte 3 of that line" in message and "byte offset 5" in message
    assert "lenient_utf8=True" in message


def test_lenient_utf8_replaces_and_warns_with_count(tmp_path):
    src = write(tmp_path / "bad.en", b"\xef\xbb\xbfok\r\n\xff x\r\nfine\n\xc3( y\n")
    tgt = write(tmp_path / "good.de", b"a\nb\nc\nd\n")
    with pytest.warns(UnicodeWarning, match=r"bad\.en.*2 lines \(first at line 2\)"):
        corpus = read_parallel_files(src, tgt, lenient_utf8=True)
    assert corpus.source == ["ok", "\ufffd x", "fine", "\ufffd( y"]
    assert corpus.target == ["a", "b", "c", "d"]


def test_lenient_utf8_without_bad_bytes_does_not_warn(tmp_path, recwarn):
    src = write(tmp_path / "s", "\ufffd literal\n".encode())
    tgt = write(tmp_path / "t", b"x\n")
    corpus = read_parallel_files(src, tgt, lenient_utf8=True)
    assert corpus.source == ["\ufffd literal"]
    assert not [w for w in recwarn if issubclass(w.category, UnicodeWarning)]


def test_missing_file(tmp_path):
    tgt = write(tmp_path / "t", b"x\n")
    missing = tmp_path / "nope.en"
    with pytest.raises(DataError, match="nope.en") as info:
        read_parallel_files(missing, tgt)
    assert str(missing) in str(info.value)
    with pytest.raises(DataError, match="directory"):
        read_parallel_files(tmp_path, tgt)


def test_corrupt_gzip(tmp_path):
    data = gzip.compress(b"line\n" * 100)
    src = write(tmp_path / "trunc.gz", data[: len(data) // 2])
    tgt = write(tmp_path / "t", b"x\n")
    with pytest.raises(DataError, match=r"trunc\.gz.*gzip"):
        read_parallel_files(src, tgt)


# --------------------------------------------------------------------------
# read_tsv
# --------------------------------------------------------------------------


@pytest.mark.parametrize("compress", [False, True])
def test_read_tsv(tmp_path, compress):
    path = write(
        tmp_path / "pairs.tsv",
        b"\xef\xbb\xbfHello\tHallo\r\n a \t b \n\tempty source\nlast\t\n\n",
        compress=compress,
    )
    corpus = read_tsv(path)
    assert corpus.source == ["Hello", " a ", "", "last"]
    assert corpus.target == ["Hallo", " b ", "empty source", ""]
    assert corpus.line_numbers == [1, 2, 3, 4]
    assert corpus.origin == str(path)


@pytest.mark.parametrize(
    ("content", "line", "tabs"),
    [
        (b"a\tb\nno tab here\nc\td\n", 2, 0),
        (b"a\tb\nc\td\te\n", 2, 2),
        (b"a\tb\n\nc\td\n", 2, 0),  # empty line in the middle
        (b"a\tb\n\n\n", 2, 0),  # only ONE trailing empty line is ignored
    ],
)
def test_read_tsv_bad_lines(tmp_path, content, line, tabs):
    path = write(tmp_path / "bad.tsv", content)
    with pytest.raises(DataError) as info:
        read_tsv(path)
    message = str(info.value)
    assert str(path) in message
    assert f"line {line}:" in message
    assert f"found {tabs}" in message


def test_read_tsv_missing_and_lenient(tmp_path):
    with pytest.raises(DataError, match="missing.tsv"):
        read_tsv(tmp_path / "missing.tsv")
    path = write(tmp_path / "x.tsv", b"a\xff\tb\n")
    with pytest.raises(DataError, match=r"x\.tsv: invalid UTF-8 at line 1"):
        read_tsv(path)
    with pytest.warns(UnicodeWarning, match="1 line "):
        corpus = read_tsv(path, lenient_utf8=True)
    assert corpus.source == ["a\ufffd"] and corpus.target == ["b"]


# --------------------------------------------------------------------------
# read_text_lines
# --------------------------------------------------------------------------


@pytest.mark.parametrize("compress", [False, True])
def test_read_text_lines(tmp_path, compress):
    path = write(tmp_path / "in.txt", b"\xef\xbb\xbfa \r\n\n  b\tc", compress=compress)
    assert read_text_lines(path) == ["a ", "", "  b\tc"]
    assert read_text_lines(write(tmp_path / "empty", b"")) == []


# --------------------------------------------------------------------------
# Bad input common to every reader
# --------------------------------------------------------------------------


def _readers(tmp_path, data: bytes, *, compress: bool = False):
    """The bad file and every reader, each reading it (as its second file)."""
    bad = write(tmp_path / "bad.txt", data, compress=compress)
    good = write(tmp_path / "good.txt", b"x\n" * data.count(b"\n"))
    return bad, {
        "read_text_lines": lambda **kw: read_text_lines(bad, **kw),
        "read_parallel_files": lambda **kw: read_parallel_files(good, bad, **kw),
        "read_tsv": lambda **kw: read_tsv(bad, **kw),
    }


def test_invalid_utf8_error_names_the_command_line_flag(tmp_path):
    # Command-line users pass --lenient-utf8, not the Python keyword.
    bad, readers = _readers(tmp_path, b"a\tb\nc\xff\td\n")
    for name, read in readers.items():
        with pytest.raises(DataError) as info:
            read()
        message = str(info.value)
        assert str(bad) in message and "line 2" in message, name
        assert "--lenient-utf8" in message, name
        assert "lenient_utf8=True" in message, name


@pytest.mark.parametrize("lenient_utf8", [False, True])
@pytest.mark.parametrize("compress", [False, True])
def test_nul_byte_is_reported_with_file_and_line(tmp_path, lenient_utf8, compress):
    data = b"a\tb\nc\td\nef\x00\tg\nh\ti\n"
    bad, readers = _readers(tmp_path, data, compress=compress)
    for name, read in readers.items():
        with pytest.raises(DataError) as info:
            read(lenient_utf8=lenient_utf8)
        message = str(info.value)
        assert str(bad) in message, name
        assert "NUL" in message and "line 3, byte 3 of that line" in message, name


def test_nul_byte_in_utf16_text_is_reported(tmp_path):
    # ASCII text saved as UTF-16 is valid UTF-8 apart from its BOM, full of NULs.
    path = write(tmp_path / "utf16.txt", "ab\ncd\n".encode("utf-16-le"))
    with pytest.raises(DataError, match=r"utf16\.txt: NUL byte .*line 1.*UTF-16"):
        read_text_lines(path, lenient_utf8=True)


def test_modules_import_nothing_heavy():
    assert_imports_nothing_heavy("keras_transformer.data.text_files")


# --------------------------------------------------------------------------
# Bare carriage returns
# --------------------------------------------------------------------------


def test_bare_cr_line_ends_are_named_with_file_and_line(tmp_path):
    # Classic Mac files read as one huge line each: they were reported as a
    # line-count mismatch (1 line against 3).
    src = write(tmp_path / "mac.en", b"one\rtwo\rthree\r")
    tgt = write(tmp_path / "unix.de", b"eins\nzwei\ndrei\n")
    with pytest.raises(DataError) as info:
        read_parallel_files(src, tgt)
    message = str(info.value)
    assert str(src) in message and "bare carriage return" in message
    assert "3 of them" in message and "line 1, byte 4" in message
    assert "different line counts" not in message
    with pytest.raises(DataError, match="bare carriage return"):
        read_text_lines(src)
    with pytest.raises(DataError, match="bare carriage return"):
        read_tsv(write(tmp_path / "mac.tsv", b"a\tb\rc\td\r", compress=True))


def test_line_count_mismatch_names_a_bare_cr_inside_a_line(tmp_path):
    src = write(tmp_path / "s.en", b"one\ntwo\rthree\nfour\n")
    tgt = write(tmp_path / "t.de", b"eins\nzwei\ndrei\nvier\n")
    with pytest.raises(DataError) as info:
        read_parallel_files(src, tgt)
    message = str(info.value)
    assert "different line counts" in message
    assert f"{src} has a bare carriage return" in message and "line 2" in message


def test_a_final_bare_cr_and_a_stray_one_are_text(tmp_path):
    # Only a file whose CRs outnumber its newlines is refused.
    assert read_text_lines(write(tmp_path / "a", b"hello\r")) == ["hello"]
    assert read_text_lines(write(tmp_path / "b", b"x\ry\nz\n")) == ["x\ry", "z"]


# --------------------------------------------------------------------------
# Streaming: blocks of a few bytes give what the whole-file readers give
# --------------------------------------------------------------------------


def _streamed(blocks):
    source, target, firsts = [], [], []
    for block in blocks:
        assert block.first_line == len(source) + 1
        assert len(block.source) == len(block.target)
        source += block.source
        target += block.target
        firsts.append(block.first_line)
    return source, target, firsts


@pytest.mark.parametrize("compress", [False, True])
def test_tiny_blocks_give_the_whole_file_result(tmp_path, compress):
    src = write(
        tmp_path / "s",
        b"\xef\xbb\xbf first\r\nin\rner\r\n\tlead tab\r\n\r\nlast no newline",
        compress=compress,
    )
    tgt = write(tmp_path / "t", "a\x0cb\r\nc\u2028d\n  \n\nend\r".encode())
    whole = read_parallel_files(src, tgt)
    for block_bytes in (1, 3, 7, 64):
        blocks = text_files.iter_parallel_files(src, tgt, block_bytes=block_bytes)
        source, target, firsts = _streamed(blocks)
        assert (source, target) == (whole.source, whole.target), block_bytes
    assert len(firsts) > 1  # Several blocks were read at the smallest sizes.
    tsv = write(tmp_path / "p.tsv", b"\xef\xbb\xbfa\tb\r\nc\t\n\td\n\n")
    source, target, _ = _streamed(text_files.iter_tsv(tsv, block_bytes=2))
    assert (source, target) == (["a", "c", ""], ["b", "", "d"])


def test_errors_in_a_later_block_name_the_line_and_byte_of_the_file(tmp_path):
    good = b"one\ntwo\nthree\n"
    bad_utf8 = write(tmp_path / "u.en", good + b"fo\xffur\n")
    nul = write(tmp_path / "n.en", good + b"f\x00our\n")
    other = write(tmp_path / "o.de", b"1\n2\n3\n4\n")
    with pytest.raises(DataError, match=r"u\.en: invalid UTF-8 at line 4, byte 3 "):
        list(text_files.iter_parallel_files(bad_utf8, other, block_bytes=4))
    with pytest.raises(DataError, match=r"byte offset 16 in the file"):
        list(text_files.iter_parallel_files(bad_utf8, other, block_bytes=4))
    with pytest.raises(DataError, match=r"n\.en: NUL byte .* line 4, byte 2 "):
        list(text_files.iter_parallel_files(nul, other, block_bytes=4))


def test_streamed_line_count_mismatch_counts_the_longer_file_to_its_end(tmp_path):
    src = write(tmp_path / "long.en", b"1\n2\n3\n4\n5\n", compress=True)
    tgt = write(tmp_path / "short.de", b"1\n2\n3\n")
    with pytest.raises(DataError) as info:
        list(text_files.iter_parallel_files(src, tgt, block_bytes=2))
    message = str(info.value)
    assert "has 5 lines" in message and "has 3 lines" in message
    assert f"Line 4 of {src} is the first with no counterpart in {tgt}" in message


def test_streamed_lenient_utf8_warns_once_per_file_with_the_first_line(tmp_path):
    src = write(tmp_path / "bad.en", b"ok\nfine\n\xff x\nfine\n\xc3( y\n")
    tgt = write(tmp_path / "good.de", b"a\nb\nc\nd\ne\n")
    with pytest.warns(UnicodeWarning, match=r"bad\.en.*2 lines \(first at line 3\)"):
        source, _, _ = _streamed(
            text_files.iter_parallel_files(src, tgt, lenient_utf8=True, block_bytes=5)
        )
    assert source == ["ok", "fine", "\ufffd x", "fine", "\ufffd( y"]


def test_lines_text_keeps_one_line_per_sentence_and_says_which_changed(tmp_path):
    lines = ["ein Hund", "zwei\nZeilen", "crlf\r\nhier", "nur\rcr", "", "Ende"]
    expected = r"out\.txt: 3 lines held a line break.*line 2\)"
    with pytest.warns(UserWarning, match=expected):
        text = text_files.lines_text(lines, "out.txt")
    path = write(tmp_path / "out.txt", text.encode("utf-8"))
    assert read_text_lines(path) == [
        "ein Hund", "zwei Zeilen", "crlf hier", "nur cr", "", "Ende"
    ]  # fmt: skip


def test_lines_text_of_plain_lines_is_silent(recwarn):
    assert text_files.lines_text(["a b", "", "c"], "x") == "a b\n\nc\n"
    assert not recwarn.list


def test_a_binary_file_is_named_binary_before_its_invalid_utf8(tmp_path):
    path = write(tmp_path / "image.png", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
    with pytest.raises(DataError, match=r"image\.png: NUL byte .* binary or UTF-16"):
        read_text_lines(path)


def test_a_binary_file_without_nul_is_named_binary_not_mac_line_ends(tmp_path):
    # Random bytes with no NUL hold more bare CRs than newlines: they were
    # described as "classic Mac line ends".
    rng = np.random.default_rng(0)
    data = bytes(rng.integers(1, 256, 4096, dtype=np.uint8))
    data = data.replace(b"\n", b"\r")
    path = write(tmp_path / "random.bin", data)
    with pytest.raises(DataError, match=r"random\.bin: this looks like a binary file"):
        read_text_lines(path)
    with pytest.raises(DataError, match="binary file"):
        read_text_lines(path, lenient_utf8=True)


def test_text_with_a_few_control_characters_is_still_text(tmp_path):
    text = "a line with an \x1b escape and a \x07 bell\n" * 3
    path = write(tmp_path / "odd.txt", text.encode())
    assert len(read_text_lines(path)) == 3
