"""`keras-transformer serve`: open the engine, bind, warm up, serve until SIGTERM.

The order matters: the engine loads (and, for CTranslate2 or a SavedModel
without --export-dir, the run is exported) before the socket is bound;
then the socket listens (the line naming the address is printed; with
--port 0 it names the port chosen) and `/healthz` answers, while a worker
thread compiles every search the server allows; `/readyz` answers 200, and
translations are served, once that is done. An orchestrator routes traffic
on `/readyz` and restarts on `/healthz`.

Graceful shutdown is uvicorn's: on SIGTERM or Ctrl-C it stops accepting,
lets every request in flight finish (their texts are in the batcher's
queue or batch, and are decoded; a request whose client left has had its
waiting texts dropped), closes the connections, then runs the
application's shutdown, which stops the batcher. The process then exits
with status 0.
"""

from __future__ import annotations

import ipaddress
import logging
import signal
import socket
import tempfile
from pathlib import Path

from keras_transformer.decoding.settings import SearchSettings
from keras_transformer.serving.options import (
    DEFAULT_HOST,
    ServeOptions,
    ServerSettings,
)
from keras_transformer.utils.cpu import available_cores


def check_host(host: str, allow_remote: bool) -> None:
    """Refuse an address beyond this machine unless asked for explicitly:
    the server has no authentication and no TLS."""
    if allow_remote or is_loopback(host):
        return
    raise ValueError(
        f"--host {host} is not a loopback address: the server would be "
        "reachable from other machines, with no authentication and no TLS. "
        "Add --allow-remote to listen there (behind your own proxy or "
        f"firewall), or keep the default --host {DEFAULT_HOST}."
    )


