"""`ServerMetrics`, `RequestLog` and `configure_logging` over a tiny FastAPI
application, called straight through ASGI (no socket, no model, no Keras)."""

from __future__ import annotations

import asyncio
import json
import logging
import re
from dataclasses import dataclass

import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse
from prometheus_client.parser import text_string_to_metric_families

from keras_transformer.serving import observability
from keras_transformer.serving.observability import (
    RequestLog,
    ServerMetrics,
    configure_logging,
)

pytestmark = pytest.mark.backend_neutral

PLAIN_LOGGER = logging.getLogger("tests.serving.observability")


@dataclass
class Reply:
    status: int | None
    headers: dict[str, str]
    body: bytes
    chunks: int  # http.response.body messages: more than one when streamed.
    error: BaseException | None


async def _call(app, method: str, path: str, headers: dict, body: bytes) -> Reply:
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode("utf-8"),
        "root_path": "",
        "query_string": b"",
        "headers": [(b"host", b"testserver")]
        + [(k.lower().encode(), v.encode()) for k, v in headers.items()],
        "client": ("127.0.0.1", 50000),
        "server": ("testserver", 80),
    }
    inbox = [{"type": "http.request", "body": body, "more_body": False}]
    sent = []
    answered = asyncio.Event()

    async def receive():
        if inbox:
            return inbox.pop(0)
        await answered.wait()  # The client stays until it has its answer.
        return {"type": "http.disconnect"}

    async def send(message):
        sent.append(message)
        if message["type"] == "http.response.body" and not message.get("more_body"):
            answered.set()

    error = None
    try:
        await app(scope, receive, send)
    except Exception as raised:  # What uvicorn would log.
        error = raised
    starts = [m for m in sent if m["type"] == "http.response.start"]
    bodies = [m for m in sent if m["type"] == "http.response.body"]
    return Reply(
        status=starts[0]["status"] if starts else None,
        headers={k.decode(): v.decode() for k, v in starts[0]["headers"]}
        if starts
        else {},
        body=b"".join(m.get("body", b"") for m in bodies),
        chunks=len(bodies),
        error=error,
    )


def call(app, method: str, path: str, headers=None, body: bytes = b"") -> Reply:
    return asyncio.run(_call(app, method, path, headers or {}, body))


def make_app(metrics: ServerMetrics, logger=PLAIN_LOGGER) -> RequestLog:
    api = FastAPI()

    @api.get("/ok")
    def ok(request: Request) -> dict:
        return {"request_id": request.state.request_id}

    @api.post("/work")
    async def work(request: Request) -> dict:
        request.state.texts = 3
        request.state.tokens = 17
        return {"done": True}

    @api.get("/boom")
    def boom() -> dict:
        raise RuntimeError("boom")

    @api.get("/stream")
    def stream() -> StreamingResponse:
        return StreamingResponse(iter([b"a", b"b", b"c"]), media_type="text/plain")

    return RequestLog(api, metrics=metrics, logger=logger, engine="fake")


def samples(metrics: ServerMetrics) -> dict[tuple, float]:
    """{(sample name, sorted labels): value} of the exposition, parsed."""
    text = metrics.render()[0].decode("utf-8")
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def requests(metrics: ServerMetrics) -> dict[tuple[str, str, str], float]:
    return {
        (labels["route"], labels["method"], labels["status"]): value
        for (name, items), value in samples(metrics).items()
        if name == "keras_transformer_requests_total"
        for labels in [dict(items)]
    }


def value(metrics: ServerMetrics, name: str, **labels) -> float:
    return samples(metrics)[(name, tuple(sorted(labels.items())))]


# --- Metrics -----------------------------------------------------------------


def test_requests_are_counted_by_route_template_method_and_status():
    metrics = ServerMetrics()
    app = make_app(metrics)
    for _ in range(2):
        assert call(app, "GET", "/ok").status == 200
    assert call(app, "POST", "/work", body=b"{}").status == 200
    assert call(app, "POST", "/ok").status == 405
    assert call(app, "GET", "/no/such/path").status == 404
    assert call(app, "GET", "/another/random/path").status == 404
    boom = call(app, "GET", "/boom")
    assert boom.status == 500 and isinstance(boom.error, RuntimeError)
    assert call(app, "BREW", "/ok").status == 405

    assert requests(metrics) == {
        ("/ok", "GET", "200"): 2,
        ("/work", "POST", "200"): 1,
        ("/ok", "POST", "405"): 1,
        ("unmatched", "GET", "404"): 2,
        ("/boom", "GET", "500"): 1,
        ("/ok", "OTHER", "405"): 1,
    }
    count = "keras_transformer_request_seconds_count"
    assert value(metrics, count, route="/ok") == 4
    assert value(metrics, count, route="unmatched") == 2
    assert value(metrics, count, route="/boom") == 1
    top = "keras_transformer_request_seconds_bucket"
    assert value(metrics, top, route="/ok", le="+Inf") == 4


