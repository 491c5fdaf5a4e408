"""The FastAPI application: the endpoints, over an engine and a batcher.

    POST /v1/translate   texts (or documents: split_sentences) ->
                         translations, scores, n-best lists
    POST /v1/attention   (source, translation) -> cross-attention, every
                         layer and head, with the subword tokens
    GET  /v1/info        model, tokenizer, allowed settings, limits, engine
    GET  /healthz        liveness: 200 while the process serves HTTP
    GET  /readyz         readiness: 200 once every allowed search is warm
    GET  /metrics        Prometheus text format
    GET  /               the demo page (package data, nothing from outside)
    GET  /docs, /openapi.json   the framework's API documentation

Bodies are read with a size limit and a read timeout and parsed by
`schema` and `jobs`, so each bad request gets its own 4xx naming the field; every
error, the framework's 404 and 405 included, has the one shape of
`schema.ErrorResponse`. Decoding never runs on the event loop: a request
waits on the batcher's future while a worker thread decodes, and gives it
up (its waiting texts dropped) when its client leaves or its time is up.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from importlib import resources
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse, Response
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect

from keras_transformer.decoding.compile import cache_loads, compilations
from keras_transformer.decoding.settings import SearchSettings
from keras_transformer.serving import jobs, schema
from keras_transformer.serving.batcher import Batcher, Overloaded
from keras_transformer.serving.documents import split_document
from keras_transformer.serving.engines.base import AttentionUnavailable, Engine
from keras_transformer.serving.mappings import mappings_exhausted, maps_running_short
from keras_transformer.serving.observability import ServerMetrics
from keras_transformer.serving.options import AllowedSettings, ServeOptions
from keras_transformer.serving.schema import RequestError
from keras_transformer.utils.version import __version__

log = logging.getLogger("keras_transformer.serve")
WARMUP_LOG_SECONDS = 15  # A progress line this often while warming up.

_ERRORS = {
    status: {"model": schema.ErrorResponse, "description": text}
    for status, text in (
        (400, "The body is not UTF-8 JSON."),
        (408, "The body did not arrive in time (--body-timeout-s)."),
        (413, "Too many texts, a text or sentence too long, or a body too large."),
        (415, "The body is not sent as application/json."),
        (
            422,
            "A field of the wrong type, missing, unknown, out of range or "
            "not allowed here.",
        ),
        (503, "Not ready yet, or the queue is full: retry after Retry-After s."),
        (504, "The answer took longer than --max-request-s."),
    )
}
# Not HTTP's, nginx's: the client closed the connection before its answer.
CLIENT_GONE = 499


@dataclasses.dataclass
class Serving:
    """What the endpoints share: the engine, its batcher and the policy."""

    engine: Engine
    batcher: Batcher
    options: ServeOptions
    settings: SearchSettings  # A request's defaults.
    allowed: AllowedSettings
    metrics: ServerMetrics
    language: str = "en"  # Of the sources, for splitting documents.
    warmup_tokens: int = 64
    ready: bool = False
    stopping: bool = False  # Shutting down: the warm-up ends early.
    warmup_seconds: float | None = None
    warmup_error: str | None = None
    # Why no program may be compiled any more (`serving.mappings`), or None.
    mappings_short: str | None = None
    # Programs (compiled, loaded from the cache) counted in the metrics so far.
    _programs: tuple[int, int] = (0, 0)

    def warm_up(self) -> None:
        """Compile every allowed search and, on the Keras engine, every
        program of /v1/attention and of the details (on a worker thread),
        then ready. The steps (a batch shape each) are planned first, so
        /metrics and the log say how far it is."""
        start = last_log = time.perf_counter()
        self._programs = _programs()
        engine = self.engine
        # Outputs run up to the longest source + max_extra_length, then EOS.
        longest = self.options.max_text_tokens + self.settings.max_extra_length + 1
        parts = {  # A few attention shapes cover every length: all of them.
            "batch": engine.warm_up_steps(self.allowed, self.warmup_tokens),
            "attention": engine.attention_warm_up_steps(self.options.max_text_tokens),
            "details": engine.details_warm_up_steps(longest),
        }
        steps = [step for part in parts.values() for step in part]
        self.metrics.warmup_planned(len(steps))
        for done, step in enumerate(steps, 1):
            if self.stopping:  # Shutting down: the warm-up ends early.
                return
            self._stop_short_of_the_mapping_limit()
            step()
            self.metrics.warmup_step_done()
            self._count_programs("warmup")
            if time.perf_counter() - last_log >= WARMUP_LOG_SECONDS:
                last_log = time.perf_counter()
                log.info(
                    "warming up: %d of %d shapes in %.0f s",
                    done,
                    len(steps),
                    last_log - start,
                )
        self.warmup_seconds = round(time.perf_counter() - start, 2)
        self.metrics.warmed_up(self.warmup_seconds)
        self.ready = True
        compiled, loaded = self.metrics.programs("warmup")
        log.info(
            "warm-up done in %.1f s: %s, %d programs compiled, %d loaded from "
            "the compilation cache; ready",
            self.warmup_seconds,
            ", ".join(f"{len(part)} {name} shapes" for name, part in parts.items()),
            compiled,
            loaded,
        )
        short = maps_running_short()
        if short:
            log.warning(short)

    def _stop_short_of_the_mapping_limit(self) -> None:
        exhausted = mappings_exhausted()
        if exhausted is not None:  # Refused before the limit crashes it.
            compiled, loaded = self.metrics.programs("warmup")
            raise RuntimeError(
                f"the warm-up stopped after {compiled + loaded} programs: {exhausted}"
            )

    def _count_programs(self, phase: str) -> int:
        """Count the programs compiled and loaded since the last count under
        `phase` in the metrics; returns those compiled and loaded."""
        now = _programs()
        compiled, loaded = (max(0, a - b) for a, b in zip(now, self._programs))
        self._programs = now
        self.metrics.compiled(phase, compiled)
        self.metrics.loaded(phase, loaded)
        return compiled + loaded

    def count_compilations(self) -> None:
        """Programs compiled since the last count: while serving, each is a
        shape the warm-up did not reach (logged, and in /metrics)."""
        if not self.ready:
            return
        new = self._count_programs("serving")
        if new:
            log.warning(
                "compiled %d program(s) while serving: a shape the warm-up did not "
                "reach (a source over --warmup-tokens %d)",
                new,
                self.warmup_tokens,
            )
            short = maps_running_short()
            if short:
                log.warning(short)
            self.mappings_short = mappings_exhausted()

    def check_compiles(self, counts: list[int]) -> None:
        """Refuse (503) texts that would compile a program (longer than the
        warm-up reached) once compiled programs near the mapping limit."""
        if self.mappings_short is not None and max(counts, default=0) > (
            self.warmup_tokens
        ):
            raise RequestError(
                503,
                None,
                f"Texts of more than {self.warmup_tokens} tokens need programs "
                f"the warm-up did not compile, and {self.mappings_short} "
                f"Texts of up to {self.warmup_tokens} tokens are served.",
            )


def _programs() -> tuple[int, int]:
    """Programs compiled, and loaded from the compilation cache, so far."""
    loaded = cache_loads()
    return compilations() - loaded, loaded


def create_app(serving: Serving) -> FastAPI:
    """The application serving `serving.engine` through `serving.batcher`."""

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        # The socket listens from here on: /healthz answers while warming.
        warming = serving.batcher.submit_call(serving.warm_up)
        warming.add_done_callback(lambda future: _warm_up_failed(serving, future))
        yield
        # uvicorn gets here after the requests in flight were answered.
        serving.stopping = True
        serving.batcher.stop()

    app = FastAPI(
        title="keras-transformer",
        version=__version__,
        description="Machine translation with a Transformer trained by "
        "keras-transformer. The demo page is at /.",
        lifespan=lifespan,
    )
    _add_error_handlers(app, serving)
    _add_pages(app)
    _add_status(app, serving)
    _add_translate(app, serving)
    _add_attention(app, serving)
    _add_options(app)
    return app


def _add_options(app: FastAPI) -> None:
    """OPTIONS on every route: 204 with the methods it takes (`Allow`). A
    CORS preflight, with --cors-origin, is answered by the CORS middleware
    before it gets here."""
    methods: dict[str, set[str]] = {}
    for route in app.routes:
        if getattr(route, "methods", None):
            methods.setdefault(route.path, set()).update(route.methods)
    for path, allowed in methods.items():
        allow = ", ".join(sorted(allowed | {"OPTIONS"}))
        app.add_api_route(
            path, _allow(allow), methods=["OPTIONS"], include_in_schema=False
        )


def _allow(allow: str):
    """An OPTIONS endpoint answering `Allow: allow` (one per route)."""

    def options() -> Response:
        return Response(status_code=204, headers={"Allow": allow})

    return options


def _warm_up_failed(serving: Serving, future) -> None:
    error = future.exception() if not future.cancelled() else None
    if error is not None:
        serving.warmup_error = f"{type(error).__name__}: {error}"
        log.error(
            "warm-up failed, the server stays not ready: %s", serving.warmup_error
        )


def _add_status(app: FastAPI, serving: Serving) -> None:
    """`/healthz` (alive), `/readyz` (warm), `/metrics` and `/v1/info`."""

    @app.api_route("/healthz", methods=["GET", "HEAD"])
    def healthz() -> dict[str, Any]:
        if serving.warmup_error is not None:  # Never ready: restart it.
            message = f"The warm-up failed: {serving.warmup_error}."
            raise RequestError(503, None, message)
        return {"status": "ok", **serving.batcher.stats()}

    @app.api_route("/readyz", methods=["GET", "HEAD"])
    def readyz() -> dict[str, Any]:
        _check_ready(serving)
        if serving.mappings_short is not None:  # Out of rotation: restart it.
            raise RequestError(503, None, f"Not ready: {serving.mappings_short}")
        return {"ready": True, "warmup_seconds": serving.warmup_seconds}

    @app.api_route("/metrics", methods=["GET", "HEAD"], include_in_schema=False)
    def metrics() -> Response:
        content, media_type = serving.metrics.render()
        return Response(content, media_type=media_type)

    @app.api_route("/v1/info", methods=["GET", "HEAD"])
    def info() -> dict[str, Any]:
        options = serving.options
        return {
            **serving.engine.info(),
            "settings": serving.settings.to_dict(),
            "allowed": serving.allowed.to_dict(),
            "limits": {
                "max_texts": options.max_texts,
                "max_text_chars": options.max_text_chars,
                "max_text_tokens": options.max_text_tokens,
                "max_document_chars": options.max_document_chars,
                "max_body_bytes": options.max_body_bytes,
            },
            "documents": {"language": serving.language},
            "batching": {
                "max_batch_size": serving.batcher.max_batch_size,
                "max_wait_ms": options.max_wait_ms,
                "max_queue": options.max_queue,
                "workers": serving.batcher.workers,
            },
            "ready": serving.ready,
        }


def _check_ready(serving: Serving) -> None:
    if serving.ready:
        return
    if serving.warmup_error is not None:
        message = f"The warm-up failed: {serving.warmup_error}. See the server's log."
        raise RequestError(503, None, message)
    raise RequestError(
        503,
        None,
        "The server is warming up (compiling every allowed search); it is ready "
        "when /readyz says so.",
        {"Retry-After": "5"},
    )


def _token_counts(engine: Engine, options: ServeOptions, fields, texts) -> list[int]:
    counts = [len(ids) for ids in engine.tokenizer.encode(texts)]
    jobs.check_token_counts(fields, counts, options)
    return counts


def _add_translate(app: FastAPI, serving: Serving) -> None:
    """`/v1/translate`: each request checked whole before it is queued."""

    @app.post(
        "/v1/translate",
        responses={200: {"model": schema.TranslateResponse}, **_ERRORS},
        openapi_extra=_body_schema(schema.TranslateRequest),
    )
    async def translate(request: Request) -> JSONResponse:
        start = time.perf_counter()
        body = await _read_json(request, serving.options)
        parsed = schema.validate(schema.TranslateRequest, body)
        job = jobs.translate_job(
            parsed, serving.settings, serving.options, serving.allowed
        )
        serving.engine.check_settings(job.settings)
        key = _batch_key(serving.engine, job)
        _check_ready(serving)
        documents, texts = _split(parsed, job, serving)
        if documents is not None:
            texts, fields = _sentences(documents, serving.options)
        else:
            fields = [f"texts[{index}]" for index in range(len(texts))]
            # Whole (split_sentences false: checked already), or one sentence.
            for field, text in zip(fields, texts):
                hint = jobs.SENTENCE_HINT if jobs.may_split(parsed) else ""
                jobs.check_text(field, text, serving.options.max_text_chars, hint=hint)
        counts = _token_counts(serving.engine, serving.options, fields, texts)
        serving.check_compiles(counts)
        request.state.texts, request.state.tokens = len(texts), sum(counts)
        items = texts
        if job.guided:
            allow_unk = job.settings.allow_unk
            items = jobs.encode_guides(job, serving.engine.tokenizer, allow_unk)
        results = await _decode(
            request, serving, serving.batcher.submit(items, key), start
        )
        serving.metrics.texts_translated(len(texts))
        if documents is None:
            answers = [
                {**_translation(result, job), "split_sentences": False}
                for result in results
            ]
        else:
            answers = _documents(documents, texts, results, job)
        return JSONResponse(
            {
                "translations": answers,
                "settings": job.settings.to_dict(),
                "milliseconds": _since(start),
            }
        )


def _batch_key(engine: Engine, job: jobs.TranslateJob):
    """What the job's texts are batched and decoded by: its search settings,
    or with details, sampling or constraints a `Decoding` (the alignment
    layer checked by the engine, which may have no details)."""
    if not (job.details or job.sampling is not None or job.guided):
        return job.settings
    layer = engine.alignment_layer(job.alignment_layer) if job.details else None
    return jobs.Decoding(job.settings, job.sampling, layer, job.guided)


def _split(parsed, job, serving: Serving):
    """(documents, None) when the texts are translated sentence by sentence:
    `split_sentences` true, or left out and a text holds more than one
    sentence; else (None, the texts)."""
    if not jobs.may_split(parsed):
        return None, job.texts
    documents = [split_document(text, serving.language) for text in job.texts]
    if parsed.split_sentences or any(len(d.sentences) > 1 for d in documents):
        return documents, None
    return None, job.texts


def _sentences(documents, options: ServeOptions) -> tuple[list[str], list[str]]:
    """Every sentence of the documents, in order, and the field naming each;
    413 for a sentence over --max-text-chars or too many in all."""
    texts, fields = [], []
    for index, document in enumerate(documents):
        for number, sentence in enumerate(document.sentences):
            field = f"texts[{index}].sentences[{number}]"
            jobs.check_text(
                field, sentence, options.max_text_chars, hint=jobs.SENTENCE_HINT
            )
            texts.append(sentence)
            fields.append(field)
    if len(texts) > options.max_texts:
        raise RequestError(
            413,
            "texts",
            f"The texts hold {len(texts)} sentences; the limit is "
            f"{options.max_texts} per request (--max-texts counts sentences when "
            "split_sentences is true). Send the document in parts.",
        )
    return texts, fields


def _documents(documents, sentences, results, job) -> list[dict[str, Any]]:
    """Each document's sentences' translations, rejoined in its layout."""
    answers, position = [], 0
    for document in documents:
        count = len(document.sentences)
        mine = [
            {"source": source, **_translation(hypotheses, job)}
            for source, hypotheses in zip(
                sentences[position : position + count],
                results[position : position + count],
            )
        ]
        position += count
        scores = [sentence["score"] for sentence in mine]
        answers.append(
            {
                "translation": document.join([s["translation"] for s in mine]),
                "score": sum(scores) / len(scores) if scores else 0.0,
                "n_best": [],
                "split_sentences": True,
                "sentences": mine,
            }
        )
    return answers


async def _decode(request: Request, serving: Serving, future, start: float):
    """The batcher's results for `future`; given up (its texts still
    waiting dropped) when the client leaves or --max-request-s runs out."""
    answer = asyncio.ensure_future(asyncio.wrap_future(future))
    gone = asyncio.ensure_future(_disconnect(request))
    left = serving.options.max_request_s - (time.perf_counter() - start)
    done, _ = await asyncio.wait(
        {answer, gone}, timeout=max(left, 0.0), return_when=asyncio.FIRST_COMPLETED
    )
    gone.cancel()
    serving.count_compilations()
    if answer in done:
        return answer.result()
    dropped = serving.batcher.abandon(future)
    answer.cancel()
    if gone in done:
        request.state.disconnected = True
        serving.metrics.dropped_texts(dropped)
        raise RequestError(CLIENT_GONE, None, "The client closed the connection.")
    serving.metrics.dropped_texts(dropped)
    raise RequestError(
        504,
        None,
        f"The request took more than {serving.options.max_request_s:g} s "
        f"(--max-request-s); {dropped} of its texts were still waiting and were "
        "dropped. Send fewer texts, or retry when the server is less busy.",
    )


async def _disconnect(request: Request) -> None:
    """Returns when the client has closed the connection. The body was read
    whole, so the next message the server has for this request is that."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


