"""Tests for keras_transformer.data.sources (offline: downloads use loopback)."""

from __future__ import annotations

import gzip
import hashlib
import http.server
import os
import socket
import subprocess
import sys
import textwrap
import threading
import types
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from keras_transformer.data import sources
from keras_transformer.data.sources import (
    MULTI30K_SHA256,
    MULTI30K_SPLITS,
    MULTI30K_URL,
    DataError,
    ParallelCorpus,
    download_file,
    load_multi30k,
    load_tfds,
    read_parallel_files,
    read_tsv,
)

MULTI30K_DIR = Path(
    os.environ.get("KERAS_TRANSFORMER_MULTI30K_DIR", "/work/shared/data/multi30k")
)
needs_multi30k = pytest.mark.skipif(
    not (MULTI30K_DIR / "train.en.gz").is_file(),
    reason=f"Multi30k reference data not found in {MULTI30K_DIR}",
)


def write(path: Path, data: bytes, *, compress: bool = False) -> Path:
    path.write_bytes(gzip.compress(data) if compress else data)
    return path


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# --------------------------------------------------------------------------
# Loopback HTTP server
# --------------------------------------------------------------------------


@dataclass
class Server:
    url: str
    requests: list[str] = field(default_factory=list)


@pytest.fixture
def serve():
    """Factory: serve a directory on 127.0.0.1 (random port), count GETs."""
    running = []

    def start(directory: Path) -> Server:
        server_info = Server(url="")

        class Handler(http.server.SimpleHTTPRequestHandler):
            def __init__(self, *args, **kwargs):
                super().__init__(*args, directory=str(directory), **kwargs)

            def do_GET(self):
                server_info.requests.append(self.path)
                super().do_GET()

            def log_message(self, format, *args):
                pass

        httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        thread = threading.Thread(
            target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        thread.start()
        running.append((httpd, thread))
        host, port = httpd.server_address[:2]
        assert host == "127.0.0.1"
        server_info.url = f"http://127.0.0.1:{port}"
        return server_info

    yield start
    for httpd, thread in running:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=5)


@pytest.fixture
def closed_port_url():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


@pytest.fixture
def no_network(monkeypatch):
    """Make any download attempt fail loudly."""

    def refuse(*args, **kwargs):
        raise AssertionError(f"unexpected download: {args!r}")

    monkeypatch.setattr(urllib.request, "urlopen", refuse)


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
        spec = importlib.util.spec_from_file_location("sources_O", sys.argv[1])
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
        [sys.executable, "-O", "-c", script, sources.__file__, str(src), str(tgt)],
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
# download_file
# --------------------------------------------------------------------------


@pytest.fixture
def served_dir(tmp_path):
    directory = tmp_path / "served"
    directory.mkdir()
    write(directory / "hello.txt", b"hello world\n")
    return directory


def test_download_success_with_checksum(tmp_path, serve, served_dir):
    server = serve(served_dir)
    destination = tmp_path / "cache" / "sub" / "hello.txt"
    digest = sha256(served_dir / "hello.txt")
    result = download_file(
        f"{server.url}/hello.txt", destination, sha256=digest.upper()
    )
    assert result == destination
    assert destination.read_bytes() == b"hello world\n"
    assert os.listdir(destination.parent) == ["hello.txt"]  # no temp files left
    assert server.requests == ["/hello.txt"]


def test_download_without_checksum(tmp_path, serve, served_dir):
    server = serve(served_dir)
    destination = download_file(f"{server.url}/hello.txt", str(tmp_path / "h.txt"))
    assert isinstance(destination, Path)
    assert destination.read_bytes() == b"hello world\n"


