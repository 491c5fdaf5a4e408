"""What an operator meets, against a real `keras-transformer serve` on
127.0.0.1: readiness after the warm-up, allowed settings, metrics,
abandoned work, read timeouts, one error shape, HTTP details, documents.

The run is the session's `untrained_run`, whose model never emits EOS:
outputs run to source length + EXTRA tokens, so the time of a request is
known.

Backend-neutral (the torch suite only): all of it is the server's Python
(readiness plumbing, validation, metrics, the batcher, the HTTP layer,
sentence splitting), the same on every backend. What the warm-up compiles,
and that nothing is compiled while serving, is checked on every backend by
tests/serving/test_server_keras.py (test_the_warm_up_compiled_what_requests_run,
test_the_first_attention_after_ready_compiles_nothing), with the
translations the engine serves (test_concurrent_clients_get_what_translate_prints)."""

from __future__ import annotations

import json
import socket
import time

import pytest

from tests.serving.client import ServerProcess

pytestmark = [pytest.mark.slow, pytest.mark.backend_neutral]

EXTRA = 8
FLAGS = [
    "--max-extra-length", str(EXTRA), "--allowed-beam-sizes", "1,4",
    "--allowed-alphas", "0.6,1.0", "--warmup-tokens", "32",
    "--max-batch-size", "1", "--workers", "1", "--max-texts", "6",
    "--max-text-tokens", "60", "--max-document-chars", "2000",
    "--header-timeout-s", "1", "--body-timeout-s", "1",
    "--cors-origin", "https://example.org", "--max-requests-per-connection", "3",
]  # fmt: skip


@pytest.fixture(scope="module")
def server(untrained_run, tmp_path_factory):
    log = tmp_path_factory.mktemp("logs") / "server.log"
    args = ["--run-dir", str(untrained_run), *FLAGS]
    process = ServerProcess(args, log, wait_ready=False)
    yield process
    process.stop()


def test_not_ready_until_warm_then_ready(server):
    """Runs first: the module's server is still warming up. (That the
    warm-up leaves nothing to compile for requests, the first of each
    setting as fast as later ones: tests/serving/test_server_keras.py,
    test_the_warm_up_compiled_what_requests_run, on every backend.)"""
    early = server.get("/readyz")
    assert server.get("/healthz").status == 200  # Alive meanwhile.
    if early.status != 200:  # A fast machine may be warm already.
        assert early.status == 503 and "warming up" in early.error()[1]
        assert int(early.headers["retry-after"]) >= 1
        refused = server.post("/v1/translate", {"texts": ["a dog."]})
        assert refused.status == 503 and refused.error()[0] is None
    server.wait_ready(600)
    ready = server.get("/readyz").json()
    assert ready["ready"] is True and ready["warmup_seconds"] > 0
    assert server.metric("keras_transformer_ready") == 1


def test_a_setting_not_allowed_is_a_422_naming_the_allowed_values(server):
    server.wait_ready(600)
    for body, field, shown in [
        ({"alpha": 0.61}, "alpha", "one of 0.6, 1.0"),
        ({"beam_size": 3}, "beam_size", "one of 1, 4"),
    ]:
        answer = server.post("/v1/translate", {"texts": ["a dog."], **body})
        assert answer.status == 422 and answer.error()[0] == field
        assert shown in answer.error()[1]
    info = server.get("/v1/info").json()
    assert info["allowed"] == {
        "beam_sizes": [1, 4],
        "alphas": [0.6, 1.0],
        "sampling": [],  # None unless --allowed-sampling.
        "constraints": False,  # Unless --allow-constraints.
    }
    assert "/" not in info["model"]["run"]  # No absolute paths.
    assert str(server.log.parent) not in json.dumps(info)


def test_metrics_count_the_requests_sent(server):
    server.wait_ready(600)
    before = server.metrics()
    for _ in range(3):
        server.translate(["a dog."])
    server.get("/nowhere")
    after = server.metrics()

    def grew(name, **labels):
        key = (name, tuple(sorted(labels.items())))
        return after.get(key, 0) - before.get(key, 0)

    total = "keras_transformer_requests_total"
    ok = {"route": "/v1/translate", "method": "POST", "status": "200"}
    assert grew(total, **ok) == 3
    assert grew(total, route="unmatched", method="GET", status="404") == 1
    seconds = "keras_transformer_request_seconds_count"
    assert grew(seconds, route="/v1/translate") == 3
    assert grew("keras_transformer_texts_translated_total") == 3


def raw(server, data: bytes, wait: float = 0.0) -> tuple[int, dict, float]:
    """Send raw bytes, read the answer: (status, JSON body, seconds)."""
    start = time.perf_counter()
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
        sock.sendall(data)
        time.sleep(wait)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    status = int(head.split(b" ")[1])
    return status, json.loads(body), time.perf_counter() - start


