"""Tests for keras_transformer.data.multi30k (offline: downloads use loopback)."""

from __future__ import annotations

import gzip
import hashlib
import http.server
import os
import socket
import threading
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from keras_transformer.data.multi30k import (
    MULTI30K_SHA256,
    MULTI30K_SPLITS,
    MULTI30K_URL,
    download_file,
    load_multi30k,
)
from keras_transformer.data.text_files import DataError
from tests.data.helpers import assert_imports_nothing_heavy, sha256, write

pytestmark = pytest.mark.backend_neutral

MULTI30K_DIR = Path(
    os.environ.get("KERAS_TRANSFORMER_MULTI30K_DIR", "/work/shared/data/multi30k")
)
needs_multi30k = pytest.mark.skipif(
    not (MULTI30K_DIR / "train.en.gz").is_file(),
    reason=f"Multi30k reference data not found in {MULTI30K_DIR}",
)


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


@pytest.fixture
def truncating_url():
    """URL of a server that announces 1000 bytes, sends 10 and hangs up."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Length", "1000")
            self.end_headers()
            self.wfile.write(b"0123456789")

        def log_message(self, format, *args):
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/train.en.gz"
    httpd.shutdown()
    httpd.server_close()
    thread.join(timeout=5)


def test_truncated_download_leaves_no_file(tmp_path, truncating_url):
    destination = tmp_path / "cache" / "train.en.gz"
    with pytest.raises(DataError) as info:
        download_file(truncating_url, destination, sha256="0" * 64)
    message = str(info.value)
    assert truncating_url in message and "manually" in message
    assert "retrieval incomplete" in message
    assert os.listdir(destination.parent) == []


@pytest.fixture
def silent_url():
    """URL of a server that accepts connections and never answers."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield f"http://127.0.0.1:{sock.getsockname()[1]}/val.en.gz"


def test_stalled_server_times_out(tmp_path, silent_url):
    destination = tmp_path / "val.en.gz"
    previous = socket.getdefaulttimeout()
    with pytest.raises(DataError, match="timed out") as info:
        download_file(silent_url, destination, timeout=0.5)
    assert silent_url in str(info.value) and "manually" in str(info.value)
    assert os.listdir(tmp_path) == []
    assert socket.getdefaulttimeout() == previous


def test_download_uses_keras_get_file(tmp_path, serve, served_dir, monkeypatch):
    import keras

    calls = []
    real_get_file = keras.utils.get_file

    def spy(*args, **kwargs):
        calls.append(kwargs)
        return real_get_file(*args, **kwargs)

    monkeypatch.setattr(keras.utils, "get_file", spy)
    server = serve(served_dir)
    digest = sha256(served_dir / "hello.txt")
    destination = tmp_path / "new" / "dir" / "hello.txt"
    assert download_file(f"{server.url}/hello.txt", destination, sha256=digest) == (
        destination
    )
    assert calls == [
        {
            "fname": "hello.txt",
            "origin": f"{server.url}/hello.txt",
            "file_hash": digest,
            "hash_algorithm": "sha256",
            "cache_dir": str(destination.parent),
            "cache_subdir": "",
        }
    ]
    # get_file would have fallen back to /tmp/.keras for a missing directory.
    assert destination.read_bytes() == b"hello world\n"


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


def test_module_imports_nothing_heavy():
    # Keras is imported by download_file only.
    assert_imports_nothing_heavy("keras_transformer.data.multi30k")


def test_missing_file_advice_speaks_to_the_cli_and_to_python(no_network, tmp_path):
    # It told a command-line user to "pass data_dir=None".
    with pytest.raises(DataError) as info:
        load_multi30k("valid", data_dir=tmp_path)
    message = str(info.value)
    assert "--data-dir" in message and "data_dir=None" in message
    with pytest.raises(DataError, match="--data-dir"):
        load_multi30k("valid", data_dir=tmp_path / "nowhere")
