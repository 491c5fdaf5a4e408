"""A `keras-transformer serve` subprocess on 127.0.0.1 and a plain HTTP
client for it (http.client: raw bytes, any header, no retries)."""

from __future__ import annotations

import http.client
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_ADDRESS = re.compile(rb"http://127\.0\.0\.1:(\d+)/")


class Response:
    def __init__(self, status: int, headers: dict[str, str], body: bytes):
        self.status = status
        self.headers = {name.lower(): value for name, value in headers.items()}
        self.body = body

    def json(self):
        return json.loads(self.body)

    def error(self) -> tuple[str | None, str]:
        """(field, message) of an error answer."""
        detail = self.json()["error"]
        return detail["field"], detail["message"]


class ServerProcess:
    """`keras-transformer serve ARGS --port 0`, ready once /readyz answers
    200 (`wait_ready=False`: once it listens); its stderr goes to `log`
    (read it when a test fails); `backend` sets the server's KERAS_BACKEND;
    `python`: another interpreter, which runs the package it has installed."""

    def __init__(
        self,
        args: list[str],
        log: Path,
        timeout: float = 600,
        wait_ready: bool = True,
        backend: str | None = None,
        python: str | None = None,
    ):
        command = [python or sys.executable, "-m", "keras_transformer", "serve", *args]
        env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONUNBUFFERED="1")
        if python:  # Another interpreter runs the package it has installed.
            del env["PYTHONPATH"]
        if backend:  # The server's own, not the suite's.
            env["KERAS_BACKEND"] = backend
        self.log = log
        self._log_file = open(log, "wb")  # Closed in stop().
        self.process = subprocess.Popen(
            [*command, "--port", "0"],
            stdout=subprocess.PIPE,
            stderr=self._log_file,
            env=env,
        )
        deadline = time.monotonic() + timeout
        self.port = self._read_port(timeout)
        if wait_ready:
            self.wait_ready(deadline - time.monotonic())

    def wait_ready(self, timeout: float) -> float:
        """Poll /readyz until 200; the seconds it took."""
        start = time.monotonic()
        while time.monotonic() - start < timeout:
            if self.process.poll() is not None:
                break
            if self.get("/readyz").status == 200:
                return time.monotonic() - start
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"The server was not ready: {self.log.read_text()[-3000:]}")

    def _read_port(self, timeout: float) -> int:
        deadline = time.monotonic() + timeout
        line = b""
        while time.monotonic() < deadline:
            line = self.process.stdout.readline()
            if not line and self.process.poll() is not None:
                break
            found = _ADDRESS.search(line)
            if found:
                return int(found.group(1))
        self.stop()
        raise RuntimeError(f"The server did not start: {self.log.read_text()[-3000:]}")

    def request(
        self,
        method: str,
        path: str,
        body: bytes | None = None,
        headers: dict[str, str] | None = None,
        timeout: float = 300,
    ) -> Response:
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            connection.request(method, path, body=body, headers=headers or {})
            answer = connection.getresponse()
            return Response(answer.status, dict(answer.getheaders()), answer.read())
        finally:
            connection.close()

    def get(self, path: str) -> Response:
        return self.request("GET", path)

    def post(self, path: str, data) -> Response:
        body = json.dumps(data).encode("utf-8")
        return self.request("POST", path, body, {"Content-Type": "application/json"})

    def metrics(self, headers: dict[str, str] | None = None) -> dict:
        """/metrics as {(sample name, sorted labels): value}, parsed by
        prometheus_client's own parser."""
        from prometheus_client.parser import text_string_to_metric_families

        answer = self.request("GET", "/metrics", headers=headers)
        assert answer.status == 200, answer.body
        return {
            (sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(answer.body.decode())
            for sample in family.samples
        }

    def metric(self, name: str, **labels) -> float:
        """One sample of /metrics (0 when absent)."""
        return self.metrics().get((name, tuple(sorted(labels.items()))), 0.0)

    def translate(self, texts: list[str], **options) -> list[str]:
        """The best translations, asserting a 200."""
        answer = self.post("/v1/translate", {"texts": texts, **options})
        assert answer.status == 200, answer.body
        return [t["translation"] for t in answer.json()["translations"]]

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 300) -> int | None:
        """Send `sig` and wait for the exit; its status (None: killed)."""
        status = None
        if self.process.poll() is None:
            self.process.send_signal(sig)
            try:
                status = self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        else:
            status = self.process.returncode
        self.process.stdout.close()
        self._log_file.close()
        return status
