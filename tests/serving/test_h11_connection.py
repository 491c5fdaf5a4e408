"""The h11 protocol's header timeout, request limit per connection and JSON
error answers, against a real uvicorn server on 127.0.0.1 (a background
thread) and raw socket clients."""

from __future__ import annotations

import json
import logging
import socket
import threading
import time

import h11
import pytest
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.server import ServerState

from keras_transformer.serving.h11_connection import JsonH11Protocol, protocol_class

pytestmark = pytest.mark.backend_neutral

TIMEOUT = 0.5  # The header timeout the test server runs with.
KEEP_ALIVE = 1.5  # uvicorn's timeout_keep_alive there.
MARGIN = 1.0  # For a busy machine.
HOST = b"Host: 127.0.0.1\r\n"


async def echo_app(scope, receive, send) -> None:
    """200 with the method, path and body as JSON."""
    assert scope["type"] == "http"
    body, more = b"", True
    while more:
        message = await receive()
        body += message.get("body", b"")
        more = message.get("more_body", False)
    answer = {"method": scope["method"], "path": scope["path"], "body": body.decode()}
    payload = json.dumps(answer).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(payload)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": payload})


class Errors(logging.Handler):
    """ERROR records (a failing callback, an exception in the protocol)."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


class Running:
    def __init__(self, header_timeout_s: float, max_requests: int = 0) -> None:
        self.told: list[tuple] = []  # What `on_error` was told.
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        sock.listen(64)
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(
            echo_app,
            http=protocol_class(
                header_timeout_s=header_timeout_s,
                max_requests=max_requests,
                on_error=lambda *answer: self.told.append(answer),
            ),
            lifespan="off",
            log_config=None,  # Records reach the root logger (`Errors`).
            timeout_keep_alive=KEEP_ALIVE,
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [sock]}, daemon=True
        )
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            assert self.thread.is_alive() and time.monotonic() < deadline
            time.sleep(0.01)
        self.sock = sock

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)
        self.sock.close()
        assert not self.thread.is_alive(), "the server did not shut down"


@pytest.fixture(scope="module")
def server():
    errors = Errors()
    logging.getLogger().addHandler(errors)
    running = Running(TIMEOUT)
    running.errors = errors
    try:
        yield running
    finally:
        running.stop()
        logging.getLogger().removeHandler(errors)


@pytest.fixture(autouse=True)
def no_errors_logged(request):
    if "server" not in request.fixturenames:
        yield
        return
    errors = request.getfixturevalue("server").errors
    errors.records.clear()
    yield
    assert not errors.records, [r.getMessage() for r in errors.records]


class Client:
    """A raw socket and the bytes read past the last response."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        self.buffer = b""

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _fill(self) -> None:
        chunk = self.sock.recv(65536)
        if not chunk:
            raise ConnectionError(f"closed; unparsed bytes: {self.buffer!r}")
        self.buffer += chunk

    def response(self) -> tuple[int, dict[str, str], bytes]:
        """(status, headers with lowercase names, body): one response."""
        while b"\r\n\r\n" not in self.buffer:
            self._fill()
        head, self.buffer = self.buffer.split(b"\r\n\r\n", 1)
        status_line, *lines = head.decode("latin-1").split("\r\n")
        version, status, _ = status_line.split(" ", 2)
        assert version == "HTTP/1.1", status_line
        headers = {}
        for line in lines:
            name, value = line.split(":", 1)
            assert name.lower() not in headers, f"repeated header {name}"
            headers[name.lower()] = value.strip()
        length = int(headers["content-length"])
        while len(self.buffer) < length:
            self._fill()
        body, self.buffer = self.buffer[:length], self.buffer[length:]
        return int(status), headers, body

    def closed(self) -> bool:
        """Whether the server closed the connection, with nothing more sent
        (waits up to the socket's timeout)."""
        assert not self.buffer, self.buffer
        try:
            return self.sock.recv(65536) == b""
        except ConnectionResetError:  # It closed with our bytes unread.
            return True

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def client(server):
    opened: list[Client] = []

    def connect() -> Client:
        opened.append(Client(server.port))
        return opened[-1]

    yield connect
    for each in opened:
        each.close()


def error(response: tuple[int, dict[str, str], bytes], status: int) -> str:
    """The message of an error answer in the server's shape, after checking
    its status and headers."""
    got, headers, body = response
    assert got == status, body
    assert headers["content-type"] == "application/json"
    assert headers["connection"] == "close"
    answer = json.loads(body)
    assert set(answer) == {"error"} and set(answer["error"]) == {"field", "message"}
    assert answer["error"]["field"] == "http"
    return answer["error"]["message"]