def test_render_gives_the_prometheus_content_type():
    body, content_type = ServerMetrics().render()
    assert content_type.startswith("text/plain; version=")
    assert b"# TYPE keras_transformer_requests_total counter" in body


def test_queue_gauges_read_the_stats_at_scrape_time():
    stats = {"queued": 0, "decoding": 0, "batches": 0, "texts": 0}
    calls = []

    def read():
        calls.append(1)
        return dict(stats)

    metrics = ServerMetrics(read)
    assert value(metrics, "keras_transformer_queue_texts") == 0
    stats.update(queued=5, decoding=8)
    scraped = samples(metrics)
    assert scraped[("keras_transformer_queue_texts", ())] == 5
    assert scraped[("keras_transformer_decoding_texts", ())] == 8
    assert len(calls) == 2  # Once per scrape, for both gauges.

    later = ServerMetrics()  # A batcher made after the metrics.
    assert value(later, "keras_transformer_queue_texts") == 0
    later.watch(lambda: {"queued": 2, "decoding": 1})
    assert value(later, "keras_transformer_queue_texts") == 2


def test_decoding_and_state_metrics():
    metrics = ServerMetrics()
    s = samples(metrics)
    assert s[("keras_transformer_ready", ())] == 0
    assert s[("keras_transformer_compilations_total", (("phase", "warmup"),))] == 0
    assert s[("keras_transformer_compilations_total", (("phase", "serving"),))] == 0

    for size in (1, 8, 8, 3):
        metrics.observe_batch(size)
    metrics.texts_translated(20)
    metrics.overloaded()
    metrics.dropped_texts(4)
    metrics.compiled("warmup", 6)
    metrics.compiled("serving")
    metrics.warmed_up(12.5)

    s = samples(metrics)
    assert s[("keras_transformer_batch_texts_count", ())] == 4
    assert s[("keras_transformer_batch_texts_sum", ())] == 20
    assert s[("keras_transformer_batch_texts_bucket", (("le", "4.0"),))] == 2
    assert s[("keras_transformer_texts_translated_total", ())] == 20
    assert s[("keras_transformer_overloaded_total", ())] == 1
    assert s[("keras_transformer_dropped_texts_total", ())] == 4
    assert s[("keras_transformer_compilations_total", (("phase", "warmup"),))] == 6
    assert s[("keras_transformer_compilations_total", (("phase", "serving"),))] == 1
    assert s[("keras_transformer_warmup_seconds", ())] == 12.5
    assert s[("keras_transformer_ready", ())] == 1
    metrics.set_ready(False)
    assert value(metrics, "keras_transformer_ready") == 0
    with pytest.raises(ValueError, match="phase 'training'"):
        metrics.compiled("training")


def test_two_servers_metrics_do_not_share_values():
    first, second = ServerMetrics(), ServerMetrics()
    call(make_app(first), "GET", "/ok")
    first.texts_translated(7)
    assert requests(first) == {("/ok", "GET", "200"): 1}
    assert requests(second) == {}
    assert value(second, "keras_transformer_texts_translated_total") == 0


# --- The middleware ----------------------------------------------------------


def test_a_valid_request_id_is_kept_and_an_invalid_one_replaced():
    app = make_app(ServerMetrics())
    kept = call(app, "GET", "/ok", {"X-Request-ID": "abc.DEF_1-2"})
    assert kept.headers["x-request-id"] == "abc.DEF_1-2"
    assert json.loads(kept.body) == {"request_id": "abc.DEF_1-2"}

    for bad in ("has space", "x" * 65, "", "ünï"):
        reply = call(app, "GET", "/ok", {"X-Request-ID": bad})
        new = reply.headers["x-request-id"]
        assert re.fullmatch(r"[0-9a-f]{32}", new), (bad, new)
        assert json.loads(reply.body) == {"request_id": new}

    first = call(app, "GET", "/ok").headers["x-request-id"]
    assert first != call(app, "GET", "/ok").headers["x-request-id"]
    assert "x-request-id" in call(app, "GET", "/nowhere").headers