def is_loopback(host: str) -> bool:
    """Whether every address `host` resolves to is a loopback address."""
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except socket.gaierror as error:
        raise ValueError(f"--host {host} cannot be resolved: {error}") from None
    addresses = {info[4][0] for info in infos}
    return all(ipaddress.ip_address(a.split("%")[0]).is_loopback for a in addresses)


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on (host, port); port 0 picks a free one."""
    family, kind, proto, _, address = socket.getaddrinfo(
        host, port, type=socket.SOCK_STREAM
    )[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
    except OSError as error:
        sock.close()
        raise OSError(f"Cannot listen on {host}:{port}: {error.strerror}.") from None
    sock.listen(2048)
    return sock


def decode_workers(engine: str, workers: int, backend: str = "") -> int:
    """Batches decoded at once (`--workers`; 0: the engine's default).

    CTranslate2 decodes batches side by side (`inter_threads`), and so do
    the ONNX engine (onnxruntime's sessions run concurrently, without the
    GIL) and the Keras engine on JAX and TensorFlow (their compiled
    programs run without the GIL, so one batch's host work between search
    segments overlaps the other's compute). The next batch then forms and decodes
    while one runs, where one worker leaves the texts that came meanwhile
    to wait (docs/benchmarks-http-workers.md). The SavedModel engine
    and the Keras engine on torch (eager: Python runs every op) decode one
    batch at a time."""
    side_by_side = engine in ("ctranslate2", "onnx") or (
        engine == "keras" and backend in ("jax", "tensorflow")
    )
    if not side_by_side:
        if workers > 1:
            where = f" on {backend}" if engine == "keras" else ""
            raise ValueError(
                f"--workers {workers}: the {engine} engine{where} decodes one "
                "batch at a time (batches side by side: --engine ctranslate2 or "
                "onnx, or keras on jax or tensorflow). Leave --workers out."
            )
        return 1
    return workers or (2 if available_cores() >= 2 else 1)


def default_batch_size(engine: str) -> int:
    """`--max-batch-size` when not given. The Keras engine's `Translator`
    pads a batch to 32, 8, 2 or 1 rows, so 9 to 16 texts decode as 32 rows:
    with two workers, batches of at most 8 served 96.8 sentences/s at 32
    clients where 16 served 72.6 (JAX, docs/benchmarks-http-workers.md).
    CTranslate2 pads nothing; the SavedModel takes 32 as the Keras engine
    did before it had workers."""
    return 8 if engine == "keras" else 32


def default_threads(workers: int) -> int:
    """CTranslate2's intra-op threads per worker: the cores this process may
    use, less one for the event loop, shared by the workers. Its OpenMP
    threads spin while they wait: on 2 cores, 2 threads beside the HTTP side
    decoded 1.3 sentences/s where 1 thread decoded 13.8 (beam 4, batches of
    32, a busy machine)."""
    return max(1, (available_cores() - 1) // workers)


def serve(
    *,
    run_dir: str | None,
    settings: SearchSettings,
    options: ServeOptions,
    server: ServerSettings | None = None,
    model: str | None = None,
    preset: str | None = None,
) -> int:
    """Serve the run in `run_dir` (or the `preset` directory, or for an
    export engine `server.export_dir` alone) until SIGTERM or Ctrl-C;
    returns 0. `settings` are a request's defaults, `options` the batching
    and limits, `server` the rest of `serve`'s flags (None: their
    defaults)."""
    from keras_transformer.utils.optional_imports import require

    server = server or ServerSettings()
    exported = server.engine != "keras" and server.export_dir
    if run_dir is None and preset is None and not exported:
        raise ValueError(
            "serve needs --run-dir (a trained run), --preset, or an export "
            "engine's --export-dir."
        )
    if preset and server.export_dir:
        raise ValueError("--preset and --export-dir both name the weights: pass one.")
    if server.ensemble and preset:
        raise ValueError("--ensemble needs --run-dir (not --preset) for the run.")
    allowed = server.allowed(settings)
    check_host(server.host, server.allow_remote)
    for module in ("fastapi", "uvicorn", "prometheus_client", "sentencex"):
        require(module, "serve", "keras-transformer serve")  # Before the loading.
    from keras_transformer.serving.documents import check_language
    from keras_transformer.serving.guards import read_api_key
    from keras_transformer.serving.observability import configure_logging

    language = check_language(server.source_language)
    api_key = read_api_key(server.api_key_file) if server.api_key_file else None
    configure_logging(server.log_format)
    with tempfile.TemporaryDirectory(prefix="keras-transformer-serve-") as scratch:
        if preset is not None and server.engine == "keras":  # `open_model` reads it.
            run_dir = str(preset)
        elif preset is not None:  # The exporters read runs: the preset as one.
            from keras_transformer.export.preset import preset_as_run

            run_dir = str(preset_as_run(preset, Path(scratch) / "preset-run"))
        serving = _open(run_dir, model, settings, options, server, allowed, scratch)
        serving.language = language
        app = _guarded(serving, server, api_key)
        try:
            _serve_on(
                app,
                bind(server.host, server.port),
                server.host,
                serving.engine.name,
                options,
            )
        finally:
            serving.batcher.stop()
            serving.engine.close()
    # In --log-format, as every line of the log is.
    logging.getLogger("keras_transformer.serve").info(
        "keras-transformer serve: stopped"
    )
    return 0


def _keras_backend(engine: str) -> str:
    """Keras's backend for the Keras engine; "" for the others, which an
    install without any backend serves (Keras is not imported for them)."""
    if engine != "keras":
        return ""
    import keras

    return keras.backend.backend()


def _open(run_dir, model, settings, options, server, allowed, scratch):
    """The engine, its batcher and metrics, as the application's `Serving`."""
    from keras_transformer.serving.app import Serving
    from keras_transformer.serving.batcher import Batcher
    from keras_transformer.serving.engines.selection import open_engine
    from keras_transformer.serving.observability import ServerMetrics

    name = server.engine
    workers = decode_workers(name, options.workers, _keras_backend(name))
    batch_size = options.max_batch_size or default_batch_size(name)
    engine = open_engine(
        name,
        run_dir,
        settings,
        model=model,
        export_dir=server.export_dir,
        quantize=server.quantize,
        ensemble=server.ensemble,
        scratch=Path(scratch),
        batch_size=batch_size,
        threads=options.threads or default_threads(workers),
        workers=workers,
    )
    allowed = engine.allowed(allowed)
    # Read at scrape time: the batcher exists by then.
    metrics = ServerMetrics(stats=lambda: batcher.stats())
    batcher = Batcher(
        engine.run_batch,
        max_batch_size=batch_size,
        max_wait_ms=options.max_wait_ms,
        max_queue=options.max_queue,
        workers=workers,
        on_batch=metrics.observe_batch,
        cancellable=True,  # Texts whose client left stop being searched.
    )
    return Serving(
        engine=engine,
        batcher=batcher,
        options=options,
        settings=engine.settings,
        allowed=allowed,
        metrics=metrics,
        warmup_tokens=min(
            server.warmup_tokens or options.max_text_tokens, options.max_text_tokens
        ),
    )


def _guarded(serving, server: ServerSettings, api_key):
    """The application inside its middleware: the request log outermost
    (it sees every answer, refusals included), then CORS (a preflight is
    answered before the token check, which browsers send it without; the
    Host/Origin and token refusals carry its headers, so a page can read
    them), then the Host/Origin and token checks."""
    from keras_transformer.serving.app import create_app
    from keras_transformer.serving.guards import Guard, JsonCors
    from keras_transformer.serving.observability import RequestLog

    application = create_app(serving)
    app = Guard(
        application,
        loopback_only=is_loopback(server.host),
        cors_origins=server.cors_origin,
        api_key=api_key,
        host=server.host,
    )
    if server.cors_origin:
        app = JsonCors(
            app,
            allow_origins=list(server.cors_origin),
            allow_methods=["GET", "HEAD", "POST"],
            allow_headers=["Content-Type", "Authorization", "X-Request-ID"],
            expose_headers=["X-Request-ID", "Retry-After"],
            max_age=600,
        )
    return RequestLog(
        app,
        metrics=serving.metrics,
        logger=logging.getLogger("keras_transformer.serve"),
        engine=serving.engine.name,
        routes=frozenset(getattr(route, "path", "") for route in application.routes),
        log_probes=server.log_probes,
    )


def _serve_on(app, sock: socket.socket, host: str, engine: str, options) -> None:
    """Run uvicorn on `sock` until SIGTERM or Ctrl-C, after which every
    request in flight finishes; a second signal then stops the process."""
    import uvicorn

    from keras_transformer.serving.h11_connection import protocol_class

    shown = f"[{host}]" if ":" in host else host
    print(
        f"keras-transformer serve: {engine} engine on "
        f"http://{shown}:{sock.getsockname()[1]}/ (warming up: ready when "
        "/readyz answers 200; SIGTERM or Ctrl-C stops it after the requests "
        "in flight)",
        flush=True,
    )

    config = uvicorn.Config(
        app,
        http=protocol_class(
            header_timeout_s=options.header_timeout_s,
            max_requests=options.max_requests_per_connection,
            on_error=app.protocol_error,  # Counted and logged as requests.
        ),
        log_config=None,  # Its loggers write in --log-format (configure_logging).
        log_level="info",
        access_log=False,  # One line per request is RequestLog's.
        timeout_keep_alive=options.keep_alive_s,
        timeout_graceful_shutdown=None,  # Every request in flight finishes.
    )
    # uvicorn raises the signal again once it has shut down gracefully;
    # with these handlers that ends in a return, so cleanup runs and
    # the exit status is 0.
    for name in (signal.SIGTERM, signal.SIGINT):
        signal.signal(name, lambda *_: None)
    try:
        uvicorn.Server(config).run(sockets=[sock])
    finally:
        # What is left to decode now has no caller waiting (a forced
        # exit): one more signal stops the process instead.
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        sock.close()
