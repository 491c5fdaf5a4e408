"""`keras-transformer serve` with the Keras engine, as a real server on
127.0.0.1 (one process for the module; the last test stops it with SIGTERM).

The run is `make_run`'s untrained model that never emits EOS: outputs run
to source length + EXTRA tokens, so they differ from text to text (an
answer sent to the wrong caller shows) and long texts decode slowly enough
to pile requests up (overload, shutdown under load)."""

from __future__ import annotations

import itertools
import json
import signal
import threading
import time

import keras
import pytest

from keras_transformer.cli import main
from keras_transformer.data.builtin_corpus import generate_corpus
from tests.serving.client import ServerProcess, make_run

pytestmark = pytest.mark.slow

EXTRA = 4
LIMITS = ["--max-texts", "4", "--max-text-chars", "160", "--max-document-chars",
          "160", "--allowed-beam-sizes", "1,3,4", "--max-text-tokens", "150",
          "--warmup-tokens", "16", "--allowed-sampling", "top-k:5",
          "--allow-constraints"]  # fmt: skip
BATCHING = ["--max-batch-size", "4", "--max-wait-ms", "5", "--max-queue", "12"]
# Batches side by side where the engine allows it, whatever the cores.
WORKERS = 1 if keras.backend.backend() == "torch" else 2


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    return make_run(tmp_path_factory.mktemp("serve-keras") / "run")


@pytest.fixture(scope="module")
def server(run_dir, tmp_path_factory):
    log = tmp_path_factory.mktemp("logs") / "server.log"
    args = ["--run-dir", str(run_dir), "--max-extra-length", str(EXTRA)]
    workers = ["--workers", str(WORKERS)]
    process = ServerProcess(args + LIMITS + BATCHING + workers, log)
    yield process
    process.stop()


@pytest.fixture(scope="module")
def sentences():
    """Held-out built-in sentences of many lengths, and awkward inputs."""
    pairs = generate_corpus(num_train=2000, num_valid=100, num_test=12, seed=5)
    return [source for source, _ in pairs["test"]] + ["", "  ", "Café 日本 😀"]


def cli_translate(run_dir, lines, tmp_path, capsys, *flags) -> list[str]:
    """`keras-transformer translate`'s output lines for `lines`."""
    source = tmp_path / "input.txt"
    source.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    argv = ["translate", "--run-dir", str(run_dir), "--input", str(source)]
    capsys.readouterr()
    assert main([*argv, "--max-extra-length", str(EXTRA), *flags]) == 0
    return capsys.readouterr().out.split("\n")[:-1]


def test_health_info_docs_and_the_page(server):
    health = server.get("/healthz")
    assert health.status == 200 and health.json()["status"] == "ok"
    info = server.get("/v1/info").json()
    assert info["engine"] == "keras" and info["attention"] is True
    assert info["settings"]["beam_size"] == 4
    assert info["settings"]["max_extra_length"] == EXTRA
    assert info["limits"]["max_texts"] == 4
    assert info["batching"] == {
        "max_batch_size": 4,
        "max_wait_ms": 5.0,
        "max_queue": 12,
        "workers": WORKERS,
    }
    assert info["tokenizer"]["kind"] == "sentencepiece"
    assert info["model"]["layers"] == [1, 1] and info["version"]
    schema = server.get("/openapi.json").json()
    assert {"/v1/translate", "/v1/attention", "/v1/info", "/healthz"} <= set(
        schema["paths"]
    )
    translate_body = schema["paths"]["/v1/translate"]["post"]["requestBody"]
    assert "texts" in json.dumps(translate_body)
    assert server.get("/docs").status == 200
    page = server.get("/").body.decode()
    assert 'id="translate"' in page and 'id="heatmap"' in page
    for asset in ("/static/app.js", "/static/style.css"):
        text = server.get(asset).body.decode()
        assert "http://" not in text and "https://" not in text  # Offline.
    assert "https://" not in page and "http://" not in page


