"""The FastAPI application: the endpoints, over an engine and a batcher.

    POST /v1/translate   texts -> translations, scores, n-best lists
    POST /v1/attention   (source, translation) -> cross-attention, every
                         layer and head, with the subword tokens
    GET  /v1/info        model, tokenizer, settings, limits, engine, version
    GET  /healthz        200 while serving; the queue's length
    GET  /               the demo page (package data, nothing from outside)
    GET  /docs, /openapi.json   the framework's API documentation

Bodies are read with a size limit and parsed by `protocol`, so each bad
request gets its own 4xx naming the field. Decoding never runs on the
event loop: a request waits on the batcher's future while its worker
thread decodes.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from importlib import resources
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse
from fastapi.staticfiles import StaticFiles

from keras_transformer.decoding.settings import SearchSettings
from keras_transformer.serving import protocol
from keras_transformer.serving.batcher import Batcher, Overloaded
from keras_transformer.serving.engines import AttentionUnavailable, Engine
from keras_transformer.serving.options import ServeOptions
from keras_transformer.serving.protocol import RequestError
from keras_transformer.version import __version__

_ERRORS = {
    status: {"model": protocol.ErrorResponse, "description": text}
    for status, text in (
        (400, "The body is not UTF-8 JSON."),
        (413, "Too many texts, a text too long, or a body too large."),
        (422, "A field of the wrong type, missing, unknown or out of range."),
        (503, "The queue is full: try again after Retry-After seconds."),
    )
}


def _body_schema(model) -> dict[str, Any]:
    """The OpenAPI request body of an endpoint that parses its own body."""
    schema = model.model_json_schema()
    return {
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": schema}},
        }
    }


def create_app(
    engine: Engine,
    batcher: Batcher,
    options: ServeOptions,
    settings: SearchSettings,
) -> FastAPI:
    """The application serving `engine` through `batcher`."""

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        yield
        # uvicorn gets here after the requests in flight were answered.
        batcher.stop()

    app = FastAPI(
        title="keras-transformer",
        version=__version__,
        description="Machine translation with a Transformer trained by "
        "keras-transformer. The demo page is at /.",
        lifespan=lifespan,
    )
    _add_error_handlers(app)
    _add_pages(app)
    _add_status(app, engine, batcher, options, settings)
    _add_translate(app, engine, batcher, options, settings)
    _add_attention(app, engine, batcher, options)
    return app


def _add_status(
    app: FastAPI,
    engine: Engine,
    batcher: Batcher,
    options: ServeOptions,
    settings: SearchSettings,
) -> None:
    """`/healthz` (the queue and the workers) and `/v1/info` (the engine,
    the defaults, the limits)."""

    @app.get("/healthz")
    def healthz() -> dict[str, Any]:
        return {"status": "ok", **batcher.stats()}

    @app.get("/v1/info")
    def info() -> dict[str, Any]:
        return {
            **engine.info(),
            "settings": settings.to_dict(),
            "limits": {
                "max_texts": options.max_texts,
                "max_text_chars": options.max_text_chars,
                "max_text_tokens": options.max_text_tokens,
                "max_beam_size": options.max_beam_size,
                "max_body_bytes": options.max_body_bytes,
            },
            "batching": {
                "max_batch_size": batcher.max_batch_size,
                "max_wait_ms": options.max_wait_ms,
                "max_queue": options.max_queue,
                "workers": batcher.workers,
            },
        }


def _check_tokens(
    engine: Engine, options: ServeOptions, fields: list[str], texts: list[str]
) -> None:
    counts = [len(ids) for ids in engine.tokenizer.encode(texts)]
    protocol.check_token_counts(fields, counts, options)


def _add_translate(
    app: FastAPI,
    engine: Engine,
    batcher: Batcher,
    options: ServeOptions,
    settings: SearchSettings,
) -> None:
    """`/v1/translate`: each request checked whole before it is queued."""

    @app.post(
        "/v1/translate",
        responses={200: {"model": protocol.TranslateResponse}, **_ERRORS},
        openapi_extra=_body_schema(protocol.TranslateRequest),
    )
    async def translate(request: Request) -> JSONResponse:
        start = time.perf_counter()
        data = protocol.parse_body(await _read_body(request, options.max_body_bytes))
        parsed = protocol.validate(protocol.TranslateRequest, data)
        job = protocol.translate_job(parsed, settings, options)
        engine.check_settings(job.settings)
        fields = [f"texts[{index}]" for index in range(len(job.texts))]
        _check_tokens(engine, options, fields, job.texts)
        future = batcher.submit(job.texts, job.settings)
        results = await asyncio.wrap_future(future)
        return JSONResponse(
            {
                "translations": [_translation(h, job.n_best) for h in results],
                "settings": job.settings.to_dict(),
                "milliseconds": _since(start),
            }
        )


def _add_attention(
    app: FastAPI, engine: Engine, batcher: Batcher, options: ServeOptions
) -> None:
    """`/v1/attention`: the cross-attention of a source and its translation
    (the Keras engine alone)."""

    @app.post(
        "/v1/attention",
        responses={
            200: {"model": protocol.AttentionResponse},
            501: {"model": protocol.ErrorResponse, "description": "Not this engine."},
            **_ERRORS,
        },
        openapi_extra=_body_schema(protocol.AttentionRequest),
    )
    async def attention(request: Request) -> JSONResponse:
        start = time.perf_counter()
        data = protocol.parse_body(await _read_body(request, options.max_body_bytes))
        parsed = protocol.validate(protocol.AttentionRequest, data)
        for field in ("source", "translation"):
            protocol.check_text(field, getattr(parsed, field), options)
        if not parsed.source.strip():
            raise RequestError(422, "source", "source is blank: nothing to attend to.")
        texts = [parsed.source, parsed.translation]
        _check_tokens(engine, options, ["source", "translation"], texts)
        if not engine.has_attention:
            engine.attention(parsed.source, parsed.translation)  # Raises.
        future = batcher.submit_call(
            lambda: engine.attention(parsed.source, parsed.translation)
        )
        weights = await asyncio.wrap_future(future)
        return JSONResponse({**weights, "milliseconds": _since(start)})


def _translation(hypotheses: list[tuple[str, float]], n_best: int) -> dict[str, Any]:
    best, score = hypotheses[0]
    return {
        "translation": best,
        "score": score,
        "n_best": [{"translation": t, "score": s} for t, s in hypotheses[:n_best]],
    }


def _since(start: float) -> float:
    return round((time.perf_counter() - start) * 1000, 2)


async def _read_body(request: Request, limit: int) -> bytes:
    """The body, refused with 413 as soon as it passes `limit` bytes (a
    declared Content-Length over it is refused before reading)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise _body_too_large(f"{int(declared):,} bytes", limit)
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise _body_too_large(f"more than {limit:,} bytes", limit)
    return bytes(body)