def _add_attention(app: FastAPI, serving: Serving) -> None:
    """`/v1/attention`: the cross-attention of a source and its translation
    (the Keras engine alone)."""
    engine, options = serving.engine, serving.options

    @app.post(
        "/v1/attention",
        responses={
            200: {"model": schema.AttentionResponse},
            501: {"model": schema.ErrorResponse, "description": "Not this engine."},
            **_ERRORS,
        },
        openapi_extra=_body_schema(schema.AttentionRequest),
    )
    async def attention(request: Request) -> JSONResponse:
        start = time.perf_counter()
        parsed = schema.validate(
            schema.AttentionRequest, await _read_json(request, options)
        )
        for field in ("source", "translation"):
            jobs.check_text(field, getattr(parsed, field), options.max_text_chars)
        if not parsed.source.strip():
            raise RequestError(422, "source", "source is blank: nothing to attend to.")
        texts = [parsed.source, parsed.translation]
        counts = _token_counts(engine, options, ["source", "translation"], texts)
        request.state.texts, request.state.tokens = 1, sum(counts)
        if not engine.has_attention:
            engine.attention(parsed.source, parsed.translation)  # Raises.
        _check_ready(serving)
        future = serving.batcher.submit_call(
            lambda: engine.attention(parsed.source, parsed.translation)
        )
        weights = await _decode(request, serving, future, start)
        return JSONResponse({**weights, "milliseconds": _since(start)})