def test_translate_answers_every_text_with_its_n_best(server):
    answer = server.post(
        "/v1/translate", {"texts": ["the dog sleeps.", ""], "beam_size": 3}
    )
    assert answer.status == 200
    body = answer.json()
    first, blank = body["translations"]
    assert first["translation"] and first["n_best"][0] == {
        "translation": first["translation"],
        "score": first["score"],
    }
    assert len(first["n_best"]) == 3
    scores = [h["score"] for h in first["n_best"]]
    assert scores == sorted(scores, reverse=True)
    assert blank == {
        "translation": "",
        "score": 0.0,
        "n_best": [{"translation": "", "score": 0.0}],
    }
    assert body["settings"]["beam_size"] == 3 and body["milliseconds"] > 0
    one = server.post("/v1/translate", {"texts": ["water."], "n_best": 1}).json()
    assert len(one["translations"][0]["n_best"]) == 1


def test_details_are_what_translate_writes_as_jsonl(
    server, run_dir, sentences, tmp_path, capsys
):
    """`details: true` gives each translation the tokens, token scores,
    alignment and normalization that `translate --format jsonl` writes for
    the same search; with split_sentences, each sentence's."""
    texts = sentences[:3] + [""]
    for beam_size in (1, 3):
        flags = ["--format", "jsonl", "--n-best", "--beam-size", str(beam_size)]
        lines = cli_translate(run_dir, texts, tmp_path, capsys, *flags)
        expected = [json.loads(line) for line in lines]
        asked = {"texts": texts, "details": True, "beam_size": beam_size}
        answer = server.post("/v1/translate", {**asked, "alignment_layer": -1})
        assert answer.status == 200, answer.body
        for got, record in zip(answer.json()["translations"], expected):
            assert got["translation"] == record["translation"]
            assert got["score"] == pytest.approx(record["score"], abs=1e-4)
            assert len(got["n_best"]) == len(record["n_best"])
            details = got["details"]
            for name in ("normalization", "tokens", "alignment"):
                assert details[name] == record[name], name
            assert details["token_scores"] == pytest.approx(
                record["token_scores"], abs=1e-4
            )
    assert expected[0]["alignment"] and expected[-1]["tokens"] == []
    split = server.post(
        "/v1/translate",
        {"texts": ["the dog sleeps. the cat eats."], "details": True,
         "split_sentences": True, "beam_size": 1},
    ).json()["translations"][0]  # fmt: skip
    assert "details" not in split and len(split["sentences"]) == 2
    for sentence in split["sentences"]:
        plain = server.post(
            "/v1/translate", {"texts": [sentence["source"]], "details": True,
                              "beam_size": 1}
        ).json()["translations"][0]  # fmt: skip
        mine, alone = sentence["details"], plain["details"]
        assert mine["tokens"] == alone["tokens"]  # Other rows: float rounding.
        assert mine["token_scores"] == pytest.approx(alone["token_scores"], abs=1e-4)
    assert (
        "details"
        not in server.post("/v1/translate", {"texts": ["a dog."]}).json()[
            "translations"
        ][0]
    )


