"""`keras-transformer serve` with the Keras engine, as a real server on
127.0.0.1 (one process for the module; the last test, where the neutral
tests run, stops it with SIGTERM).

The run is the session's `untrained_run`, whose model never emits EOS:
outputs run to source length + EXTRA tokens, so they differ from text to
text (an answer sent to the wrong caller shows) and long texts decode slowly
enough to pile requests up (overload, shutdown under load).

Two kinds of test share the server:

- on every backend, what the Keras engine computes when served: the warm-up
  compiled every program a request runs (TensorFlow traces, JAX compiles;
  torch compiles nothing), concurrent clients (two workers on TensorFlow and
  JAX) get what `keras-transformer translate` writes, details and
  attention as the translator and the model give them, whatever the batch
  and padding they were decoded in;
- `backend_neutral` (the torch suite only): the HTTP protocol and the
  request plumbing around the engine (info, validation, the n-best answer,
  sampling and constraint requests, overload, SIGTERM), the same Python on
  every backend. Each says which per-backend tests check its Keras
  computation.

The server allows only what the selected tests ask for: where the neutral
tests are deselected it warms up greedy search and beam 4 with two alphas
(three searches), not also beam 3, sampling and the constrained searches
(eight more), which on TensorFlow cost about a trace of 3-5 s each per
batch shape."""

from __future__ import annotations

import contextlib
import io
import itertools
import json
import signal
import statistics
import threading
import time

import keras
import pytest

from keras_transformer.cli import main
from keras_transformer.data.builtin_corpus import generate_corpus
from tests.serving.client import ServerProcess

pytestmark = pytest.mark.slow

EXTRA = 4
# What the per-backend tests ask for. The built-in sentences are up to 78
# tokens long in the test run's 300-piece vocabulary.
ENGINE = ["--max-extra-length", str(EXTRA), "--allowed-beam-sizes", "1,4",
          "--allowed-alphas", "0.6,1.0", "--warmup-tokens", "8",
          "--max-texts", "4", "--max-text-chars", "160",
          "--max-document-chars", "160", "--max-text-tokens", "80"]  # fmt: skip
# What the neutral tests ask for besides (later flags win).
PROTOCOL = ["--allowed-beam-sizes", "1,3,4", "--max-text-tokens", "150",
            "--allowed-sampling", "top-k:5", "--allow-constraints"]  # fmt: skip
BATCHING = ["--max-batch-size", "4", "--max-wait-ms", "5", "--max-queue", "12"]
# Batches side by side where the engine allows it, whatever the cores.
WORKERS = 1 if keras.backend.backend() == "torch" else 2
COMPILED = "keras_transformer_compilations_total"
# Up to 8 tokens (--warmup-tokens) each. Longer sources (the built-in
# sentences: 21 to 78 tokens) compile their shapes when first served.
SHORT = ["a dog runs.", "a man runs."]


def neutral_tests_selected(request) -> bool:
    """Whether this session runs a neutral test of the module (everywhere
    without KERAS_TRANSFORMER_NEUTRAL_SUITE; else in its suite only)."""
    return any(
        item.module is request.module and item.get_closest_marker("backend_neutral")
        for item in request.session.items
    )


@pytest.fixture(scope="module")
def started(untrained_run, tmp_path_factory, request):
    """The module's server, listening (maybe still warming up)."""
    log = tmp_path_factory.mktemp("logs") / "server.log"
    args = ["--run-dir", str(untrained_run), *ENGINE]
    if neutral_tests_selected(request):
        args += PROTOCOL
    workers = ["--workers", str(WORKERS)]
    process = ServerProcess(args + BATCHING + workers, log, wait_ready=False)
    yield process
    process.stop()


@pytest.fixture(scope="module")
def server(started, translated):
    """The module's server, ready: `translate` ran (`translated`) while its
    warm-up compiled, each in its own process."""
    started.wait_ready(600)
    return started


@pytest.fixture(scope="module")
def sentences():
    """Held-out built-in sentences of many lengths, and awkward inputs."""
    pairs = generate_corpus(num_train=2000, num_valid=100, num_test=12, seed=5)
    return [source for source, _ in pairs["test"]] + ["", "  ", "Café 日本 😀"]