def _body_too_large(size: str, limit: int) -> RequestError:
    return RequestError(
        413,
        "body",
        f"The body has {size}; the limit is {limit:,} bytes (from --max-texts "
        "and --max-text-chars).",
    )


def _error(status: int, field: str | None, message: str, **headers) -> JSONResponse:
    body = {"error": {"field": field, "message": message}}
    return JSONResponse(body, status_code=status, headers=headers or None)


def _add_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(RequestError)
    async def bad_request(request: Request, error: RequestError) -> JSONResponse:
        return _error(error.status, error.field, error.message)

    @app.exception_handler(Overloaded)
    async def overloaded(request: Request, error: Overloaded) -> JSONResponse:
        return _error(503, None, str(error), **{"Retry-After": str(error.retry_after)})

    @app.exception_handler(AttentionUnavailable)
    async def no_attention(request: Request, error: AttentionUnavailable):
        return _error(501, None, str(error))

    @app.exception_handler(Exception)
    async def failed(request: Request, error: Exception) -> JSONResponse:
        # A bug or an engine failure: this request's answer, not the
        # server (Starlette raises it again after answering; uvicorn logs it).
        message = f"The server failed on this request: {type(error).__name__}: {error}"
        return _error(500, None, message)


def _add_pages(app: FastAPI) -> None:
    static = StaticFiles(packages=[("keras_transformer.serving", "static")])
    app.mount("/static", static, name="static")

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    def page() -> HTMLResponse:
        files = resources.files("keras_transformer.serving") / "static"
        return HTMLResponse((files / "index.html").read_text(encoding="utf-8"))