def test_streamed_answers_still_stream():
    metrics = ServerMetrics()
    reply = call(make_app(metrics), "GET", "/stream")
    assert reply.status == 200 and reply.body == b"abc"
    assert reply.chunks > 1  # Passed on message by message, not gathered.
    assert "x-request-id" in reply.headers
    assert requests(metrics) == {("/stream", "GET", "200"): 1}


def test_lifespan_events_pass_through_untouched():
    ran = []

    async def lifespan_app(scope, receive, send):
        assert scope["type"] == "lifespan" and "state" not in scope
        while True:
            message = await receive()
            ran.append(message["type"])
            kind = message["type"].rsplit(".", 1)[1]
            await send({"type": f"lifespan.{kind}.complete"})
            if kind == "shutdown":
                return

    metrics = ServerMetrics()
    app = RequestLog(lifespan_app, metrics=metrics, logger=PLAIN_LOGGER, engine="x")
    events = [{"type": "lifespan.startup"}, {"type": "lifespan.shutdown"}]
    answers = []

    async def receive():
        return events.pop(0)

    async def send(message):
        answers.append(message["type"])

    asyncio.run(app({"type": "lifespan", "asgi": {"version": "3.0"}}, receive, send))
    assert ran == ["lifespan.startup", "lifespan.shutdown"]
    assert answers == ["lifespan.startup.complete", "lifespan.shutdown.complete"]
    assert requests(metrics) == {}


def test_an_application_failing_before_answering_counts_as_500(capsys):
    async def broken(scope, receive, send):
        raise RuntimeError("engine failed")

    metrics = ServerMetrics()
    logger = configure_logging("text")
    app = RequestLog(broken, metrics=metrics, logger=logger, engine="fake")
    reply = call(app, "GET", "/v1/translate")
    assert reply.status is None and isinstance(reply.error, RuntimeError)
    assert requests(metrics) == {("unmatched", "GET", "500"): 1}
    [line] = capsys.readouterr().err.splitlines()
    assert " status=500 " in line


def test_a_client_that_left_is_logged_and_counted(capsys):
    async def abandoned(scope, receive, send):
        scope["state"]["disconnected"] = True  # What the application does.
        scope["state"]["texts"] = 2

    metrics = ServerMetrics()
    logger = configure_logging("json")
    app = RequestLog(abandoned, metrics=metrics, logger=logger, engine="fake")
    assert call(app, "POST", "/v1/translate").status is None
    assert requests(metrics) == {("unmatched", "POST", "499"): 1}
    assert value(metrics, "keras_transformer_disconnects_total") == 1
    [line] = capsys.readouterr().err.splitlines()
    entry = json.loads(line)
    assert entry["disconnected"] is True and entry["status"] == 499
    assert entry["texts"] == 2 and entry["tokens"] is None


# --- The log -----------------------------------------------------------------

_PAIR = re.compile(r'(\w+)=("(?:[^"\\]|\\.)*"|\S+)')


def text_fields(line: str) -> dict[str, str]:
    return dict(_PAIR.findall(line))


def test_text_log_one_line_per_request(capsys):
    app = make_app(ServerMetrics(), configure_logging("text"))
    call(app, "POST", "/work", {"X-Request-ID": "req-1"}, b"{}")
    call(app, "GET", "/ok")
    call(app, "GET", "/a path\nwith a line break")
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 3

    work = text_fields(lines[0])
    assert re.match(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}\+00:00 INFO ", lines[0])
    assert work["request_id"] == "req-1"
    assert (work["method"], work["path"], work["status"]) == ("POST", "/work", "200")
    assert (work["texts"], work["tokens"]) == ("3", "17")
    assert (work["engine"], work["client"]) == ("fake", "127.0.0.1:50000")
    assert work["disconnected"] == "false"
    assert float(work["milliseconds"]) >= 0

    ok = text_fields(lines[1])
    assert (ok["texts"], ok["tokens"]) == ("-", "-")
    odd = text_fields(lines[2])
    assert json.loads(odd["path"]) == "/a path\nwith a line break"
    assert odd["status"] == "404"