@pytest.fixture(scope="module")
def translated(untrained_run, sentences, tmp_path_factory):
    """{beam size: `translate --format jsonl --n-best`'s records of
    `sentences`} for greedy search and beam 4: one `translate` per beam for
    the module (each traces or compiles its own search)."""
    folder = tmp_path_factory.mktemp("translated")
    records = {}
    for beam_size in (4, 1):
        flags = ["--format", "jsonl", "--n-best", "--beam-size", str(beam_size)]
        lines = cli_translate(untrained_run, sentences, folder, *flags)
        records[beam_size] = [json.loads(line) for line in lines]
    return records


def chunks(indices: list[int]) -> list[list[int]]:
    """`indices` in requests of 1, 2, 3, 1, 2, ... texts."""
    sizes, out = itertools.cycle([1, 2, 3]), []
    while indices:
        size = next(sizes)
        out.append(indices[:size])
        indices = indices[size:]
    return out


def cli_translate(run_dir, lines, folder, *flags) -> list[str]:
    """`keras-transformer translate`'s output lines for `lines` (written
    to `folder`/input.txt)."""
    source = folder / "input.txt"
    source.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    argv = ["translate", "--run-dir", str(run_dir), "--input", str(source)]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main([*argv, "--max-extra-length", str(EXTRA), *flags]) == 0
    return out.getvalue().split("\n")[:-1]


def test_the_warm_up_compiled_what_requests_run(server):
    """Runs first, before any request compiles a shape the warm-up did not
    reach (a source over --warmup-tokens). The first request of each
    allowed setting is as fast as later ones; neither it nor a details
    request compiles anything (the metric counts TensorFlow's traces and
    JAX's compiles; torch compiles nothing)."""
    warm = server.metric(COMPILED, phase="warmup")
    assert server.metric("keras_transformer_ready") == 1
    times = []
    for beam, alpha in [(4, 0.6), (1, 0.6), (4, 1.0)] * 7:
        start = time.perf_counter()
        server.translate(SHORT, beam_size=beam, alpha=alpha)
        times.append(time.perf_counter() - start)
    later = statistics.median(times[3:])
    # The first of each setting was compiled at warm-up: no compile now.
    assert max(times[:3]) < 5 * later + 1.0, times  # A compile takes seconds.
    for beam in (4, 1):  # The details' teacher-forced pass: warmed too.
        body = {"texts": SHORT, "details": True, "beam_size": beam}
        answer = server.post("/v1/translate", body)
        assert answer.status == 200, answer.body
    assert server.metric(COMPILED, phase="serving") == 0
    assert server.metric(COMPILED, phase="warmup") == warm


def test_the_first_attention_after_ready_compiles_nothing(server):
    """The warm-up compiled /v1/attention's programs too: one per length
    both sides pad to (8, 16, 32, 64, 88 with --max-text-tokens 80; up to
    152 with 150), so the first requests of each length compile nothing
    (the module's first attention requests)."""
    assert server.metric(COMPILED, phase="serving") == 0
    pairs = [
        ("a dog runs.", "a dog."),  # 7 and 5 + 1 tokens: padded to 8.
        ("a dog runs.", "ein hund."),  # The translation's 10 + 1: 16.
        ("two men play football.", "a dog."),  # About 20: 32.
        ("two men play football. " * 2, "zwei männer spielen fussball."),  # 43: 64.
    ]
    longest = []
    for source, translation in pairs:
        body = {"source": source, "translation": translation}
        answer = server.post("/v1/attention", body)
        assert answer.status == 200, answer.body
        tokens = answer.json()
        longest.append(max(len(tokens["source_tokens"]), len(tokens["target_tokens"])))
    assert [next(n for n in (8, 16, 32, 64) if n >= t) for t in longest] == [
        8, 16, 32, 64
    ], longest  # fmt: skip
    assert server.metric(COMPILED, phase="serving") == 0