def test_sampling_draws_what_translate_draws_with_the_same_seed(
    server, run_dir, tmp_path, capsys
):
    """A seeded request draws the samples `translate --sampling` draws
    with that seed, again and again; another seed draws others."""
    texts = ["the dog sleeps.", "the old man likes the garden."]  # 4 samples.
    flags = ["--sampling", "top-k", "--top-k", "5", "--seed", "3", "--num-samples"]
    flags += ["2", "--beam-size", "1", "--format", "jsonl"]
    expected = [json.loads(line) for line in cli_translate(
        run_dir, texts, tmp_path, capsys, *flags)]  # fmt: skip
    asked = {"texts": texts, "sampling": "top-k", "top_k": 5, "seed": 3}
    answer = server.post("/v1/translate", {**asked, "num_samples": 2})
    assert answer.status == 200, answer.body
    got = answer.json()["translations"]
    for mine, record in zip(got, expected):
        assert [s["translation"] for s in mine["samples"]] == [
            s["translation"] for s in record["samples"]
        ]
        assert mine["translation"] == record["translation"]
        assert mine["n_best"] == []
    assert len({s["translation"] for s in got[1]["samples"]}) == 2
    again = server.post("/v1/translate", {**asked, "num_samples": 2})
    assert again.json()["translations"] == got
    detailed = server.post(
        "/v1/translate", {**asked, "num_samples": 2, "details": True}
    ).json()["translations"]
    for mine, record in zip(detailed, expected):
        tokens = [s["details"]["tokens"] for s in mine["samples"]]
        assert tokens == [s["tokens"] for s in record["samples"]]
    other = server.post("/v1/translate", {**asked, "seed": 4, "num_samples": 2})
    assert other.json()["translations"] != got
    info = server.get("/v1/info").json()
    assert info["allowed"]["sampling"] == ["top-k:5"]
    refused = server.post("/v1/translate", {**asked, "top_k": 6})
    assert refused.status == 422 and refused.error()[0] == "sampling"
    assert "draws with top-k:5 (--allowed-sampling" in refused.error()[1]


def test_constraints_and_prefixes_give_what_translate_gives(
    server, run_dir, tmp_path, capsys
):
    """Per text phrases and a prefix: the constrained search's translation
    and report, as `translate --constraints --target-prefix` writes them."""
    texts = ["the dog sleeps.", "the old man likes the garden.", "water."]
    constraints = [["garden"], [], ["dog", "man"]]
    prefixes = ["", "the", ""]
    terms, starts = tmp_path / "terms.tsv", tmp_path / "prefixes.txt"
    terms.write_text("".join("\t".join(p) + "\n" for p in constraints))
    starts.write_text("".join(p + "\n" for p in prefixes))
    flags = ["--constraints", str(terms), "--target-prefix", str(starts)]
    lines = cli_translate(run_dir, texts, tmp_path, capsys, *flags, "--format", "jsonl")
    expected = [json.loads(line) for line in lines]
    body = {"texts": texts, "constraints": constraints, "target_prefix": prefixes}
    answer = server.post("/v1/translate", body)
    assert answer.status == 200, answer.body
    for got, record in zip(answer.json()["translations"], expected):
        assert got["translation"] == record["translation"]
        assert got["score"] == pytest.approx(record["score"], abs=1e-4)
        assert got["constraints"] == record["constraints"]
        assert len(got["n_best"]) == 1 and "details" not in got
    assert any(r["constraints"]["satisfied"] for r in expected)
    detailed = server.post("/v1/translate", {**body, "details": True}).json()
    tokens = [t["details"]["tokens"] for t in detailed["translations"]]
    assert tokens == [r["tokens"] for r in expected]
    assert server.get("/v1/info").json()["allowed"]["constraints"] is True


def test_attention_gives_every_layer_and_head_with_both_sides_tokens(server):
    best = server.translate(["the old man likes the garden."])[0]
    answer = server.post(
        "/v1/attention",
        {"source": "the old man likes the garden.", "translation": best},
    )
    assert answer.status == 200
    body = answer.json()
    source, target = body["source_tokens"], body["target_tokens"]
    assert "".join(source).replace("\u2581", " ").strip() == (
        "the old man likes the garden."
    )
    assert target[-1] == "</s>"
    layers = body["cross_attention"]
    assert len(layers) == 1 and len(layers[0]) == 2  # 1 layer, 2 heads.
    for head in layers[0]:
        assert len(head) == len(target)
        for row in head:
            assert len(row) == len(source)
            assert sum(row) == pytest.approx(1.0, abs=1e-3)