def _body_schema(model) -> dict[str, Any]:
    """The OpenAPI request body of an endpoint that parses its own body."""
    schema = model.model_json_schema()
    return {
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": schema}},
        }
    }


def _translation(result, job: jobs.TranslateJob) -> dict[str, Any]:
    """A text's answer from the engine's result: its hypotheses (or with
    sampling its samples) as (translation, score) pairs, or with details
    `Translator.generate`'s record."""
    if isinstance(result, dict):
        hypotheses = result.get("samples", [result])
        answer = {
            "translation": result["translation"],
            "score": result["score"],
            "n_best": result.get("n_best", [])[: job.n_best],
        }
        if job.details:
            answer["details"] = _details(result)
        if "constraints" in result:
            answer["constraints"] = result["constraints"]
    else:
        hypotheses = [{"translation": t, "score": s} for t, s in result]
        answer = {**hypotheses[0], "n_best": hypotheses[: job.n_best]}
    if job.sampling is not None:  # Samples are not an n-best: none is best.
        answer["n_best"] = []
        answer["samples"] = [
            {"translation": h["translation"], "score": h["score"]}
            | ({"details": _details(h)} if job.details else {})
            for h in hypotheses
        ]
    return answer


def _details(record: dict) -> dict[str, Any]:
    return {name: record[name] for name in _DETAILS}