def test_download_checksum_mismatch_leaves_no_file(tmp_path, serve):
    good = MULTI30K_DIR / "val.en.gz"
    corrupted_dir = tmp_path / "corrupted"
    corrupted_dir.mkdir()
    data = bytearray(good.read_bytes() if good.is_file() else b"x" * 1000)
    data[len(data) // 2] ^= 0xFF
    write(corrupted_dir / "val.en.gz", bytes(data))
    server = serve(corrupted_dir)
    url = f"{server.url}/val.en.gz"
    destination = tmp_path / "cache" / "val.en.gz"
    expected = MULTI30K_SHA256["val.en.gz"]
    actual = hashlib.sha256(bytes(data)).hexdigest()
    with pytest.raises(DataError) as info:
        download_file(url, destination, sha256=expected)
    message = str(info.value)
    assert url in message and expected in message and actual in message
    assert not destination.exists()
    assert os.listdir(destination.parent) == []


def test_cached_file_is_not_downloaded_again(tmp_path, serve, served_dir):
    server = serve(served_dir)
    url = f"{server.url}/hello.txt"
    digest = sha256(served_dir / "hello.txt")
    destination = tmp_path / "hello.txt"
    download_file(url, destination, sha256=digest)
    download_file(url, destination, sha256=digest)
    assert len(server.requests) == 1
    # Without a checksum an existing file is trusted too.
    download_file(url, destination)
    assert len(server.requests) == 1


def test_wrong_cached_file_is_downloaded_again(tmp_path, serve, served_dir):
    server = serve(served_dir)
    destination = write(tmp_path / "hello.txt", b"stale\n")
    digest = sha256(served_dir / "hello.txt")
    download_file(f"{server.url}/hello.txt", destination, sha256=digest)
    assert len(server.requests) == 1
    assert destination.read_bytes() == b"hello world\n"


def test_wrong_cached_file_and_bad_download_leave_no_file(tmp_path, serve, served_dir):
    server = serve(served_dir)
    destination = write(tmp_path / "hello.txt", b"stale\n")
    with pytest.raises(DataError, match="Checksum mismatch"):
        download_file(f"{server.url}/hello.txt", destination, sha256="0" * 64)
    assert os.listdir(tmp_path) == ["served"]


def test_network_failure_gives_hint(tmp_path, closed_port_url):
    url = f"{closed_port_url}/train.en.gz"
    destination = tmp_path / "cache" / "train.en.gz"
    with pytest.raises(DataError) as info:
        download_file(url, destination, sha256="0" * 64, timeout=5)
    message = str(info.value)
    assert url in message
    assert "download the file manually" in message
    assert str(destination.parent) in message
    assert not destination.exists()
    assert os.listdir(destination.parent) == []


def test_http_404_gives_hint(tmp_path, serve, served_dir):
    server = serve(served_dir)
    url = f"{server.url}/missing.gz"
    with pytest.raises(DataError, match="HTTP 404") as info:
        download_file(url, tmp_path / "missing.gz")
    assert url in str(info.value) and "manually" in str(info.value)
    assert os.listdir(tmp_path) == ["served"]


def test_download_argument_errors(tmp_path):
    with pytest.raises(DataError, match="64 hexadecimal"):
        download_file("http://127.0.0.1:1/x", tmp_path / "x", sha256="abc")
    with pytest.raises(DataError, match="is a directory"):
        download_file("http://127.0.0.1:1/x", tmp_path)


# --------------------------------------------------------------------------
# Multi30k
# --------------------------------------------------------------------------


def test_multi30k_constants():
    assert MULTI30K_URL == (
        "https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw"
    )
    assert MULTI30K_SPLITS == {
        "train": "train",
        "valid": "val",
        "test": "test_2016_flickr",
    }
    expected_names = {
        f"{stem}.{lang}.gz"
        for stem in MULTI30K_SPLITS.values()
        for lang in ("en", "de")
    }
    assert set(MULTI30K_SHA256) == expected_names


@needs_multi30k
def test_multi30k_checksums_match_reference_files():
    for name, digest in MULTI30K_SHA256.items():
        assert sha256(MULTI30K_DIR / name) == digest, name


@needs_multi30k
def test_load_multi30k_from_data_dir(no_network, monkeypatch, tmp_path):
    monkeypatch.setenv("KERAS_TRANSFORMER_CACHE", str(tmp_path / "cache"))
    sizes = {"train": 29_000, "valid": 1_014, "test": 1_000}
    for split, size in sizes.items():
        corpus = load_multi30k(split, data_dir=MULTI30K_DIR)
        assert len(corpus) == size
        assert corpus.line_numbers[0] == 1 and corpus.line_numbers[-1] == size
        assert "Multi30k" in corpus.origin
        if split == "train":
            with gzip.open(MULTI30K_DIR / "train.en.gz", "rt", encoding="utf-8") as f:
                first_en = f.readline().rstrip("\n")
            with gzip.open(MULTI30K_DIR / "train.de.gz", "rt", encoding="utf-8") as f:
                first_de = f.readline().rstrip("\n")
            assert corpus.source[0] == first_en
            assert corpus.target[0] == first_de
    reverse = load_multi30k(
        "val", source_lang="de", target_lang="en", data_dir=MULTI30K_DIR
    )
    forward = load_multi30k("valid", data_dir=MULTI30K_DIR)
    assert reverse.source == forward.target and reverse.target == forward.source
    assert not (tmp_path / "cache").exists()


@needs_multi30k
def test_load_multi30k_plain_files_in_data_dir(no_network, tmp_path):
    for lang in ("en", "de"):
        data = gzip.decompress((MULTI30K_DIR / f"val.{lang}.gz").read_bytes())
        write(tmp_path / f"val.{lang}", data)
    corpus = load_multi30k("valid", data_dir=tmp_path)
    assert len(corpus) == 1_014


def test_load_multi30k_missing_file_in_data_dir(no_network, tmp_path):
    write(tmp_path / "val.en.gz", b"a\n", compress=True)
    with pytest.raises(DataError) as info:
        load_multi30k("valid", data_dir=tmp_path)
    assert str(tmp_path / "val.de.gz") in str(info.value)
    with pytest.raises(DataError, match="does not exist"):
        load_multi30k("valid", data_dir=tmp_path / "nowhere")


def test_load_multi30k_bad_arguments(no_network, tmp_path):
    with pytest.raises(DataError, match="'train', 'valid', 'test'"):
        load_multi30k("dev", data_dir=tmp_path)
    with pytest.raises(DataError, match="'en', 'de'"):
        load_multi30k("train", source_lang="fr", data_dir=tmp_path)
    with pytest.raises(DataError, match="target_lang='cs'"):
        load_multi30k("train", target_lang="cs", data_dir=tmp_path)
    with pytest.raises(DataError, match="must differ"):
        load_multi30k("train", source_lang="de", data_dir=tmp_path)


@needs_multi30k
def test_load_multi30k_downloads_and_verifies(tmp_path, serve):
    server = serve(MULTI30K_DIR)
    cache = tmp_path / "cache"
    sizes = {"train": 29_000, "valid": 1_014, "test": 1_000}
    for split, size in sizes.items():
        corpus = load_multi30k(split, cache_dir=cache, base_url=server.url + "/")
        assert len(corpus) == size
    assert sorted(server.requests) == sorted(f"/{name}" for name in MULTI30K_SHA256)
    assert sorted(os.listdir(cache)) == sorted(MULTI30K_SHA256)
    for name, digest in MULTI30K_SHA256.items():
        assert sha256(cache / name) == digest
    # Second load: served from the cache, no request.
    again = load_multi30k("valid", cache_dir=cache, base_url=server.url)
    assert len(again) == 1_014
    assert len(server.requests) == 6
    local = load_multi30k("valid", data_dir=MULTI30K_DIR)
    assert again.source == local.source and again.target == local.target


@needs_multi30k
def test_load_multi30k_default_cache_from_env(tmp_path, serve, monkeypatch):
    server = serve(MULTI30K_DIR)
    monkeypatch.setenv("KERAS_TRANSFORMER_CACHE", str(tmp_path / "root"))
    corpus = load_multi30k("test", base_url=server.url)
    assert len(corpus) == 1_000
    assert sorted(server.requests) == [
        "/test_2016_flickr.de.gz",
        "/test_2016_flickr.en.gz",
    ]
    assert sorted(os.listdir(tmp_path / "root" / "multi30k")) == [
        "test_2016_flickr.de.gz",
        "test_2016_flickr.en.gz",
    ]


def test_load_multi30k_rejects_wrong_server_content(tmp_path, serve):
    served = tmp_path / "served"
    served.mkdir()
    for lang in ("en", "de"):
        write(served / f"val.{lang}.gz", b"not multi30k\n", compress=True)
    server = serve(served)
    cache = tmp_path / "cache"
    with pytest.raises(DataError, match="Checksum mismatch"):
        load_multi30k("valid", cache_dir=cache, base_url=server.url)
    assert os.listdir(cache) == []


def test_load_multi30k_network_failure(tmp_path, closed_port_url):
    with pytest.raises(DataError, match="manually") as info:
        load_multi30k("valid", cache_dir=tmp_path, base_url=closed_port_url)
    assert "val.en.gz" in str(info.value) and str(tmp_path) in str(info.value)


# --------------------------------------------------------------------------
# TensorFlow Datasets
# --------------------------------------------------------------------------


def test_load_tfds_not_installed(monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorflow_datasets", None)
    with pytest.raises(DataError, match="pip install tensorflow-datasets"):
        load_tfds("wmt14_translate/de-en", "validation")


def test_load_tfds_not_installed_for_real():
    try:
        import tensorflow_datasets  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("tensorflow_datasets is installed here")
    with pytest.raises(DataError, match="pip install tensorflow-datasets"):
        load_tfds("wmt14_translate/de-en", "validation")


EXAMPLES = [
    {"de": b"Guten Morgen .", "en": b"Good morning ."},
    {"de": "Grüße".encode(), "en": b"Greetings"},
    {"de": b"", "en": b"  spaced  "},
]


@pytest.fixture
def fake_tfds(monkeypatch):
    module = types.ModuleType("tensorflow_datasets")
    module.calls = []
    module.examples = list(EXAMPLES)
    module.info = types.SimpleNamespace(supervised_keys=("de", "en"))

    def load(name, *, split, data_dir=None, with_info=False):
        module.calls.append((name, split, data_dir, with_info))
        if name == "broken":
            raise RuntimeError("no such dataset")
        return (module.examples, module.info) if with_info else module.examples

    module.load = load
    module.as_numpy = lambda dataset: iter(dataset)
    monkeypatch.setitem(sys.modules, "tensorflow_datasets", module)
    return module


def test_load_tfds_default_direction(fake_tfds, tmp_path):
    corpus = load_tfds("wmt14_translate/de-en", "validation", data_dir=tmp_path)
    assert fake_tfds.calls == [("wmt14_translate/de-en", "validation", tmp_path, True)]
    assert corpus.source == ["Guten Morgen .", "Grüße", ""]
    assert corpus.target == ["Good morning .", "Greetings", "  spaced  "]
    assert corpus.line_numbers == [1, 2, 3]
    assert corpus.origin == "tfds:wmt14_translate/de-en[validation] de-en"


def test_load_tfds_explicit_languages(fake_tfds):
    en_de = load_tfds("x", "train", source_lang="en")
    assert en_de.source[0] == "Good morning ." and en_de.target[0] == "Guten Morgen ."
    same = load_tfds("x", "train", target_lang="de")
    assert same.source == en_de.source and same.target == en_de.target
    both = load_tfds("x", "train", source_lang="en", target_lang="de")
    assert both.source == en_de.source
    assert load_tfds("x", "train", target_lang="en").source[1] == "Grüße"


def test_load_tfds_language_errors(fake_tfds):
    with pytest.raises(DataError, match="'fr' is not one of"):
        load_tfds("x", "train", source_lang="fr")
    with pytest.raises(DataError, match="must differ"):
        load_tfds("x", "train", source_lang="de", target_lang="de")
    with pytest.raises(DataError, match=r"example 1: no feature 'fr'"):
        load_tfds("x", "train", source_lang="fr", target_lang="en")
    fake_tfds.info = types.SimpleNamespace(supervised_keys=None)
    with pytest.raises(DataError, match="pass source_lang and target_lang"):
        load_tfds("x", "train")
    assert len(load_tfds("x", "train", source_lang="de", target_lang="en")) == 3


def test_load_tfds_bad_text_and_load_failure(fake_tfds):
    fake_tfds.examples = [*EXAMPLES, {"de": b"\xff", "en": b"x"}]
    with pytest.raises(DataError, match=r"example 4, de: invalid UTF-8"):
        load_tfds("x", "train")
    fake_tfds.examples = [{"de": 3, "en": b"x"}]
    with pytest.raises(DataError, match="expected a string"):
        load_tfds("x", "train")
    with pytest.raises(DataError, match="tfds.load failed: no such dataset"):
        load_tfds("broken", "train")


def test_module_does_not_import_tensorflow():
    script = (
        "import importlib.util, sys\n"
        "spec = importlib.util.spec_from_file_location('s', sys.argv[1])\n"
        "m = importlib.util.module_from_spec(spec); sys.modules['s'] = m\n"
        "spec.loader.exec_module(m)\n"
        "bad = [k for k in sys.modules if k.split('.')[0] in "
        "('tensorflow', 'tensorflow_datasets', 'keras', 'jax')]\n"
        "sys.exit(1 if bad else 0)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script, sources.__file__],
        capture_output=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
