"""uvicorn's h11 protocol: a header timeout, a request limit, JSON error answers.

Why it exists: uvicorn 0.55 has no header read timeout, so a client that
connects and sends nothing, or trickles its headers a byte at a time, holds
a connection for ever; it has no limit on the requests of one keep-alive
connection (its `limit_max_requests` stops the whole server); and it
answers malformed HTTP with a plain-text 400, where every other error of
this server is `{"error": {"field", "message"}}`.

- Header timeout: a new connection, and a keep-alive connection once the
  first bytes of its next request arrive, must complete the request line
  and headers within `header_timeout_s`, else `408` and the connection
  closes. The deadline is not moved by further bytes (a trickle is not
  progress). Once the headers are in, reading the body is the
  application's business. An idle keep-alive connection (a response sent,
  no byte of a next request yet) has no header timer: uvicorn's
  `timeout_keep_alive` closes it, silently, as before.
- Requests per connection: the `max_requests`-th request of a connection
  (0: no limit) is answered with `Connection: close` (any Connection
  header of the application's replaced), after which h11 and uvicorn
  close the connection, as for a client that asked to close. A request
  the client pipelined behind it is not answered: HTTP/1.1 clients resend
  such requests on a new connection.
- Malformed HTTP (any h11 `RemoteProtocolError`): the JSON shape with field
  "http" and h11's reason, at h11's status hint: 400, 431 for a header
  section over h11's maximum incomplete event size (16 KiB unless
  `h11_max_incomplete_event_size` says), 501 for a Transfer-Encoding h11
  does not support.

Everything else (requests, keep-alive, pipelining, graceful shutdown) is
uvicorn's own code. Pass `protocol_class(header_timeout_s=...,
max_requests=...)` as `uvicorn.Config(http=...)`.

uvicorn internals relied on (tests/serving/test_h11_connection.py checks
them, so an upgrade that moves them fails there): `H11Protocol`'s
attributes `conn` (the h11.Connection), `transport`, `loop`, `logger`,
`config`, `server_state.default_headers` (Date and Server headers); its
hooks `connection_made`, `data_received`, `on_response_complete`,
`connection_lost`; `_unset_keepalive_if_required()`; and that
`handle_events` calls `send_400_response(msg)` inside its
`except h11.RemoteProtocolError` block (so the error is `sys.exc_info()`);
that it sets `cycle` to a new `RequestResponseCycle` for each request and
starts the cycle's task without running it, the task passing
`cycle.send` to the application when it starts (so a `send` set on the
cycle before then is the one used).
"""

from __future__ import annotations

import asyncio
import json
import math
import sys
from collections.abc import Callable
from http import HTTPStatus
from typing import Any

import h11
from h11._connection import DEFAULT_MAX_INCOMPLETE_EVENT_SIZE  # As uvicorn does.
from uvicorn.protocols.http.h11_impl import H11Protocol

MAX_DETAIL_CHARS = 200  # h11 quotes the offending line: keep the answer short.