def ok(response: tuple[int, dict[str, str], bytes]) -> dict:
    status, headers, body = response
    assert status == 200, body
    assert headers["content-type"] == "application/json"
    return json.loads(body)


def get(path: str) -> bytes:
    return f"GET {path} HTTP/1.1\r\n".encode() + HOST + b"\r\n"


def test_uvicorn_internals_this_module_relies_on():
    """If this fails after a uvicorn upgrade, h11_connection.py needs a look."""
    for name in (
        "connection_made",
        "data_received",
        "on_response_complete",
        "connection_lost",
        "send_400_response",
        "handle_events",
        "_unset_keepalive_if_required",
    ):
        assert callable(getattr(H11Protocol, name, None)), name
    config = uvicorn.Config(
        echo_app, http=protocol_class(header_timeout_s=1), log_config=None
    )
    config.load()
    protocol = config.http_protocol_class(
        config=config, server_state=ServerState(), app_state={}, _loop=object()
    )
    assert isinstance(protocol, JsonH11Protocol)
    assert isinstance(protocol.conn, h11.Connection)
    for name in ("transport", "loop", "logger", "config", "client"):
        assert hasattr(protocol, name), name
    assert isinstance(protocol.server_state.default_headers, list)


def test_protocol_class_refuses_a_bad_timeout():
    assert protocol_class(header_timeout_s=2.5).header_timeout_s == 2.5
    for bad in (0, -1, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="header_timeout_s"):
            protocol_class(header_timeout_s=bad)
    assert protocol_class(header_timeout_s=1).max_requests == 0  # No limit.
    assert protocol_class(header_timeout_s=1, max_requests=7).max_requests == 7
    for bad in (-1, 2.5, True):
        with pytest.raises(ValueError, match="max_requests"):
            protocol_class(header_timeout_s=1, max_requests=bad)


def test_get_and_post_on_one_keep_alive_connection(client):
    c = client()
    c.send(get("/first"))
    assert ok(c.response())["path"] == "/first"
    c.send(b"POST /second HTTP/1.1\r\n" + HOST + b"Content-Length: 5\r\n\r\nhello")
    assert ok(c.response()) == {"method": "POST", "path": "/second", "body": "hello"}


def test_pipelined_requests_are_answered_in_order(client):
    c = client()
    c.send(get("/a") + get("/b") + get("/c"))
    assert [ok(c.response())["path"] for _ in range(3)] == ["/a", "/b", "/c"]


def test_half_the_headers_then_a_stall_gets_408_and_a_close(client, server):
    server.told.clear()
    c = client()
    start = time.monotonic()
    c.send(b"GET / HTTP/1.1\r\nHost: 127.0")
    message = error(c.response(), 408)
    elapsed = time.monotonic() - start
    assert TIMEOUT - 0.05 <= elapsed < TIMEOUT + MARGIN
    assert message == f"The request line and headers did not arrive within {TIMEOUT} s."
    assert c.closed()
    # Told to the server's request log and metrics (issue 50: missing there).
    ((status, address, told),) = server.told
    assert (status, told) == (408, message)
    assert address == c.sock.getsockname()


def test_a_silent_connection_gets_408_and_a_close(client):
    c = client()
    start = time.monotonic()
    error(c.response(), 408)
    assert TIMEOUT - 0.05 <= time.monotonic() - start < TIMEOUT + MARGIN
    assert c.closed()


def test_a_trickle_does_not_move_the_deadline(client):
    c = client()
    start = time.monotonic()
    with pytest.raises(OSError):  # The server closes while we still send.
        for byte in b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + b"a" * 100:
            c.send(bytes([byte]))
            time.sleep(0.05)
    assert error(c.response(), 408)
    assert time.monotonic() - start < TIMEOUT + MARGIN


def test_headers_in_several_sends_within_the_timeout_are_served(client):
    c = client()
    for piece in (b"POST /slow HT", b"TP/1.1\r\nHost: 127.0.0.1\r\n", b"Content-"):
        c.send(piece)
        time.sleep(TIMEOUT / 5)
    c.send(b"Length: 2\r\n\r\nok")
    assert ok(c.response()) == {"method": "POST", "path": "/slow", "body": "ok"}


def test_an_idle_keep_alive_connection_is_left_to_timeout_keep_alive(client):
    c = client()
    c.send(get("/one"))
    ok(c.response())
    time.sleep(TIMEOUT + 0.3)  # Past the header timeout: no 408 when idle.
    c.send(get("/two"))
    assert ok(c.response())["path"] == "/two"
    start = time.monotonic()
    assert c.closed()  # uvicorn's keep-alive timeout: a close, no answer.
    assert KEEP_ALIVE - 0.2 <= time.monotonic() - start < KEEP_ALIVE + MARGIN


