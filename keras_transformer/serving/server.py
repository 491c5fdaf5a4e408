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

import dataclasses
import ipaddress
import logging
import signal
import socket
import sys
import tempfile
from pathlib import Path

from keras_transformer.data.block_encoding import available_cores
from keras_transformer.decoding.settings import SearchSettings
from keras_transformer.serving.options import AllowedSettings, ServeOptions

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8080


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

    CTranslate2 decodes batches side by side (`inter_threads`), and so does
    the Keras engine on JAX and TensorFlow (their compiled programs run
    without the GIL, so one batch's host work between search segments
    overlaps the other's compute). The next batch then forms and decodes
    while one runs, where one worker leaves the texts that came meanwhile
    to wait (docs/benchmarks.md, "HTTP serving"). The SavedModel engine
    and the Keras engine on torch (eager: Python runs every op) decode one
    batch at a time."""
    side_by_side = engine == "ctranslate2" or (
        engine == "keras" and backend in ("jax", "tensorflow")
    )
    if not side_by_side:
        if workers > 1:
            where = f" on {backend}" if engine == "keras" else ""
            raise ValueError(
                f"--workers {workers}: the {engine} engine{where} decodes one "
                "batch at a time (batches side by side: --engine ctranslate2, "
                "or keras on jax or tensorflow). Leave --workers out."
            )
        return 1
    return workers or (2 if available_cores() >= 2 else 1)


def default_batch_size(engine: str) -> int:
    """`--max-batch-size` when not given. The Keras engine's `Translator`
    pads a batch to 32, 8, 2 or 1 rows, so 9 to 16 texts decode as 32 rows:
    with two workers, batches of at most 8 served 96.8 sentences/s at 32
    clients where 16 served 72.6 (JAX, docs/benchmarks.md, "HTTP
    serving"). CTranslate2 pads nothing; the SavedModel takes 32 as the
    Keras engine did before it had workers."""
    return 8 if engine == "keras" else 32


def default_threads(workers: int) -> int:
    """CTranslate2's intra-op threads per worker: the cores this process may
    use, less one for the event loop, shared by the workers. Its OpenMP
    threads spin while they wait: on 2 cores, 2 threads beside the HTTP side
    decoded 1.3 sentences/s where 1 thread decoded 13.8 (beam 4, batches of
    32, a busy machine)."""
    return max(1, (available_cores() - 1) // workers)


@dataclasses.dataclass(frozen=True)
class HttpPolicy:
    """Who may call the server and how it logs (the flags beside `ServeOptions`)."""

    allowed: AllowedSettings | None = None  # None: the engine's default.
    cors_origins: tuple[str, ...] = ()
    api_key_file: str | None = None
    log_format: str = "text"
    source_language: str = "en"
    warmup_tokens: int = 64


def serve(
    *,
    run_dir: str | None,
    engine: str,
    settings: SearchSettings,
    options: ServeOptions,
    policy: HttpPolicy = HttpPolicy(),
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    allow_remote: bool = False,
    model: str | None = None,
    export_dir: str | None = None,
    preset: str | None = None,
    quantize: str | None = None,
    ensemble: tuple[str, ...] = (),
) -> int:
    """Serve the run in `run_dir` (or the `preset` directory) until SIGTERM
    or Ctrl-C; returns 0. `quantize`, `ensemble`: see `open_engine`."""
    from keras_transformer.utils.optional_imports import require

    check_host(host, allow_remote)
    for module in ("fastapi", "uvicorn", "prometheus_client", "sentencex"):
        require(module, "serve", "keras-transformer serve")  # Before the loading.
    from keras_transformer.serving.documents import check_language
    from keras_transformer.serving.guards import read_api_key
    from keras_transformer.serving.observability import configure_logging

    language = check_language(policy.source_language)
    api_key = read_api_key(policy.api_key_file) if policy.api_key_file else None
    configure_logging(policy.log_format)
    with tempfile.TemporaryDirectory(prefix="keras-transformer-serve-") as scratch:
        if preset is not None and engine == "keras":  # `open_model` reads it.
            run_dir = str(preset)
        elif preset is not None:  # The exporters read runs: the preset as one.
            from keras_transformer.export.preset import preset_as_run

            run_dir = str(preset_as_run(preset, Path(scratch) / "preset-run"))
        weights = _Weights(model, export_dir, quantize, tuple(ensemble))
        serving = _open(engine, run_dir, settings, options, policy, weights, scratch)
        serving.language = language
        app = _guarded(serving, policy, api_key, host)
        try:
            _serve_on(app, bind(host, port), host, serving.engine.name, options)
        finally:
            serving.batcher.stop()
            serving.engine.close()
    print("keras-transformer serve: stopped", file=sys.stderr, flush=True)
    return 0


@dataclasses.dataclass(frozen=True)
class _Weights:
    """Which weights an engine serves, and how: a model file of the run or
    an export directory, and a quantization."""

    model: str | None = None
    export_dir: str | None = None
    quantize: str | None = None
    ensemble: tuple[str, ...] = ()  # More models, decoding with the run's.


def _open(engine_name, run_dir, settings, options, policy, weights, scratch):
    """The engine, its batcher and metrics, as the application's `Serving`."""
    import keras

    from keras_transformer.serving.app import Serving
    from keras_transformer.serving.batcher import Batcher
    from keras_transformer.serving.engines.selection import open_engine
    from keras_transformer.serving.observability import ServerMetrics

    workers = decode_workers(engine_name, options.workers, keras.backend.backend())
    batch_size = options.max_batch_size or default_batch_size(engine_name)
    engine = open_engine(
        engine_name,
        run_dir,
        settings,
        model=weights.model,
        export_dir=weights.export_dir,
        quantize=weights.quantize,
        ensemble=weights.ensemble,
        scratch=Path(scratch),
        batch_size=batch_size,
        threads=options.threads or default_threads(workers),
        workers=workers,
    )
    allowed = engine.allowed(policy.allowed)
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
        warmup_tokens=min(policy.warmup_tokens, options.max_text_tokens),
    )


def _guarded(serving, policy: HttpPolicy, api_key, host: str):
    """The application inside its middleware: the request log outermost
    (it sees every answer, refusals included), then CORS (a preflight is
    answered before the token check, which browsers send it without; the
    Host/Origin and token refusals carry its headers, so a page can read
    them), then the Host/Origin and token checks."""
    from keras_transformer.serving.app import create_app
    from keras_transformer.serving.guards import Guard, JsonCors
    from keras_transformer.serving.observability import RequestLog

    app = Guard(
        create_app(serving),
        loopback_only=is_loopback(host),
        cors_origins=policy.cors_origins,
        api_key=api_key,
        host=host,
    )
    if policy.cors_origins:
        app = JsonCors(
            app,
            allow_origins=list(policy.cors_origins),
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
        ),
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
