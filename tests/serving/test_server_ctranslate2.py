"""`keras-transformer serve --engine ctranslate2` as a real server on
127.0.0.1, exporting the run at start-up (one process for the module)."""

from __future__ import annotations

import threading

import pytest

from tests.serving.client import ServerProcess
from tests.serving.test_server_keras import chunks, cli_translate

pytest.importorskip("ctranslate2")
pytestmark = [pytest.mark.slow, pytest.mark.backend_neutral]

EXTRA = 4
SENTENCES = [
    "the dog sleeps.",
    "the old man likes the garden near the river.",
    "water.",
    "",
    "a child reads a book.",
    "the man sees the dog and the child.",
    "a river.",
    "the garden is old and the water is cold.",
    "Café 日本 😀",
    "the child likes water.",
    "a dog and a man read.",
    "the old river.",
]


@pytest.fixture(scope="module")
def server(untrained_run, tmp_path_factory):
    log = tmp_path_factory.mktemp("logs") / "server.log"
    args = ["--run-dir", str(untrained_run), "--engine", "ctranslate2"]
    args += ["--beam-size", "1", "--allowed-beam-sizes", "1,3"]
    args += ["--max-extra-length", str(EXTRA)]  # The default batch size.
    args += ["--workers", "2"]  # Batches side by side, whatever the cores.
    process = ServerProcess(args, log)
    yield process
    assert process.stop() == 0


def test_info_names_the_engine_and_attention_is_refused(server):
    info = server.get("/v1/info").json()
    assert info["engine"] == "ctranslate2" and info["attention"] is False
    assert info["settings"]["beam_size"] == 1
    assert info["model"]["quantization"] == "float32"
    assert info["batching"]["workers"] == 2
    assert info["batching"]["max_batch_size"] == 32  # --max-batch-size 0
    answer = server.post("/v1/attention", {"source": "a dog.", "translation": "x"})
    assert answer.status == 501
    assert "need --engine keras; this server runs ctranslate2" in answer.error()[1]
    details = server.post("/v1/translate", {"texts": ["a dog."], "details": True})
    assert details.status == 422 and details.error()[0] == "details"
    assert "need --engine keras; this server runs ctranslate2" in details.error()[1]


def test_concurrent_clients_get_what_translate_prints(server, untrained_run, tmp_path):
    """Greedy search, where CTranslate2 equals `Translator` token for token
    (its beam search normalises differently: see the export's notes). The
    sources differ in length, so each batch's single length limit is not
    each sentence's: the ones that ran past theirs are searched again."""
    expected = cli_translate(untrained_run, SENTENCES, tmp_path, "--beam-size", "1")
    assert len(set(expected)) > len(SENTENCES) // 2  # Outputs differ.
    got = [None] * len(SENTENCES)
    clients = 4

    def client(number):
        for chunk in chunks(list(range(number, len(SENTENCES), clients))):
            texts = [SENTENCES[i] for i in chunk]
            for index, text in zip(chunk, server.translate(texts)):
                got[index] = text

    threads = [threading.Thread(target=client, args=(n,)) for n in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(300)
    assert got == expected


def test_beam_search_gives_the_n_best_with_scores(server):
    answer = server.post("/v1/translate", {"texts": SENTENCES[:3], "beam_size": 3})
    assert answer.status == 200
    for result in answer.json()["translations"]:
        scores = [h["score"] for h in result["n_best"]]
        assert len(scores) == 3 and scores == sorted(scores, reverse=True)
        assert result["translation"] == result["n_best"][0]["translation"]


def test_an_export_is_served_alone_without_its_run(server, untrained_run, tmp_path):
    """Issue 53: --export-dir needed --run-dir too, so the training run had
    to ship beside the export. The export holds its tokenizer: copied away
    from the run, it serves what the run's server does."""
    import shutil

    from keras_transformer.cli import main

    flags = ["--beam-size", "1", "--max-extra-length", str(EXTRA)]
    made = tmp_path / "made"
    argv = ["export", "--run-dir", str(untrained_run), "--format", "ctranslate2"]
    assert main([*argv, "--out", str(made), *flags]) == 0
    alone = tmp_path / "shipped" / "ct2"
    shutil.copytree(made, alone)
    log = tmp_path / "alone.log"
    process = ServerProcess(["--engine", "ctranslate2", "--export-dir", str(alone),
                             *flags], log)  # fmt: skip
    try:
        texts = SENTENCES[:6]
        assert process.translate(texts) == server.translate(texts)
        assert process.get("/v1/info").json()["engine"] == "ctranslate2"
    finally:
        assert process.stop() == 0
