"""What the server tells its operator: Prometheus metrics, a line per request.

- `ServerMetrics`: the counters, gauges and histograms `GET /metrics`
  exposes, in a registry of its own (never prometheus_client's global one:
  each application, and each test's, counts only its own requests).
- `RequestLog`: ASGI middleware that gives every HTTP request an id (the
  client's `X-Request-ID` when it is a sane one), echoes it in the answer,
  times the request, counts it by route template, method and status, and
  logs one line for it.
- `configure_logging`: the `keras_transformer.serve` logger, writing one
  line per record to stderr, as `key=value` text or as JSON objects
  (`--log-format`), for a log collector to read without a parser of its own.

Routes, not paths, label the request metrics, and unknown methods count as
"OTHER": the labels a client can choose are then bounded, so random URLs
cannot grow the exposition without end.
"""

from __future__ import annotations

import json
import logging
import re
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from datetime import datetime, timezone
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client.core import GaugeMetricFamily

PREFIX = "keras_transformer_"
LOGGER_NAME = "keras_transformer.serve"
LOG_FORMATS = ("text", "json")
PHASES = ("warmup", "serving")
# The route label of a request no route matched (a 404, or a redirect to
# the path with or without its trailing slash).
UNMATCHED = "unmatched"
UVICORN_LOGGER = "uvicorn"  # Its "uvicorn.error" lines pass through it.
# The route of an answer the HTTP layer gave before any request was parsed
# (a header timeout, malformed HTTP: `h11_connection`).
UNPARSED = "unparsed"
# The status recorded when the client left and the application sent
# nothing (nginx's "client closed request").
CLIENT_CLOSED = 499

# From a cached /healthz (1 ms) to --max-request-s (120 s by default).
REQUEST_BUCKETS = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
    1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0,
)  # fmt: skip
# Texts per decoded batch: --max-batch-size is 8 or 32 by default; the
# Keras engine pads batches to 1, 2, 8 or 32 rows.
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
METHODS = frozenset(
    {"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE", "CONNECT"}
)

Stats = Callable[[], Mapping[str, int]]


class _QueueCollector:
    """`queue_texts` and `decoding_texts`, read from the batcher when
    Prometheus scrapes: one call, so both come from one moment."""

    def __init__(self, stats: Stats | None):
        self.stats = stats

    def describe(self) -> list[GaugeMetricFamily]:
        return list(self._families({}))

    def collect(self) -> Iterator[GaugeMetricFamily]:
        values = self.stats() if self.stats is not None else {}
        yield from self._families(values)

    @staticmethod
    def _families(values: Mapping[str, int]) -> Iterator[GaugeMetricFamily]:
        for name, key, text in (
            ("queue_texts", "queued", "Texts waiting in the batcher's queue."),
            ("decoding_texts", "decoding", "Texts in batches being decoded."),
        ):
            yield GaugeMetricFamily(PREFIX + name, text, value=values.get(key, 0))