def test_a_next_request_that_stalls_gets_408(client):
    c = client()
    c.send(get("/one"))
    ok(c.response())
    time.sleep(0.2)
    start = time.monotonic()
    c.send(b"GET /two HTTP/1.1\r\n")
    error(c.response(), 408)
    assert TIMEOUT - 0.05 <= time.monotonic() - start < TIMEOUT + MARGIN
    assert c.closed()


def test_a_pipelined_request_that_stalls_gets_408_after_the_first_answer(client):
    c = client()
    c.send(get("/one") + b"GET /two HTTP/1.1\r\nHo")
    assert ok(c.response())["path"] == "/one"
    error(c.response(), 408)
    assert c.closed()


@pytest.mark.parametrize(
    "request_bytes, detail",
    [
        (b"NOT HTTP\r\n\r\n", "illegal request line"),
        (b"GET / HTTP/1.1\r\n" + HOST + b"Bad Header\r\n\r\n", "illegal header line"),
        (b"GET / HTTP/1.1\r\n\r\n", "Missing mandatory Host: header"),
    ],
)
def test_malformed_http_gets_400_in_the_error_shape(
    client, server, request_bytes, detail
):
    server.told.clear()
    c = client()
    c.send(request_bytes)
    message = error(c.response(), 400)
    assert message.startswith("Invalid HTTP request received: ")
    assert detail in message
    assert c.closed()
    assert [(status, told) for status, _, told in server.told] == [(400, message)]


def test_a_header_section_over_h11s_limit_gets_431_in_the_error_shape(client):
    c = client()
    # 32 KiB without the blank line that ends the headers: h11 gives up at
    # its maximum incomplete event size (16 KiB), status hint 431.
    c.send(b"GET / HTTP/1.1\r\n" + HOST + b"X-Big: " + b"a" * 32768 + b"\r\n")
    message = error(c.response(), 431)
    assert message == (
        "Invalid HTTP request received: the request line and headers "
        "exceed 16384 bytes."
    )
    assert c.closed()


def test_graceful_shutdown_closes_a_connection_in_its_headers():
    """The header timer neither delays shutdown nor answers once it began."""
    running = Running(header_timeout_s=30)
    c = Client(running.port)
    try:
        c.send(b"GET / HTTP/1.1\r\nHo")
        time.sleep(0.1)
        start = time.monotonic()
        running.stop()
        assert time.monotonic() - start < 5
        assert c.closed()
    finally:
        c.close()


LIMIT = 3  # Requests per connection of the `limited` server.


@pytest.fixture(scope="module")
def limited():
    running = Running(TIMEOUT, max_requests=LIMIT)
    yield running
    running.stop()


def test_the_last_request_a_connection_may_carry_is_answered_with_a_close(limited):
    c = Client(limited.port)
    try:
        for number in range(1, LIMIT + 1):
            c.send(get(f"/{number}"))
            status, headers, body = c.response()
            assert status == 200 and json.loads(body)["path"] == f"/{number}"
            if number < LIMIT:
                assert "connection" not in headers  # Kept alive.
            else:
                assert headers["connection"] == "close"
        assert c.closed()
    finally:
        c.close()
    again = Client(limited.port)  # The limit is per connection.
    try:
        again.send(get("/again"))
        assert ok(again.response())["path"] == "/again"
    finally:
        again.close()


def test_requests_pipelined_past_the_limit_are_left_unanswered(limited):
    c = Client(limited.port)
    try:
        c.send(b"".join(get(f"/{number}") for number in range(1, LIMIT + 2)))
        answers = [c.response() for _ in range(LIMIT)]
        assert [json.loads(body)["path"] for _, _, body in answers] == [
            f"/{number}" for number in range(1, LIMIT + 1)
        ]
        assert answers[-1][1]["connection"] == "close"
        assert c.closed()  # The client resends the fourth on a new connection.
    finally:
        c.close()


def test_a_connection_that_closes_itself_at_the_last_request_gets_one_close(limited):
    c = Client(limited.port)
    try:
        for number in range(1, LIMIT):
            c.send(get(f"/{number}"))
            ok(c.response())
        c.send(b"GET /last HTTP/1.1\r\n" + HOST + b"Connection: close\r\n\r\n")
        status, headers, _ = c.response()  # Asserts no repeated header.
        assert status == 200 and headers["connection"] == "close"
        assert c.closed()
    finally:
        c.close()