def test_probes_are_counted_but_logged_only_when_asked_or_failing(capsys):
    """An orchestrator probes every few seconds: its 200s used to fill the
    log (issue 50)."""
    api = FastAPI()
    ready = {"now": True}

    @api.get("/healthz")
    def healthz() -> dict:
        return {"status": "ok"}

    @api.get("/readyz")
    def readyz():
        return {} if ready["now"] else JSONResponse({}, status_code=503)

    metrics = ServerMetrics()
    logger = configure_logging("text")
    quiet = RequestLog(api, metrics=metrics, logger=logger, engine="fake")
    for path in ("/healthz", "/readyz"):
        assert call(quiet, "GET", path).status == 200
    assert capsys.readouterr().err == ""
    ready["now"] = False
    assert call(quiet, "GET", "/readyz").status == 503
    assert text_fields(capsys.readouterr().err.strip())["status"] == "503"
    loud = RequestLog(api, metrics=metrics, logger=logger, engine="x", log_probes=True)
    call(loud, "GET", "/healthz")
    assert text_fields(capsys.readouterr().err.strip())["path"] == "/healthz"
    assert requests(metrics) == {
        ("/healthz", "GET", "200"): 2,
        ("/readyz", "GET", "200"): 1,
        ("/readyz", "GET", "503"): 1,
    }


def test_a_refusal_before_routing_is_counted_under_its_path():
    """A Host/Origin or key check answers 403 before the router: counted
    under the path it was for when that is a route, not as "unmatched"."""

    async def refuses(scope, receive, send):
        await send({"type": "http.response.start", "status": 403, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})

    metrics = ServerMetrics()
    app = RequestLog(
        refuses,
        metrics=metrics,
        logger=PLAIN_LOGGER,
        engine="fake",
        routes=frozenset({"/v1/translate"}),
    )
    call(app, "POST", "/v1/translate")
    call(app, "GET", "/elsewhere")
    assert requests(metrics) == {
        ("/v1/translate", "POST", "403"): 1,
        ("unmatched", "GET", "403"): 1,
    }


def test_json_log_one_object_per_request(capsys):
    app = make_app(ServerMetrics(), configure_logging("json"))
    call(app, "POST", "/work", {"X-Request-ID": "req-2"}, b"{}")
    call(app, "GET", "/ok")
    entries = [json.loads(line) for line in capsys.readouterr().err.splitlines()]
    assert len(entries) == 2
    work, ok = entries
    assert work["level"] == "INFO" and work["event"] == "request"
    assert work["time"].endswith("+00:00")
    assert {k: work[k] for k in ("request_id", "method", "path", "status")} == {
        "request_id": "req-2",
        "method": "POST",
        "path": "/work",
        "status": 200,
    }
    assert (work["texts"], work["tokens"], work["engine"]) == (3, 17, "fake")
    assert work["client"] == "127.0.0.1:50000" and work["disconnected"] is False
    assert isinstance(work["milliseconds"], float)
    assert ok["texts"] is None and ok["tokens"] is None


def test_the_http_layers_own_answers_are_counted_and_logged(capsys):
    # 408s and malformed-HTTP 400s never reach the application (issue 50:
    # missing from /metrics and the log); uvicorn's lines use the format.
    metrics = ServerMetrics()
    app = make_app(metrics, configure_logging("json"))
    app.protocol_error(408, ("127.0.0.1", 50001), "The request line ... 10 s.")
    logging.getLogger("uvicorn.error").info("Started server process [%d]", 7)
    entries = [json.loads(line) for line in capsys.readouterr().err.splitlines()]
    timeout, uvicorn_line = entries
    assert timeout["status"] == 408 and timeout["event"] == "request"
    assert timeout["error"] == "The request line ... 10 s."
    assert timeout["client"] == "127.0.0.1:50001" and timeout["path"] is None
    assert uvicorn_line["message"] == "Started server process [7]"
    assert requests(metrics) == {("unparsed", "OTHER", "408"): 1}


def test_other_records_keep_their_message(capsys):
    configure_logging("json").info("warm after %.1f s", 2.0)
    entry = json.loads(capsys.readouterr().err)
    assert entry["message"] == "warm after 2.0 s" and "event" not in entry


def test_configure_logging_is_idempotent_and_checks_the_format(capsys):
    configure_logging("json")
    logger = configure_logging("text")
    # pytest adds its own capture handlers to non-propagating loggers.
    ours = [h for h in logger.handlers if type(h).__module__ == observability.__name__]
    assert len(ours) == 1
    logger.info("once")
    assert capsys.readouterr().err.count("once") == 1
    with pytest.raises(ValueError, match=r"--log-format 'xml'.*text, json"):
        configure_logging("xml")