class ServerMetrics:
    """The server's Prometheus metrics, in a registry of their own.

    Every name starts with `keras_transformer_`:

    - `requests_total{route, method, status}` (counter): HTTP requests
      answered. `route` is the matched route's template ("/v1/translate",
      "/static" for the mounted files), or "unmatched" when no route
      matched (404); `method` is "OTHER" for a non-standard method; a
      client that left before any answer counts as status 499.
    - `request_seconds{route}` (histogram): from the request's arrival to
      the last byte of its answer, 1 ms to 120 s.
    - `queue_texts`, `decoding_texts` (gauges): texts waiting in the
      batcher's queue, and in batches being decoded, read from `stats` at
      each scrape.
    - `batch_texts` (histogram): texts per decoded batch (`observe_batch`).
    - `texts_translated_total` (counter): texts decoded
      (`texts_translated`); texts per second is
      `rate(keras_transformer_texts_translated_total[1m])`.
    - `overloaded_total` (counter): requests answered 503 because the
      queue was full (`overloaded`).
    - `disconnects_total` (counter): clients that left before their answer
      (`disconnected`; `RequestLog` calls it for the requests it sees
      flagged, so the application only flags them).
    - `dropped_texts_total` (counter): texts dropped from the queue
      because their client left (`dropped_texts`).
    - `compilations_total{phase}` (counter): programs compiled, during
      "warmup" or while "serving" (`compiled`); a rising "serving" count
      means requests pay for compilations warm-up did not cover.
    - `compilation_cache_loads_total{phase}` (counter): programs read from
      the persistent compilation cache instead (`loaded`; JAX says which,
      TensorFlow does not: its loads count as compilations).
    - `warmup_shapes_planned`, `warmup_shapes_done` (gauges): the warm-up's
      steps, a batch shape each (`warmup_planned`, `warmup_step_done`): its
      progress is done / planned.
    - `warmup_seconds` (gauge): how long warm-up took (`warmed_up`).
    - `ready` (gauge): 1 once the server is warm, else 0 (`set_ready`).

    Args:
        stats: returns the batcher's counts, with keys "queued" and
            "decoding" (`Batcher.stats`); None reads as zeros.
    """

    def __init__(self, stats: Stats | None = None):
        self.registry = CollectorRegistry()
        self._queue = _QueueCollector(stats)
        self.registry.register(self._queue)
        self._add_request_metrics()
        self._add_decoding_metrics()
        self._add_state_metrics()

    def _add_request_metrics(self) -> None:
        registry = self.registry
        self.requests = Counter(
            PREFIX + "requests",
            "HTTP requests answered, by route template, method and status.",
            ["route", "method", "status"],
            registry=registry,
        )
        self.request_seconds = Histogram(
            PREFIX + "request_seconds",
            "Seconds from a request's arrival to the end of its answer.",
            ["route"],
            buckets=REQUEST_BUCKETS,
            registry=registry,
        )
        self.overloaded_requests = Counter(
            PREFIX + "overloaded",
            "Requests refused with 503 because the queue was full.",
            registry=registry,
        )
        self.disconnects = Counter(
            PREFIX + "disconnects",
            "Clients that left before their answer.",
            registry=registry,
        )

    def _add_decoding_metrics(self) -> None:
        registry = self.registry
        self.batch_texts = Histogram(
            PREFIX + "batch_texts",
            "Texts per decoded batch.",
            buckets=BATCH_BUCKETS,
            registry=registry,
        )
        self.translated = Counter(
            PREFIX + "texts_translated",
            "Texts decoded; texts per second is its rate().",
            registry=registry,
        )
        self.dropped = Counter(
            PREFIX + "dropped_texts",
            "Texts dropped from the queue because their client left.",
            registry=registry,
        )
        self.compilations = Counter(
            PREFIX + "compilations",
            "Programs compiled, during warmup or while serving.",
            ["phase"],
            registry=registry,
        )
        self.cache_loads = Counter(
            PREFIX + "compilation_cache_loads",
            "Programs loaded from the compilation cache instead of compiled.",
            ["phase"],
            registry=registry,
        )
        for phase in PHASES:  # Both exported from the start, at 0.
            self.compilations.labels(phase=phase)
            self.cache_loads.labels(phase=phase)
        self._programs = {phase: [0, 0] for phase in PHASES}

    def _add_state_metrics(self) -> None:
        self.warmup_planned_shapes = Gauge(
            PREFIX + "warmup_shapes_planned",
            "Steps of the warm-up, a batch shape each.",
            registry=self.registry,
        )
        self.warmup_done_shapes = Gauge(
            PREFIX + "warmup_shapes_done",
            "Steps of the warm-up done (progress: done / planned).",
            registry=self.registry,
        )
        self.warmup_seconds = Gauge(
            PREFIX + "warmup_seconds",
            "Seconds the warm-up took (0 until it is done).",
            registry=self.registry,
        )
        self.ready = Gauge(
            PREFIX + "ready",
            "1 once every allowed search is warm, else 0.",
            registry=self.registry,
        )

    def watch(self, stats: Stats) -> None:
        """Read the queue gauges from `stats` from now on (for a batcher
        made after these metrics)."""
        self._queue.stats = stats

    def observe_request(
        self, route: str, method: str, status: int, seconds: float
    ) -> None:
        """Count one answered request (`RequestLog` calls it)."""
        method = method if method in METHODS else "OTHER"
        self.requests.labels(route=route, method=method, status=str(status)).inc()
        self.request_seconds.labels(route=route).observe(seconds)

    def observe_batch(self, size: int) -> None:
        """One batch of `size` texts decoded."""
        self.batch_texts.observe(size)

    def texts_translated(self, n: int) -> None:
        """`n` more texts decoded."""
        self.translated.inc(n)

    def overloaded(self) -> None:
        """One request refused with 503: the queue was full."""
        self.overloaded_requests.inc()

    def disconnected(self) -> None:
        """One client left before its answer."""
        self.disconnects.inc()

    def dropped_texts(self, n: int) -> None:
        """`n` texts dropped from the queue: their client left."""
        self.dropped.inc(n)

    def compiled(self, phase: str, n: int = 1) -> None:
        """`n` programs compiled during `phase` ("warmup" or "serving")."""
        self._count_programs(self.compilations, phase, 0, n)

    def loaded(self, phase: str, n: int = 1) -> None:
        """`n` programs loaded from the compilation cache during `phase`."""
        self._count_programs(self.cache_loads, phase, 1, n)

    def _count_programs(self, counter: Counter, phase: str, kind: int, n: int) -> None:
        if phase not in PHASES:
            raise ValueError(f"phase {phase!r}: expected one of {PHASES}.")
        counter.labels(phase=phase).inc(n)
        self._programs[phase][kind] += n

    def programs(self, phase: str) -> tuple[int, int]:
        """Programs compiled, and loaded from the cache, during `phase`."""
        compiled, loaded = self._programs[phase]
        return compiled, loaded

    def warmup_planned(self, shapes: int) -> None:
        """The warm-up will run `shapes` steps."""
        self.warmup_planned_shapes.set(shapes)

    def warmup_step_done(self) -> None:
        """One more step of the warm-up done."""
        self.warmup_done_shapes.inc()

    def warmed_up(self, seconds: float) -> None:
        """The warm-up took `seconds`: the server is ready."""
        self.warmup_seconds.set(seconds)
        self.ready.set(1)

    def set_ready(self, ready: bool) -> None:
        """Whether the server is ready (1) or not (0)."""
        self.ready.set(1 if ready else 0)

    def render(self) -> tuple[bytes, str]:
        """The exposition in Prometheus's text format, and its content type."""
        return generate_latest(self.registry), CONTENT_TYPE_LATEST