def test_stalled_clients_get_408_within_the_timeout(server):
    server.wait_ready(600)
    stalled_body = (
        b"POST /v1/translate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
        b'application/json\r\nContent-Length: 100\r\n\r\n{"texts": '
    )
    for data, field in [
        (stalled_body, "body"),
        (b"POST /v1/translate HTTP/1.1\r\nHost: 127.0.0.1\r\n", "http"),
        (b"", "http"),  # A silent connection.
    ]:
        status, body, seconds = raw(server, data)
        assert status == 408 and body["error"]["field"] == field, body
        assert seconds < 5


def test_a_keep_alive_connection_carries_at_most_its_requests(server):
    """--max-requests-per-connection 3: the third answer says close, and the
    server closes the connection."""
    from tests.serving.test_h11_connection import Client

    server.wait_ready(600)
    client = Client(server.port)
    try:
        headers = []
        for path in ("/healthz", "/v1/info", "/healthz"):
            client.send(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
            status, answer_headers, _ = client.response()
            assert status == 200
            headers.append(answer_headers.get("connection"))
        assert headers == [None, None, "close"]
        assert client.closed()
    finally:
        client.close()


def test_a_sentence_too_long_is_not_told_to_leave_split_sentences_out(server):
    server.wait_ready(600)
    message = server.post("/v1/translate", {"texts": ["x" * 1001]}).error()[1]
    assert "leave split_sentences out" not in message  # It was left out.
    assert message.endswith("split the text; it is one sentence, and a sentence "
                            "is translated whole.")  # fmt: skip


def test_every_error_has_the_one_json_shape(server):
    server.wait_ready(600)
    json_type = {"Content-Type": "application/json"}
    good = json.dumps({"texts": ["a dog."]}).encode()
    cases = [
        (server.get("/nowhere"), 404, "path"),
        (server.request("DELETE", "/v1/translate"), 405, "method"),
        (server.post("/v1/translate", {"texts": ["x" * 1001]}), 413, "texts[0]"),
        (server.request("POST", "/v1/translate", good, {}), 415, "Content-Type"),
        (
            server.request(
                "POST", "/v1/translate", good, {"Content-Type": "text/plain"}
            ),
            415,
            "Content-Type",
        ),
        (server.post("/v1/translate", {"texts": [1]}), 422, "texts[0]"),
        (
            server.request("POST", "/v1/translate", b"{", json_type),
            400,
            "body",
        ),
    ]
    for answer, status, field in cases:
        assert answer.status == status, answer.body
        assert answer.headers["content-type"] == "application/json"
        assert set(answer.json()) == {"error"}
        assert set(answer.json()["error"]) == {"field", "message"}
        assert answer.error()[0] == field
    status, body, _ = raw(server, b"GARBAGE\r\n\r\n")
    assert status == 400 and body["error"]["field"] == "http"


def test_head_options_host_origin_and_cors(server):
    server.wait_ready(600)
    for path in ("/healthz", "/readyz", "/v1/info", "/", "/metrics"):
        head = server.request("HEAD", path)
        assert head.status == 200 and int(head.headers["content-length"]) > 0, path
        with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
            sock.sendall(f"HEAD {path} HTTP/1.0\r\n\r\n".encode())
            answer = b""
            while chunk := sock.recv(65536):
                answer += chunk
        assert answer.startswith(b"HTTP/1.1 200") and answer.endswith(b"\r\n\r\n")
    for host, status in [("[::1]:80", 200), ("[::1", 403), ("localhost", 200)]:
        assert (
            server.request("GET", "/healthz", headers={"Host": host}).status == status
        )
    bad_origin = server.request("GET", "/v1/info", headers={"Origin": "http://["})
    assert bad_origin.status == 403 and bad_origin.error()[0] == "Origin"
    assert server.get("/favicon.ico").status == 200
    options = server.request("OPTIONS", "/v1/translate")
    assert options.status == 204 and options.headers["allow"] == "OPTIONS, POST"
    nowhere = server.request("OPTIONS", "/nowhere")
    assert nowhere.status == 404 and nowhere.error()[0] == "path"
    rebound = server.request("GET", "/v1/info", headers={"Host": "evil.example"})
    assert rebound.status == 403 and rebound.error()[0] == "Host"
    foreign = server.request(
        "POST",
        "/v1/translate",
        json.dumps({"texts": ["a"]}).encode(),
        {"Content-Type": "application/json", "Origin": "https://evil.example"},
    )
    assert foreign.status == 403 and foreign.error()[0] == "Origin"
    assert "--cors-origin https://evil.example to allow it" in foreign.error()[1]
    # A file:// page or sandboxed frame: "null" would admit every one of them.
    sandboxed = server.request("GET", "/v1/info", headers={"Origin": "null"})
    assert sandboxed.status == 403
    assert "Serve the page from an http(s) address" in sandboxed.error()[1]
    assert "--cors-origin null would let every such page" in sandboxed.error()[1]
    refused = server.request(
        "OPTIONS",
        "/v1/translate",
        headers={
            "Origin": "http://localhost:3000",
            "Access-Control-Request-Method": "POST",
        },
    )
    assert refused.status == 400 and refused.error()[0] == "Origin"
    preflight = server.request(
        "OPTIONS",
        "/v1/translate",
        headers={
            "Origin": "https://example.org",
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "content-type",
        },
    )
    assert preflight.status == 200
    assert preflight.headers["access-control-allow-origin"] == "https://example.org"
    allowed = server.request(
        "GET", "/v1/info", headers={"Origin": "https://example.org"}
    )
    assert allowed.status == 200
    assert allowed.headers["access-control-allow-origin"] == "https://example.org"


def test_a_document_is_split_translated_as_sentences_and_rejoined(server):
    server.wait_ready(600)
    sentences = [
        "A dog runs on the beach.",
        "Two men play football.",
        "The water is cold.",
        "A woman reads a book.",
        "Children sing.",
    ]
    document = f"{sentences[0]} {sentences[1]}\n\n  {' '.join(sentences[2:])}\n"
    answer = server.post(
        "/v1/translate", {"texts": [document], "split_sentences": True}
    )
    assert answer.status == 200, answer.body
    (item,) = answer.json()["translations"]
    assert [s["source"] for s in item["sentences"]] == sentences
    alone = server.translate(sentences)
    assert [s["translation"] for s in item["sentences"]] == alone
    assert item["translation"] == (
        f"{alone[0]} {alone[1]}\n\n  {' '.join(alone[2:])}\n"
    )
    # Without the flag: split too (3 sentences), and said so; one sentence
    # and split_sentences false stay whole (issue 50: a multi-sentence text
    # came back as one word).
    three = " ".join(sentences[:3])
    answer = server.post("/v1/translate", {"texts": [three, sentences[3]]})
    assert answer.status == 200, answer.body
    split, whole = answer.json()["translations"]
    assert split["split_sentences"] is True and whole["split_sentences"] is True
    assert [s["translation"] for s in split["sentences"]] == alone[:3]
    assert split["translation"] == " ".join(alone[:3])
    assert [s["translation"] for s in whole["sentences"]] == [alone[3]]
    (one,) = server.post("/v1/translate", {"texts": [sentences[3]]}).json()[
        "translations"
    ]
    assert one["split_sentences"] is False and one.get("sentences") is None
    kept = server.post(
        "/v1/translate", {"texts": [three], "split_sentences": False}
    ).json()["translations"][0]
    assert kept["split_sentences"] is False
    long_sentence = "Fine. " + "the old man likes the garden " * 20 + "."
    too_long = server.post(
        "/v1/translate", {"texts": [long_sentence], "split_sentences": True}
    )
    assert too_long.status == 413
    assert too_long.error()[0] == "texts[0].sentences[1]"
    assert "(--max-text-tokens)" in too_long.error()[1]


KEY = "k" * 32


@pytest.fixture(scope="module")
def patient_server(untrained_run, tmp_path_factory):
    """A server with a key, JSON logs, and batches that wait 3 s for a 4th
    text: a lone request's text stays queued that long."""
    folder = tmp_path_factory.mktemp("patient")
    (folder / "key").write_text(KEY + "\n")
    process = ServerProcess(
        ["--run-dir", str(untrained_run), "--beam-size", "1", "--warmup-tokens", "8",
         "--max-extra-length", "2", "--api-key-file", str(folder / "key"),
         "--log-format", "json", "--max-batch-size", "4", "--max-wait-ms",
         "3000", "--cors-origin", "https://example.org"],
        folder / "server.log",
    )  # fmt: skip
    yield process
    process.stop()


def test_abandoned_requests_are_not_decoded(patient_server):
    """Three clients send a text each and leave after 0.3 s, while their
    batch waits for a fourth: their texts are dropped, none decoded."""
    server = patient_server
    authorized = {"Authorization": f"Bearer {KEY}"}
    before = server.request("GET", "/healthz").json()
    leavers = []
    for _ in range(3):
        body = json.dumps({"texts": ["a dog runs."]}).encode()
        leaver = socket.create_connection(("127.0.0.1", server.port))
        head = (
            f"POST /v1/translate HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            f"Authorization: Bearer {KEY}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
        )
        leaver.sendall(head.encode() + body)
        leavers.append(leaver)
    time.sleep(0.3)
    for leaver in leavers:
        leaver.close()
    time.sleep(0.5)  # The server notices (well within the batch's 3 s).
    stats = server.request("GET", "/healthz").json()
    assert stats["dropped"] - before["dropped"] == 3
    assert stats["queued"] == 0
    answer = server.request(
        "POST",
        "/v1/translate",
        json.dumps({"texts": ["a dog runs."]}).encode(),
        {"Content-Type": "application/json", **authorized},
    )
    assert answer.status == 200  # Alone after its 3 s wait: one batch, one text.
    after = server.request("GET", "/healthz").json()
    assert after["texts"] - before["texts"] == 1
    samples = server.metrics(authorized)
    assert samples[("keras_transformer_dropped_texts_total", ())] == 3
    assert samples[("keras_transformer_disconnects_total", ())] == 3


def test_with_a_key_the_page_is_served_and_the_api_asks_for_the_key(
    patient_server,
):
    """The demo page's files need no key (no secret in them; a browser
    opening the page cannot send one); every API call does."""
    server = patient_server
    page = server.get("/")
    assert page.status == 200 and 'id="api-key"' in page.body.decode()
    for path in ("/static/app.js", "/static/style.css", "/favicon.ico"):
        assert server.get(path).status == 200, path
        assert server.request("HEAD", path).status == 200, path
    assert "Authorization" in server.get("/static/app.js").body.decode()
    for method, path in [
        ("GET", "/v1/info"),
        ("GET", "/metrics"),
        ("GET", "/docs"),
        ("POST", "/"),  # Not a page fetch.
        ("GET", "/nowhere"),
    ]:
        answer = server.request(method, path)
        assert answer.status == 401, (method, path)
        assert answer.headers["content-type"] == "application/json"
        assert set(answer.json()) == {"error"}
        assert answer.error()[0] == "Authorization"
        assert "demo page asks for the key" in answer.error()[1]
    missing = server.request("GET", "/static/missing.js")  # The key is no oracle.
    assert missing.status == 404 and missing.error()[0] == "path"


def test_a_bearer_token_and_json_logs(patient_server):
    process = patient_server
    body = json.dumps({"texts": ["a dog."] * 4}).encode()  # A full batch.
    headers = {"Content-Type": "application/json", "X-Request-ID": "req-7"}
    missing = process.request("POST", "/v1/translate", body, headers)
    assert missing.status == 401 and missing.error()[0] == "Authorization"
    assert "bearer" in missing.headers["www-authenticate"].lower()
    wrong = process.request(
        "POST", "/v1/translate", body, {**headers, "Authorization": "Bearer x"}
    )
    assert wrong.status == 401
    good = process.request(
        "POST", "/v1/translate", body, {**headers, "Authorization": f"Bearer {KEY}"}
    )
    assert good.status == 200 and good.headers["x-request-id"] == "req-7"
    assert process.get("/readyz").status == 200  # Probes need no key.
    # A browser's preflight carries no token; the refusal is readable by it.
    origin = {"Origin": "https://example.org"}
    preflight = process.request(
        "OPTIONS",
        "/v1/translate",
        headers={**origin, "Access-Control-Request-Method": "POST"},
    )
    assert preflight.status == 200
    refused = process.request("POST", "/v1/translate", body, {**headers, **origin})
    assert refused.status == 401
    assert refused.headers["access-control-allow-origin"] == "https://example.org"
    with socket.create_connection(("127.0.0.1", process.port), timeout=30) as raw:
        raw.sendall(b"NOT HTTP\r\n\r\n")  # Answered by the HTTP layer: 400.
        assert raw.recv(65536).startswith(b"HTTP/1.1 400 ")
    unparsed = ("keras_transformer_requests_total", "unparsed", "OTHER", "400")
    found = process.metrics(headers={"Authorization": f"Bearer {KEY}"})
    labels = (("method", "OTHER"), ("route", "unparsed"), ("status", "400"))
    assert found[(unparsed[0], labels)] == 1
    assert process.stop() == 0
    log = process.log.read_text()
    entries = [json.loads(line) for line in log.splitlines()]  # Every line.
    malformed = [e for e in entries if e.get("status") == 400]
    assert len(malformed) == 1 and "illegal request line" in malformed[0]["error"]
    lines = [json.loads(line) for line in log.splitlines() if '"req-7"' in line]
    ok = [line for line in lines if line.get("status") == 200]
    assert len(ok) == 1 and ok[0]["texts"] == 4 and ok[0]["tokens"] > 0
    assert ok[0]["engine"] == "keras" and ok[0]["milliseconds"] > 0