def test_concurrent_clients_get_what_translate_prints(server, sentences, translated):
    """8 clients at once, requests of 1 to 3 texts, half of them greedy:
    every answer equals what `keras-transformer translate` writes, text for
    text, however the server batched and padded it (the requests with other
    settings were not decoded with these)."""
    expected = {
        beam: [record["translation"] for record in records]
        for beam, records in translated.items()
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


def test_details_are_what_translate_writes_as_jsonl(server, sentences, translated):
    """`details: true` gives each translation the tokens, token scores,
    alignment and normalization that `translate --format jsonl` writes for
    the same search; with split_sentences, each sentence's."""
    chosen = [0, 1, 2, sentences.index("")]
    texts = [sentences[i] for i in chosen]
    for beam_size in (1, 4):
        expected = [translated[beam_size][i] for i in chosen]
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
        {"texts": [" ".join(SHORT)], "details": True,  # Searches warmed.
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


# Neutral: /healthz, /v1/info, the OpenAPI schema, /docs and the page's
# files are the server's Python and static files, no Keras computation.
@pytest.mark.backend_neutral
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


# Neutral: the shape of a translate answer (n-best list, blank texts,
# settings echoed). The beam's n-best and its scores are checked per backend
# by tests/decoding/test_scoring.py (test_n_best_lists_the_beam) and
# test_translator.py (test_nbest_gives_every_hypothesis_best_first); served,
# by test_details_are_what_translate_writes_as_jsonl (the best of beam 4 and
# as many hypotheses as `translate --n-best` writes).
@pytest.mark.backend_neutral
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
        "split_sentences": False,
    }
    assert body["settings"]["beam_size"] == 3 and body["milliseconds"] > 0
    one = server.post("/v1/translate", {"texts": ["water."], "n_best": 1}).json()
    assert len(one["translations"][0]["n_best"]) == 1


# Neutral: a sampling request's plumbing (seed, samples, the allowed list).
# The draws themselves, a seed's samples whatever the batch, are checked per
# backend by tests/decoding/test_sampling.py (test_a_seed_gives_the_same_
# samples_and_another_seed_others, test_resampled_draws_as_a_new_translator_
# on_the_same_program, test_uniform_numbers_depend_on_the_seed_sentence_and_
# sample_only).
@pytest.mark.backend_neutral
def test_sampling_draws_what_translate_draws_with_the_same_seed(
    server, untrained_run, tmp_path
):
    """A seeded request draws the samples `translate --sampling` draws
    with that seed, again and again; another seed draws others."""
    texts = ["the dog sleeps.", "the old man likes the garden."]  # 4 samples.
    flags = ["--sampling", "top-k", "--top-k", "5", "--seed", "3", "--num-samples"]
    flags += ["2", "--beam-size", "1", "--format", "jsonl"]
    expected = [json.loads(line) for line in cli_translate(
        untrained_run, texts, tmp_path, *flags)]  # fmt: skip
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


# Neutral: the request's phrases and prefixes reach the constrained search
# `translate` runs. That search is checked per backend by
# tests/decoding/test_constraints.py (every phrase met, prefixes forced,
# unsatisfiable sentences reported, one start and one step program).
@pytest.mark.backend_neutral
def test_constraints_and_prefixes_give_what_translate_gives(
    server, untrained_run, tmp_path
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
    lines = cli_translate(untrained_run, texts, tmp_path, *flags, "--format", "jsonl")
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


# Neutral: request validation and error answers, Python before the engine;
# the good requests beside them decode as the per-backend tests above check.
@pytest.mark.backend_neutral
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
    # Without split_sentences a text may be a document: its own limit.
    assert (
        "limit is 160 (--max-document-chars)" in (answers["text too long"].error()[1])
    )
    many = answers["text too many tokens"].error()[1]
    assert "subword tokens long; the limit is 150 (--max-text-tokens)" in many
    assert "limit is 4 per request" in answers["too many texts"].error()[1]
    assert good == [expected] * 3
    assert server.get("/healthz").status == 200
    blank_source = server.post("/v1/attention", {"source": " ", "translation": "x"})
    assert blank_source.status == 422 and blank_source.error()[0] == "source"
    wrong = server.post("/v1/attention", {"source": "a", "translation": 1})
    assert wrong.status == 422 and wrong.error()[0] == "translation"


LONG = " ".join(["the old man likes the garden near the river"] * 4)[:150]


# Neutral: the batcher's queue bound and the 503 it answers; the accepted
# requests decode as test_concurrent_clients_get_what_translate_prints
# checks per backend (two workers on TensorFlow and JAX).
@pytest.mark.backend_neutral
def test_overload_is_503_with_retry_after_and_the_accepted_are_answered(server):
    """Far more texts at once than the queue (12) and the batches decoding
    (WORKERS, 4 each) hold: 96, so that some are refused even where a
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


# Neutral: uvicorn's graceful shutdown and the batcher draining its queue,
# the same Python on every backend; the decoding is checked per backend above.
@pytest.mark.backend_neutral
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