_DETAILS = ("normalization", "tokens", "token_scores", "alignment")


def _since(start: float) -> float:
    return round((time.perf_counter() - start) * 1000, 2)


async def _read_json(request: Request, options: ServeOptions) -> Any:
    """The body as JSON: 415 unless sent as application/json (a browser
    sends text/plain across origins without asking first), 408 when it does
    not arrive within --body-timeout-s, 413 past the size limit."""
    kind = request.headers.get("content-type", "")
    if kind.split(";")[0].strip().lower() != "application/json":
        shown = repr(kind) if kind else "missing"
        raise RequestError(
            415,
            "Content-Type",
            f"Content-Type is {shown}; send the JSON body as application/json.",
        )
    try:  # wait_for, not asyncio.timeout: Python 3.10 has no timeout().
        reading = _read_body(request, options.max_body_bytes)
        body = await asyncio.wait_for(reading, options.body_timeout_s)
    except asyncio.TimeoutError:
        raise RequestError(
            408,
            "body",
            f"The body did not arrive within {options.body_timeout_s:g} s "
            "(--body-timeout-s).",
            {"Connection": "close"},
        ) from None
    return schema.parse_body(body)


async def _read_body(request: Request, limit: int) -> bytes:
    """The body, refused with 413 as soon as it passes `limit` bytes (a
    declared Content-Length over it is refused before reading)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise _body_too_large(f"{int(declared):,} bytes", limit)
    body = bytearray()
    try:
        async for chunk in request.stream():
            body += chunk
            if len(body) > limit:
                raise _body_too_large(f"more than {limit:,} bytes", limit)
    except ClientDisconnect:  # The client left before its body was whole.
        request.state.disconnected = True
        message = "The client closed the connection."
        raise RequestError(CLIENT_GONE, None, message) from None
    return bytes(body)


def _body_too_large(size: str, limit: int) -> RequestError:
    return RequestError(
        413,
        "body",
        f"The body has {size}; the limit is {limit:,} bytes (from --max-texts, "
        "--max-text-chars and --max-document-chars).",
        {"Connection": "close"},  # Not worth reading the rest of it.
    )


def error_response(
    status: int, field: str | None, message: str, headers: dict | None = None
) -> JSONResponse:
    """The one shape of every error answer."""
    body = {"error": {"field": field, "message": message}}
    return JSONResponse(body, status_code=status, headers=headers or None)


def _add_error_handlers(app: FastAPI, serving: Serving) -> None:
    @app.exception_handler(RequestError)
    async def bad_request(request: Request, error: RequestError) -> JSONResponse:
        return error_response(error.status, error.field, error.message, error.headers)

    @app.exception_handler(HTTPException)
    async def framework(request: Request, error: HTTPException) -> JSONResponse:
        # The router's own answers: no route (404), a method it lacks (405).
        field = {404: "path", 405: "method"}.get(error.status_code)
        message = {
            404: f"No endpoint at {request.url.path}: see /docs.",
            405: f"{request.method} is not allowed on {request.url.path}.",
        }.get(error.status_code, str(error.detail))
        return error_response(error.status_code, field, message, error.headers)

    @app.exception_handler(Overloaded)
    async def overloaded(request: Request, error: Overloaded) -> JSONResponse:
        serving.metrics.overloaded()
        headers = {"Retry-After": str(error.retry_after)}
        return error_response(503, None, str(error), headers)

    @app.exception_handler(AttentionUnavailable)
    async def no_attention(request: Request, error: AttentionUnavailable):
        return error_response(501, None, str(error))

    @app.exception_handler(Exception)
    async def failed(request: Request, error: Exception) -> JSONResponse:
        # A bug or an engine failure: this request's answer, not the
        # server (Starlette raises it again after answering; uvicorn logs it).
        message = f"The server failed on this request: {type(error).__name__}: {error}"
        return error_response(500, None, message)


def _add_pages(app: FastAPI) -> None:
    static = StaticFiles(packages=[("keras_transformer.serving", "static")])
    app.mount("/static", static, name="static")
    files = resources.files("keras_transformer.serving") / "static"

    @app.api_route(
        "/",
        methods=["GET", "HEAD"],
        response_class=HTMLResponse,
        include_in_schema=False,
    )
    def page() -> HTMLResponse:
        return HTMLResponse((files / "index.html").read_text(encoding="utf-8"))

    @app.api_route("/favicon.ico", methods=["GET", "HEAD"], include_in_schema=False)
    def favicon() -> Response:
        icon = (files / "favicon.svg").read_bytes()
        return Response(icon, media_type="image/svg+xml")