def bad_requests(server) -> list[tuple[str, bytes, int, str]]:
    """(what, body, status, field) for every kind of bad request."""
    good = {"texts": ["a dog."]}

    def body(**changes):
        return json.dumps({**good, **changes}).encode()

    return [
        ("invalid JSON", b'{"texts": ["a"', 400, "body"),
        ("invalid UTF-8", b'{"texts": ["\xff\xfe"]}', 400, "body"),
        ("not an object", b'["a dog."]', 422, "body"),
        ("texts missing", b"{}", 422, "texts"),
        ("texts not a list", body(texts="a dog."), 422, "texts"),
        ("a text not a string", body(texts=["a", 3]), 422, "texts[1]"),
        ("beam size a string", body(beam_size="4"), 422, "beam_size"),
        ("unknown field", body(beams=4), 422, "beams"),
        ("empty batch", body(texts=[]), 422, "texts"),
        ("too many texts", body(texts=["a"] * 5), 413, "texts"),
        ("text too long", body(texts=["a", "b" * 161]), 413, "texts[1]"),
        # 45 characters, 4 byte-fallback tokens each: over 150 tokens.
        ("text too many tokens", body(texts=["a", "\U0001f600" * 45]), 413, "texts[1]"),
        ("lone surrogate", b'{"texts": ["a\\ud800"]}', 422, "texts[0]"),
        ("beam size 0", body(beam_size=0), 422, "beam_size"),
        ("beam size not allowed", body(beam_size=7), 422, "beam_size"),
        ("n-best above the beam", body(beam_size=3, n_best=4), 422, "n_best"),
        ("alpha negative", body(alpha=-1), 422, "alpha"),
        ("details not a bool", body(details="yes"), 422, "details"),
        ("alignment layer alone", body(alignment_layer=0), 422, "alignment_layer"),
        # One decoder layer: 0 or -1.
        (
            "alignment layer past the last",
            body(details=True, alignment_layer=1),
            422,
            "alignment_layer",
        ),  # fmt: skip
        ("body too large", b" " * 12_000, 413, "body"),  # Limit: 11,808.
    ]


def test_every_bad_request_is_a_4xx_naming_its_field_beside_good_ones(server):
    """Bad requests sent while others translate: each gets its own answer,
    the good ones theirs, and the server keeps serving."""
    cases = bad_requests(server)
    good_texts = [f"the dog sleeps {'near the river ' * n}." for n in range(4)]
    expected = server.translate(good_texts)
    answers, good = {}, []

    def send_bad(case):
        what, body, *_ = case
        answers[what] = server.request(
            "POST", "/v1/translate", body, {"Content-Type": "application/json"}
        )

    def send_good():
        for _ in range(3):
            good.append(server.translate(good_texts))

    threads = [threading.Thread(target=send_bad, args=(c,)) for c in cases]
    threads.append(threading.Thread(target=send_good))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(300)
    for what, _, status, field in cases:
        answer = answers[what]
        assert answer.status == status, (what, answer.body)
        named, message = answer.error()
        assert named == field, (what, message)
        assert field.split("[")[0] in message or field == "body", (what, message)
    assert "limit is 160 (--max-text-chars)" in answers["text too long"].error()[1]
    many = answers["text too many tokens"].error()[1]
    assert "subword tokens long; the limit is 150 (--max-text-tokens)" in many
    assert "limit is 4 per request" in answers["too many texts"].error()[1]
    assert good == [expected] * 3
    assert server.get("/healthz").status == 200
    blank_source = server.post("/v1/attention", {"source": " ", "translation": "x"})
    assert blank_source.status == 422 and blank_source.error()[0] == "source"
    wrong = server.post("/v1/attention", {"source": "a", "translation": 1})
    assert wrong.status == 422 and wrong.error()[0] == "translation"


def chunks(indices: list[int]) -> list[list[int]]:
    """`indices` in requests of 1, 2, 3, 1, 2, ... texts."""
    sizes, out = itertools.cycle([1, 2, 3]), []
    while indices:
        size = next(sizes)
        out.append(indices[:size])
        indices = indices[size:]
    return out


