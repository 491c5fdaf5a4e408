"""Who may send the server work: the Host and Origin checks and the token.

A server on the loopback address is still reachable from any web page the
machine's browser opens: a page on evil.example can resolve its own name to
127.0.0.1 (DNS rebinding) and then POST to it as if same-origin. So on a
loopback address only requests whose Host header names a loopback address
(localhost, 127.0.0.1, [::1], with any port) are served, and a request that
carries an Origin header must come from such an origin or from one given
with `--cors-origin`. With `--api-key-file`, every route but the liveness
and readiness probes and the demo page's files (GET or HEAD of `/`,
`/favicon.ico` and `/static/...`: they hold no secret, and a browser
cannot send a header when it opens a page) needs `Authorization: Bearer
<key>`, compared in constant time; the page asks for the key and sends it
with each API call. Each refusal is the server's one error shape.
"""

from __future__ import annotations

import hmac
import json
from collections.abc import Iterable
from pathlib import Path
from urllib.parse import urlsplit

from starlette.middleware.cors import CORSMiddleware
from starlette.responses import JSONResponse, Response

LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
# Probes an orchestrator calls without credentials.
OPEN_PATHS = frozenset({"/healthz", "/readyz"})
# The demo page and its files, which a browser loads before the page can
# ask for the key (static package data: no secret in them).
PAGE_PATHS = frozenset({"/", "/favicon.ico"})
PAGE_PREFIX = "/static/"


def is_page(scope) -> bool:
    """Whether the request fetches the demo page or one of its files."""
    path = scope["path"]
    return scope["method"] in ("GET", "HEAD") and (
        path in PAGE_PATHS or path.startswith(PAGE_PREFIX)
    )


def read_api_key(path: str | Path) -> str:
    """The bearer token in `path` (surrounding whitespace removed)."""
    try:
        key = Path(path).read_text(encoding="utf-8").strip()
    except OSError as error:
        raise ValueError(
            f"--api-key-file {path}: cannot be read ({error.strerror})."
        ) from None
    except UnicodeDecodeError:
        raise ValueError(f"--api-key-file {path}: not UTF-8 text.") from None
    if len(key) < 16 or any(c.isspace() for c in key):
        raise ValueError(
            f"--api-key-file {path}: the key must be one word of at least 16 "
            f"characters (this one has {len(key)}); e.g. `python -c 'import "
            "secrets; print(secrets.token_urlsafe(32))' > FILE`."
        )
    return key


def _host_name(value: str) -> str:
    """'127.0.0.1:8080' -> '127.0.0.1'; '[::1]:80' -> '::1'; '' for what
    is not a host (a client's header: '[::1' must not raise)."""
    try:
        return (urlsplit(f"//{value}").hostname or "").lower()
    except ValueError:
        return ""


class Guard:
    """ASGI middleware: the Host/Origin checks (`loopback_only`), the bearer
    token (`api_key`), before the application sees the request.

    Args:
        app: the ASGI application to guard.
        loopback_only: refuse Host headers that are not loopback names
            (or `host`). A request without one (HTTP/1.0: a probe) passes:
            browsers always send it.
        cors_origins: origins a browser may call from (`--cors-origin`).
        api_key: the bearer token, or None (no authentication).
        host: the name the server was started on (`--host`), allowed too.
    """

    def __init__(
        self,
        app,
        *,
        loopback_only: bool,
        cors_origins: Iterable[str] = (),
        api_key: str | None = None,
        host: str = "127.0.0.1",
    ):
        self.app = app
        self.names = LOOPBACK_NAMES | {host.strip("[]").lower()}
        self.loopback_only = loopback_only
        self.cors_origins = frozenset(o.rstrip("/") for o in cors_origins)
        self.api_key = api_key

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {
            k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]
        }
        refusal = self._refusal(scope, headers)
        if refusal is None:
            await self.app(scope, receive, send)
            return
        status, field, message, extra = refusal
        body = json.dumps({"error": {"field": field, "message": message}}).encode()
        response_headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            *[(k.encode(), v.encode()) for k, v in extra.items()],
        ]
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": response_headers,
            }
        )
        await send({"type": "http.response.body", "body": body})

    def _refusal(self, scope, headers: dict[str, str]):
        """(status, field, message, headers) of a refused request, or None."""
        if self.loopback_only:
            host = headers.get("host")
            if host is not None and _host_name(host) not in self.names:
                return (
                    403,
                    "Host",
                    f"Host {host!r} is not a loopback name: this server listens "
                    "on a loopback address and answers only requests for "
                    "localhost, 127.0.0.1, [::1] or its --host (a page that made "
                    "its own name point here is refused; a proxy on this "
                    "machine must forward Host as one of those).",
                    {},
                )
            origin = headers.get("origin")
            if origin is not None and not self._origin_allowed(origin):
                return (403, "Origin", _origin_refusal(origin), {})
        preflight = scope["method"] == "OPTIONS"  # Browsers send no token.
        if (
            self.api_key is not None
            and scope["path"] not in OPEN_PATHS
            and not preflight
            and not is_page(scope)
        ):
            given = headers.get("authorization", "")
            scheme, _, token = given.partition(" ")
            expected = self.api_key.encode()
            if scheme.lower() != "bearer" or not hmac.compare_digest(
                token.strip().encode(), expected
            ):
                what = "missing" if not given else "wrong"
                return (
                    401,
                    "Authorization",
                    f"The Authorization header is {what}: send "
                    "'Authorization: Bearer <the key in --api-key-file>' (the "
                    "demo page asks for the key).",
                    {"www-authenticate": 'Bearer realm="keras-transformer"'},
                )
        return None

    def _origin_allowed(self, origin: str) -> bool:
        if origin.rstrip("/") in self.cors_origins:
            return True
        try:
            netloc = urlsplit(origin).netloc
        except ValueError:
            return False
        return _host_name(netloc) in self.names


class JsonCors(CORSMiddleware):
    """Starlette's CORS middleware, whose refused preflight (a plain-text
    400) is the server's one error shape instead."""

    def preflight_response(self, request_headers) -> Response:
        response = super().preflight_response(request_headers)
        if response.status_code < 400:
            return response
        message = response.body.decode("utf-8", "replace")  # "Disallowed CORS origin"
        if "origin" in message:
            field = "Origin"
            message += f" {request_headers.get('origin')!r}: serve with --cors-origin."
        elif "method" in message:
            field = "Access-Control-Request-Method"
        else:
            field = "Access-Control-Request-Headers"
        body = {"error": {"field": field, "message": message}}
        return JSONResponse(body, status_code=response.status_code)


def _origin_refusal(origin: str) -> str:
    """Why a page of `origin` may not call, and the safe way to allow it.
    "null" is the origin of every file:// page and sandboxed frame: allowing
    it would let any of them call, so it is never suggested."""
    if origin == "null":
        return (
            "Origin 'null' (a page opened from a file, or a sandboxed frame) may "
            "not call this server. Serve the page from an http(s) address and "
            "allow that one with --cors-origin, or use the demo page at / ("
            "--cors-origin null would let every such page call it)."
        )
    return (
        f"Origin {origin!r} may not call this server: serve with --cors-origin "
        f"{origin} to allow it."
    )