# --- The request log ---------------------------------------------------------

_REQUEST_ID = re.compile(r"[A-Za-z0-9._-]{1,64}")


def request_id(headers: list[tuple[bytes, bytes]]) -> str:
    """The client's X-Request-ID if it is 1 to 64 of [A-Za-z0-9._-] (safe
    to log and echo), else a new random id."""
    for name, value in headers:
        if name.lower() == b"x-request-id":
            text = value.decode("latin-1")
            if _REQUEST_ID.fullmatch(text):
                return text
            break
    return uuid.uuid4().hex


#: The probes' paths: their successful answers are not logged by default.
PROBES = ("/healthz", "/readyz")


def route_template(scope: Mapping[str, Any]) -> str:
    """The path template of the route that answered (Starlette puts the
    route in the scope), or "unmatched"."""
    path = getattr(scope.get("route"), "path", None)
    return path if isinstance(path, str) and path else UNMATCHED


def _client(scope: Mapping[str, Any]) -> str | None:
    return _address(scope.get("client"))


def _address(client) -> str | None:
    if not client:
        return None
    host, port = client[0], client[1]
    return f"[{host}]:{port}" if ":" in str(host) else f"{host}:{port}"


class RequestLog:
    """ASGI middleware: a request id, the request metrics and one log line
    per HTTP request.

    The id (the client's valid `X-Request-ID`, else a new one) is put in
    `scope["state"]["request_id"]` (`request.state.request_id`) and sent
    back as `X-Request-ID`. After the application answered, the request is
    counted in `metrics` under its route template and logged at INFO, with
    the "texts" and "tokens" the endpoint stored in `request.state` (null
    when it stored none), and as disconnected when the application set
    `request.state.disconnected`. Messages pass through as they come, so
    streamed answers stream; lifespan and websocket scopes pass untouched.

    Args:
        app: the ASGI application.
        metrics: where requests are counted.
        logger: where the lines go (`configure_logging`).
        engine: the engine's name, on every line.
        routes: the application's paths: a request refused before routing
            (a 403 of the Host/Origin or key check) is counted under its
            path when it is one of them, not as "unmatched".
        log_probes: log the successful /healthz and /readyz probes too
            (an orchestrator sends one every few seconds); always counted.
    """

    def __init__(
        self,
        app,
        *,
        metrics: ServerMetrics,
        logger: logging.Logger,
        engine: str,
        routes: frozenset[str] = frozenset(),
        log_probes: bool = False,
    ):
        self.app = app
        self.metrics = metrics
        self.logger = logger
        self.engine = engine
        self.routes = routes
        self.log_probes = log_probes

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        state = scope.setdefault("state", {})
        state["request_id"] = rid = request_id(scope.get("headers", []))
        header = (b"x-request-id", rid.encode("ascii"))
        status: int | None = None

        async def send_with_id(message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                headers = [
                    (name, value)
                    for name, value in message.get("headers", [])
                    if name.lower() != b"x-request-id"
                ]
                message = {**message, "headers": [*headers, header]}
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        finally:
            # Also when the application raised: uvicorn then answers 500
            # and logs the traceback.
            self._record(scope, state, status, time.perf_counter() - start)

    def _record(
        self,
        scope: Mapping[str, Any],
        state: Mapping[str, Any],
        status: int | None,
        seconds: float,
    ) -> None:
        disconnected = bool(state.get("disconnected", False))
        if status is None:  # Nothing sent: the client left, or a failure.
            status = CLIENT_CLOSED if disconnected else 500
        if disconnected:
            self.metrics.disconnected()
        route = route_template(scope)
        if route == UNMATCHED and scope.get("path") in self.routes:
            route = scope["path"]  # Refused before routing (a 403).
        self.metrics.observe_request(route, scope.get("method", ""), status, seconds)
        if status < 400 and route in PROBES and not self.log_probes:
            return
        self._log(
            {
                "request_id": state.get("request_id"),
                "method": scope.get("method"),
                "path": scope.get("path"),
                "status": status,
                "texts": state.get("texts"),
                "tokens": state.get("tokens"),
                "milliseconds": round(seconds * 1000, 2),
                "engine": self.engine,
                "client": _client(scope),
                "disconnected": disconnected,
            }
        )

    def protocol_error(self, status: int, client, message: str) -> None:
        """An answer the HTTP layer gave before a request reached the
        application (`h11_connection`: 408 for headers that did not arrive
        in time, 400, 431 or 501 for malformed HTTP): counted under the
        route "unparsed" and logged as a request with its `error`."""
        self.metrics.observe_request(UNPARSED, "", status, 0.0)
        fields = dict.fromkeys(("request_id", "method", "path"))
        self._log(
            {
                **fields,
                "status": status,
                "texts": None,
                "tokens": None,
                "milliseconds": None,
                "engine": self.engine,
                "client": _address(client),
                "disconnected": False,
                "error": message,
            }
        )

    def _log(self, fields: dict[str, Any]) -> None:
        self.logger.info(
            "request %s",
            _KeyValues(fields),
            extra={"event": "request", "fields": fields},
        )


# --- Log formats -------------------------------------------------------------

# A text value written bare: nothing a reader would split on or misread.
_BARE = re.compile(r"[A-Za-z0-9._:/\[\]@+-]+")


class _KeyValues:
    """A request's fields as `key=value ...`, formatted only when a handler
    writes the record."""

    def __init__(self, fields: Mapping[str, Any]):
        self.fields = fields

    def __str__(self) -> str:
        return " ".join(f"{k}={_text_value(v)}" for k, v in self.fields.items())


def _text_value(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "true" if value else "false"
    text = str(value)
    # Quoted (JSON escapes) when a client-chosen path holds spaces, quotes
    # or line breaks: one request stays one line, its fields unambiguous.
    return text if _BARE.fullmatch(text) else json.dumps(text)


def _time(record: logging.LogRecord) -> str:
    moment = datetime.fromtimestamp(record.created, tz=timezone.utc)
    return moment.isoformat(timespec="milliseconds")


class TextFormatter(logging.Formatter):
    """`<ISO-8601 time> <LEVEL> <message>`; a request's message is
    `request key=value ...`."""

    def format(self, record: logging.LogRecord) -> str:
        line = f"{_time(record)} {record.levelname} {record.getMessage()}"
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


class JsonFormatter(logging.Formatter):
    """One JSON object per line: "time", "level", "message", and for a
    request "event": "request" with its fields as keys."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {"time": _time(record), "level": record.levelname}
        fields = getattr(record, "fields", None)
        if isinstance(fields, Mapping):
            entry["message"] = entry["event"] = getattr(record, "event", "request")
            entry.update(fields)
        else:
            entry["message"] = record.getMessage()
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False, default=str)


class _StderrHandler(logging.StreamHandler):
    """Writes to whatever `sys.stderr` is at the time (as logging's own
    last-resort handler does), so a replaced stderr is followed."""

    def __init__(self) -> None:
        super().__init__()

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, value) -> None:
        pass


def configure_logging(log_format: str) -> logging.Logger:
    """The "keras_transformer.serve" logger at INFO, writing to stderr in
    `log_format` ("text": key=value lines; "json": one object per line).
    Calling it again replaces its handler rather than adding one."""
    formatters = {"text": TextFormatter, "json": JsonFormatter}
    if log_format not in formatters:
        raise ValueError(
            f"--log-format {log_format!r}: expected one of {', '.join(LOG_FORMATS)}."
        )
    logger = logging.getLogger(LOGGER_NAME)
    for handler in list(logger.handlers):
        if isinstance(handler, _StderrHandler):
            logger.removeHandler(handler)
    handler = _StderrHandler()
    handler.setFormatter(formatters[log_format]())
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    # Its lines are complete: not again through the root logger's handlers.
    logger.propagate = False
    # uvicorn's own lines (start, shutdown, a failing request's traceback)
    # in the same format: the server runs it with `log_config=None`.
    uvicorn_logger = logging.getLogger(UVICORN_LOGGER)
    for old in list(uvicorn_logger.handlers):
        if isinstance(old, _StderrHandler):
            uvicorn_logger.removeHandler(old)
    uvicorn_logger.addHandler(handler)
    uvicorn_logger.setLevel(logging.INFO)
    uvicorn_logger.propagate = False
    return logger