class JsonH11Protocol(H11Protocol):
    """`H11Protocol` with the header read timeout, the limit of requests
    per connection and JSON error answers."""

    header_timeout_s: float = 10.0  # `protocol_class` sets the served values.
    max_requests: int = 0  # Per connection; 0: no limit.
    # Told of each error answer: (status, client address, message).
    on_error: Callable[[int, Any, str], None] | None = None
    _header_timer: asyncio.TimerHandle | None = None
    _requests: int = 0  # Requests begun on this connection.

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm_header_timer()  # A new connection owes a request at once.

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        self._follow_request()

    def on_response_complete(self) -> None:
        # uvicorn starts the next cycle here and parses pipelined bytes.
        super().on_response_complete()
        self._follow_request()

    def handle_events(self) -> None:
        cycle = self.cycle
        super().handle_events()
        if self.cycle is not cycle and self.cycle is not None:  # A new request.
            self._requests += 1
            if self.max_requests and self._requests >= self.max_requests:
                _close_after(self.cycle)

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        self._cancel_header_timer()

    def send_400_response(self, msg: str) -> None:
        # Called by `handle_events` inside `except h11.RemoteProtocolError`.
        error = sys.exc_info()[1]
        if not isinstance(error, h11.RemoteProtocolError):
            self._send_error(400, msg)
            return
        status = error.error_status_hint
        if status == 431:  # h11 says "Receive buffer too long".
            limit = (
                self.config.h11_max_incomplete_event_size
                or DEFAULT_MAX_INCOMPLETE_EVENT_SIZE
            )
            detail = f"the request line and headers exceed {limit} bytes"
        else:  # Quoted client bytes are repr()-escaped: safe, if long.
            detail = str(error)[:MAX_DETAIL_CHARS]
        self._send_error(status, f"{msg.rstrip('.')}: {detail}.")

    def _follow_request(self) -> None:
        """Arm the timer when a next request has begun arriving; cancel it
        once its headers are in (h11 has left IDLE) or the connection ends."""
        if self.transport.is_closing() or self.conn.their_state is not h11.IDLE:
            self._cancel_header_timer()
        elif self.conn.trailing_data[0]:  # Part of a request line or headers.
            # Bytes of a request: the header timer governs now, not
            # keep-alive (uvicorn arms that before parsing pipelined bytes).
            self._unset_keepalive_if_required()
            if self._header_timer is None:  # The deadline never moves.
                self._arm_header_timer()

    def _arm_header_timer(self) -> None:
        self._header_timer = self.loop.call_later(
            self.header_timeout_s, self._header_timeout
        )

    def _cancel_header_timer(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _header_timeout(self) -> None:
        self._header_timer = None
        if self.transport.is_closing() or self.conn.their_state is not h11.IDLE:
            return
        message = (
            "The request line and headers did not arrive within "
            f"{self.header_timeout_s:g} s."
        )
        self._send_error(408, message)

    def _send_error(self, status: int, message: str) -> None:
        """Answer `status` in the server's error shape, then close; tell
        `on_error` (the server's request log and metrics)."""
        if self.on_error is not None:
            self.on_error(status, self.client, message)
        body = json.dumps({"error": {"field": "http", "message": message}}).encode()
        headers = [
            *self.server_state.default_headers,
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"connection", b"close"),
        ]
        events = (
            h11.Response(
                status_code=status, headers=headers, reason=HTTPStatus(status).phrase
            ),
            h11.Data(data=body),
            h11.EndOfMessage(),
        )
        try:
            output = b"".join(self.conn.send(event) or b"" for event in events)
        except h11.LocalProtocolError:
            output = b""  # A response had begun: all that is left is to close.
        if output:
            self.transport.write(output)
        self.transport.close()


def _close_after(cycle) -> None:
    """Make `cycle`'s response the connection's last: `Connection: close` in
    its headers (h11 then closes after it) and no keep-alive for uvicorn."""
    send = cycle.send

    async def closing(message) -> None:
        if message["type"] == "http.response.start":
            headers = [
                (name, value)
                for name, value in message.get("headers", [])
                if name.lower() != b"connection"
            ]
            message = {**message, "headers": [*headers, (b"connection", b"close")]}
        await send(message)

    cycle.send = closing
    cycle.keep_alive = False


def protocol_class(
    *,
    header_timeout_s: float,
    max_requests: int = 0,
    on_error: Callable[[int, Any, str], None] | None = None,
) -> type[JsonH11Protocol]:
    """A `JsonH11Protocol` subclass whose header timeout is
    `header_timeout_s` seconds and whose connections carry at most
    `max_requests` requests each (0: no limit), for
    `uvicorn.Config(http=...)`; `on_error(status, client, message)` is
    called for each error answer it gives (`RequestLog.protocol_error`)."""
    if not (math.isfinite(header_timeout_s) and header_timeout_s > 0):
        raise ValueError(f"header_timeout_s must be > 0, not {header_timeout_s}.")
    if isinstance(max_requests, bool) or not isinstance(max_requests, int):
        raise ValueError(f"max_requests must be an integer, not {max_requests!r}.")
    if max_requests < 0:
        raise ValueError(
            f"max_requests must be >= 0 (0: no limit), not {max_requests}."
        )
    values = {
        "header_timeout_s": header_timeout_s,
        "max_requests": max_requests,
        "on_error": None if on_error is None else staticmethod(on_error),
    }
    return type("JsonH11Protocol", (JsonH11Protocol,), values)