def test_concurrent_clients_get_what_translate_prints(
    server, run_dir, sentences, tmp_path, capsys
):
    """8 clients at once, requests of 1 to 3 texts, half of them greedy:
    every answer equals `keras-transformer translate` line for line (the
    requests with other settings were not decoded with these)."""
    expected = {
        4: cli_translate(run_dir, sentences, tmp_path, capsys),
        1: cli_translate(run_dir, sentences, tmp_path, capsys, "--beam-size", "1"),
    }
    assert len(set(expected[4])) > len(sentences) // 2  # Outputs differ.
    clients = 8
    got = [None] * len(sentences)

    def client(number):
        beam = 1 if number % 2 else 4
        for chunk in chunks(list(range(number, len(sentences), clients))):
            texts = [sentences[i] for i in chunk]
            for index, text in zip(chunk, server.translate(texts, beam_size=beam)):
                got[index] = (beam, text)

    threads = [threading.Thread(target=client, args=(n,)) for n in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(600)
    beams = [1 if (i % clients) % 2 else 4 for i in range(len(sentences))]
    assert got == [(beam, expected[beam][i]) for i, beam in enumerate(beams)]


LONG = " ".join(["the old man likes the garden near the river"] * 4)[:150]


def test_overload_is_503_with_retry_after_and_the_accepted_are_answered(server):
    """Far more texts at once than the queue (12) and the batches decoding
    (two workers, 4 each) hold: 96, so that some are refused even where a
    loaded machine spreads the clients' sends out."""
    expected = server.translate([LONG])[0]
    answers = []
    clients = 24
    start = threading.Barrier(clients)

    def client():
        start.wait()
        answers.append(
            server.post("/v1/translate", {"texts": [LONG] * 4, "beam_size": 4})
        )

    threads = [threading.Thread(target=client) for _ in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(600)
    statuses = sorted(a.status for a in answers)
    assert set(statuses) == {200, 503}, statuses
    for answer in answers:
        if answer.status == 503:
            assert int(answer.headers["retry-after"]) >= 1
            assert "The queue is full" in answer.error()[1]
        else:
            assert [t["translation"] for t in answer.json()["translations"]] == (
                [expected] * 4
            )
    health = server.get("/healthz").json()
    assert (health["queued"], health["decoding"]) == (0, 0)
    assert health["texts"] > health["batches"]  # Requests were decoded together.


def test_sigterm_under_load_answers_every_accepted_request(server):
    """Runs last: SIGTERM while requests wait in the queue and decode. Every
    one of them is answered, new connections are refused, exit status 0."""
    total, answers, done = 6, [], []
    expected = server.translate([LONG, "a dog."])

    def client():
        answer = server.post("/v1/translate", {"texts": [LONG, "a dog."]})
        answers.append(answer)
        done.append(2 if answer.status == 200 else 0)

    threads = [threading.Thread(target=client) for _ in range(total)]
    for thread in threads:
        thread.start()
    # Every text is in the server (queued, decoding or answered) first.
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        stats = server.get("/healthz").json()
        if stats["queued"] + stats["decoding"] + sum(done) == 2 * total:
            break
        time.sleep(0.01)
    assert stats["queued"] + stats["decoding"] > 0, "all done before SIGTERM"
    server.process.send_signal(signal.SIGTERM)
    time.sleep(0.5)  # uvicorn closes its listening socket first.
    with pytest.raises(ConnectionError):
        server.get("/healthz")
    for thread in threads:
        thread.join(600)
    assert len(answers) == total
    for answer in answers:
        assert answer.status == 200, answer.body
        assert [t["translation"] for t in answer.json()["translations"]] == expected
    assert server.process.wait(300) == 0
    server.stop()
    log = server.log.read_text()
    assert "Traceback" not in log and "keras-transformer serve: stopped" in log
