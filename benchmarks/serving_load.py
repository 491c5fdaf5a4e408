"""HTTP serving: `keras-transformer serve` on 127.0.0.1, under load and at start.

The Keras and CTranslate2 engines (`--engines`), dynamic batching on and
off. For each engine and batching mode it starts the server (a subprocess, as a
user would), warms it up (every batch shape compiles), then runs a bounded
closed-loop load per client count: each client sends one sentence per
request and waits for the answer before its next, until `--requests`
answers or `--seconds` have passed. It prints sentences per second, the
p50/p95/p99 latency, the errors (any answer but 200) and the server's peak
RSS. Batching off is `--max-batch-size 1 --workers 1` (each request decoded
alone, one at a time). Batching on runs twice where the engine decodes
batches side by side (CTranslate2; Keras on JAX or TensorFlow): with the
default workers and with `--workers 1`.

Then the overload case, batching on: an open-loop load at twice the
capacity measured at the most clients (requests sent on a fixed schedule,
whatever the answers), for `--overload-seconds`: the share refused with 503
and the latency of the accepted requests, which the bounded queue keeps
bounded.

`--sweep` instead measures the batching flags (max batch size x max wait)
at 1 and 32 clients, for choosing their defaults.

`--operations` instead measures what an operator meets, per engine and
backend (`--backends`, each server's KERAS_BACKEND: the Keras engine's, and
the export's at start-up for the others), on one server with default flags
(and `--warmup-tokens`): the seconds from the process's start to the
address line and to `/readyz` 200 (polled every 0.1 s), with the server's
own warm-up seconds and compilations (`/metrics`); with `--ready-only`
that alone, for each `--warmup-tokens` value given (no `--source` needed:
a few minutes on a tiny run); else a closed loop of `--clients` (one
count, default 8) for
`--window` seconds right after ready, then a second window as long, each
with the programs compiled while serving; then an open loop at twice the
second window's rate for `--overload-seconds` in which `--abandon-share`
of the requests (a seeded draw) are sent on a raw socket that is closed
0.2 s later, unread: the staying clients' throughput, 503 share and p99,
and the texts decoded for clients who had left (`/healthz`'s decoded
texts less those answered to the staying clients) beside those dropped.

    KERAS_BACKEND=tensorflow python benchmarks/serving_load.py \\
        --run-dir runs/m30k-small --source test_2016_flickr.en.gz [--write]
    python benchmarks/serving_load.py --operations --ready-only \\
        --run-dir runs/m30k-small --engines keras savedmodel \\
        --backends jax tensorflow --warmup-tokens 64 256 [--write]

`--write` puts the tables into their section of docs/benchmarks*.md (`###
HTTP serving under load`, `... batching flags`, `... operations`, `...
start to ready`), between the section's two marker lines (HTML comments,
not shown: `<!-- benchmarks/serving_load.py --write: generated from here
-->` and `... generated to here -->`): the section's prose, above and
below them, is kept. A section without the markers gets them, with the
tables, at its end (its older tables stay for you to remove); a missing
section is added at the end of the file.

The server is used once `/readyz` answers 200 (it listens while it warms up).

Sentences: Multi30k test2016, the first `--sentences`, cycled.
"""

from __future__ import annotations

import argparse
import gzip
import http.client
import json
import os
import random
import re
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import benchmark_page, machine_line  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
# The generated part of a section of docs/benchmarks.md: --write replaces
# what lies between these lines and nothing else.
WRITE_BEGIN = "<!-- benchmarks/serving_load.py --write: generated from here -->"
WRITE_END = "<!-- benchmarks/serving_load.py --write: generated to here -->"


def write_tables(heading: str, text: str, docs: Path | None = None) -> str:
    """Put `text` between the markers of the `### heading` section of
    `docs` (default: the benchmark page holding it), keeping the rest of the
    section (its prose). A section without the markers gets them with `text`
    at its end; a missing section is appended. Returns what was done, for
    the console."""
    docs = docs or benchmark_page(heading)
    block = f"{WRITE_BEGIN}\n\n{text.strip()}\n\n{WRITE_END}\n"
    content = docs.read_text(encoding="utf-8") if docs.exists() else "# Benchmarks\n"
    title = f"### {heading}\n"
    start = content.find(title) if content.startswith(title) else -1
    if start < 0:
        found = content.find("\n" + title)
        start = found + 1 if found >= 0 else -1
    if start < 0:
        docs.write_text(f"{content.rstrip()}\n\n{title}\n{block}", encoding="utf-8")
        return f"added section {heading!r} to {docs}"
    ends = [
        found + 1
        for found in (content.find(m, start + len(title)) for m in ("\n## ", "\n### "))
        if found >= 0
    ]
    end = min(ends) if ends else len(content)
    section = content[start:end]
    begin, finish = section.find(WRITE_BEGIN), section.find(WRITE_END)
    if begin >= 0 and finish > begin:
        section = section[:begin] + block + section[finish + len(WRITE_END) + 1 :]
        done = f"replaced the tables of {heading!r} in {docs}, its prose kept"
    else:
        section = f"{section.rstrip()}\n\n{block}" + ("\n" if ends else "")
        done = (
            f"appended the tables to {heading!r} in {docs} (it had no markers: "
            "its older tables are still above them)"
        )
    docs.write_text(content[:start] + section + content[end:], encoding="utf-8")
    return done


class Server:
    """`keras-transformer serve` with `flags` on a free port, returned once
    ready; `listening_s` and `ready_s` are the seconds from the process's
    start to its address line and to `/readyz` 200. `backend`: the
    server's KERAS_BACKEND; `cache_dir`: its KERAS_TRANSFORMER_CACHE, where
    its compiled programs are kept between runs (default: this process's
    environment for both)."""

    def __init__(
        self,
        run_dir: str,
        engine: str,
        flags: list[str],
        backend: str | None = None,
        cache_dir: str | None = None,
    ):
        command = [sys.executable, "-m", "keras_transformer", "serve"]
        command += ["--run-dir", run_dir, "--engine", engine, "--port", "0", *flags]
        self.log_path = Path(tempfile.mkstemp(prefix="serving_load-", suffix=".log")[1])
        self.log = open(self.log_path, "wb")  # Closed in stop().
        env = dict(os.environ)
        if backend:
            env["KERAS_BACKEND"] = backend
        if cache_dir:
            env["KERAS_TRANSFORMER_CACHE"] = cache_dir
        start = time.perf_counter()
        self.process = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=self.log, cwd=ROOT, env=env
        )
        line = self.process.stdout.readline().decode()
        self.listening_s = time.perf_counter() - start
        found = re.search(r"http://127\.0\.0\.1:(\d+)/", line)
        if not found:
            self.fail(f"serve did not start: {line!r}")
        self.port = int(found.group(1))
        while get(self.port, "/readyz")[0] != 200:  # 503 while warming up
            if self.process.poll() is not None:
                self.fail("serve exited before it was ready")
            time.sleep(0.1)
        self.ready_s = time.perf_counter() - start

    def fail(self, message: str):
        tail = self.log_path.read_text(errors="replace")[-2000:]
        raise RuntimeError(f"{message}\n{tail}")

    def rss_mb(self) -> float:
        status = Path(f"/proc/{self.process.pid}/status").read_text()
        return int(re.search(r"VmRSS:\s+(\d+) kB", status).group(1)) / 1024

    def peak_rss_mb(self) -> float:
        status = Path(f"/proc/{self.process.pid}/status").read_text()
        return int(re.search(r"VmHWM:\s+(\d+) kB", status).group(1)) / 1024

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(600)
        self.log.close()
        self.log_path.unlink()


def get(port: int, path: str) -> tuple[int, bytes]:
    """(status, body) of GET `path`."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        connection.request("GET", path)
        answer = connection.getresponse()
        return answer.status, answer.read()
    finally:
        connection.close()


def healthz(port: int) -> dict:
    """Texts queued and decoding now; batches, texts decoded and texts
    dropped so far."""
    return json.loads(get(port, "/healthz")[1])


def batching_stats(port: int) -> tuple[int, int]:
    """(batches, texts) the server has decoded so far."""
    stats = healthz(port)
    return stats["batches"], stats["texts"]


def server_metrics(port: int) -> dict[tuple, float]:
    """The samples of `/metrics`: (name, sorted labels) -> value."""
    from prometheus_client.parser import text_string_to_metric_families

    text = get(port, "/metrics")[1].decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def metric(samples: dict[tuple, float], name: str, **labels) -> float:
    """`keras_transformer_<name>{labels}`; 0 where it has no sample yet."""
    key = (f"keras_transformer_{name}", tuple(sorted(labels.items())))
    return samples.get(key, 0.0)


def post(connection: http.client.HTTPConnection, texts: list[str]) -> int:
    body = json.dumps({"texts": texts}).encode()
    connection.request(
        "POST", "/v1/translate", body, {"Content-Type": "application/json"}
    )
    answer = connection.getresponse()
    answer.read()
    return answer.status


def closed_loop(port: int, sentences: list[str], clients: int, requests: int, seconds):
    """Each client: one sentence per request, the next after the answer."""
    lock = threading.Lock()
    state = {"next": 0, "latencies": [], "errors": 0}
    deadline = time.monotonic() + seconds

    def client():
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
        while time.monotonic() < deadline:
            with lock:
                index = state["next"]
                if index >= requests:
                    break
                state["next"] += 1
            start = time.perf_counter()
            try:
                ok = post(connection, [sentences[index % len(sentences)]]) == 200
            except (OSError, http.client.HTTPException):
                connection.close()
                connection = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
                ok = False
            with lock:
                if ok:
                    state["latencies"].append(time.perf_counter() - start)
                else:
                    state["errors"] += 1
        connection.close()

    started = time.perf_counter()
    threads = [threading.Thread(target=client) for _ in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - started
    return summary(state["latencies"], state["errors"], elapsed)


def _send_and_count(port: int, text: str, began: float, state: dict, lock) -> None:
    """POST one text on its own connection; count its answer in `state`
    (latency of a 200, a 503 refusal, or an error)."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    try:
        status = post(connection, [text])
    except (OSError, http.client.HTTPException):
        status = None
    finally:
        connection.close()
    with lock:
        if status == 200:
            state["latencies"].append(time.perf_counter() - began)
        elif status == 503:
            state["refused"] += 1
        else:
            state["errors"] += 1


def _run_senders(send, total: int, rate: float, state: dict, lock) -> None:
    """An open loop: `send(index, began)` for requests 0 .. total - 1, each
    at its due time (`rate` per second from 0.5 s on), on enough threads;
    the most a request started late goes to state["late"]."""
    start = time.monotonic() + 0.5

    def sender():
        while True:
            with lock:
                index = state["next"]
                state["next"] += 1
            if index >= total:
                return
            due = start + index / rate
            time.sleep(max(0.0, due - time.monotonic()))
            began = time.perf_counter()
            with lock:
                state["late"] = max(state["late"], time.monotonic() - due)
            send(index, began)

    threads = [threading.Thread(target=sender) for _ in range(min(total, 600))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def open_loop(port: int, sentences: list[str], rate: float, seconds: float):
    """Requests at `rate` per second on a fixed schedule for `seconds`."""
    total = int(rate * seconds)
    lock = threading.Lock()
    state = {"next": 0, "latencies": [], "refused": 0, "errors": 0, "late": 0.0}

    def send(index: int, began: float) -> None:
        text = sentences[index % len(sentences)]
        _send_and_count(port, text, began, state, lock)

    _run_senders(send, total, rate, state, lock)
    row = summary(state["latencies"], state["errors"], seconds)
    row.update(
        offered=total,
        refused=state["refused"],
        refused_share=state["refused"] / max(total, 1),
        max_ms=1000 * max(state["latencies"], default=0.0),
        late_ms=1000 * state["late"],
    )
    return row


def summary(latencies: list[float], errors: int, elapsed: float) -> dict:
    samples = np.asarray(latencies or [0.0]) * 1000
    return dict(
        answered=len(latencies),
        per_second=len(latencies) / elapsed,
        p50=float(np.percentile(samples, 50)),
        p95=float(np.percentile(samples, 95)),
        p99=float(np.percentile(samples, 99)),
        errors=errors,
    )


def measured_loop(port: int, sentences: list[str], clients: int, args) -> dict:
    """`closed_loop`, with the mean batch size the server decoded meanwhile."""
    batches, texts = batching_stats(port)
    row = closed_loop(port, sentences, clients, args.requests, args.seconds)
    after = batching_stats(port)
    row["batch"] = (after[1] - texts) / max(after[0] - batches, 1)
    return row


def warm_up(port: int, sentences: list[str], clients: list[int]) -> float:
    """Every sentence once at each client count: the batch sizes and
    source lengths the measurement meets are compiled first (the Keras
    engine compiles each shape of its search at first sight)."""
    start = time.perf_counter()
    for count in clients:
        closed_loop(port, sentences, count, len(sentences), 3600)
    return time.perf_counter() - start


def read_sentences(path: str, count: int) -> list[str]:
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as lines:
        return [line.rstrip("\n") for _, line in zip(range(count), lines)]


def load_row(engine, mode, clients, row, rss, load) -> str:
    cells = [engine, mode, clients, f"{row['per_second']:.1f}", f"{row['batch']:.1f}"]
    cells += [f"{row[p]:,.0f}" for p in ("p50", "p95", "p99")]
    cells += [row["errors"], f"{rss:,.0f}", f"{load:.1f}"]
    return "| " + " | ".join(map(str, cells)) + " |"


def batching_modes(engine: str) -> list[tuple[str, list[str]]]:
    """(name, serve flags) of each batching mode measured for `engine`."""
    modes = [("on", [])]
    backend = os.environ.get("KERAS_BACKEND", "tensorflow")
    if engine == "ctranslate2" or (engine == "keras" and backend != "torch"):
        modes.append(("on, 1 worker", ["--workers", "1"]))
    return modes + [("off", ["--max-batch-size", "1", "--workers", "1"])]


def measure(args, sentences) -> list[str]:
    lines = [
        "| engine | batching | clients | sentences/s | mean batch | p50 ms | p95 ms "
        "| p99 ms | errors | server peak RSS MB | load avg |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    overload = [
        "| engine | offered/s (2x capacity) | answered/s | 503 share | p50 ms "
        "| p99 ms | max ms | errors |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for engine in args.engines:
        capacity = None
        for mode, flags in batching_modes(engine):
            server = Server(args.run_dir, engine, flags + args.serve_flag)
            try:
                warm = warm_up(server.port, sentences, args.clients)
                print(f"{engine}, batching {mode}: warm-up {warm:.0f} s", flush=True)
                for clients in args.clients:
                    row = measured_loop(server.port, sentences, clients, args)
                    line = load_row(
                        engine,
                        mode,
                        clients,
                        row,
                        server.peak_rss_mb(),
                        os.getloadavg()[0],
                    )
                    print(line, flush=True)
                    lines.append(line)
                    if mode == "on":
                        capacity = row["per_second"]
                if mode == "on":
                    row = open_loop(
                        server.port, sentences, 2 * capacity, args.overload_seconds
                    )
                    cells = [engine, f"{2 * capacity:.1f}", f"{row['per_second']:.1f}"]
                    cells += [f"{100 * row['refused_share']:.0f}%"]
                    cells += [f"{row[k]:,.0f}" for k in ("p50", "p99", "max_ms")]
                    cells += [row["errors"]]
                    overload.append("| " + " | ".join(map(str, cells)) + " |")
                    print(
                        overload[-1], f"(senders at most {row['late_ms']:.0f} ms late)"
                    )
            finally:
                server.stop()
    return lines + [""] + overload


def leave_early(port: int, text: str, after: float) -> str:
    """POST `text` on a raw socket and close it `after` s later without
    reading the answer; returns what had come back by then (a peek, which
    leaves it unread): "200", "503", ... or "none"."""
    body = json.dumps({"texts": [text]}).encode()
    head = (
        f"POST /v1/translate HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    sock = socket.create_connection(("127.0.0.1", port), timeout=60)
    try:
        sock.sendall(head.encode() + body)
        time.sleep(after)
        sock.setblocking(False)  # A socket with a timeout would wait in recv.
        try:
            early = sock.recv(64, socket.MSG_PEEK | socket.MSG_DONTWAIT)
        except BlockingIOError:
            early = b""
    finally:
        sock.close()
    found = re.match(rb"HTTP/1\.[01] (\d{3})", early)
    return found.group(1).decode() if found else "none"


def open_loop_abandoning(port, sentences, rate, seconds, share, seed, after=0.2):
    """`open_loop` where `share` of the requests (drawn with `seed`) are
    sent by clients who leave `after` s later, unread."""
    total = int(rate * seconds)
    leaving = set(random.Random(seed).sample(range(total), round(share * total)))
    lock = threading.Lock()
    state = {"next": 0, "latencies": [], "refused": 0, "errors": 0, "late": 0.0}
    early: dict[str, int] = {}  # What the leaving clients had back when they left.

    def send(index: int, began: float) -> None:
        text = sentences[index % len(sentences)]
        if index not in leaving:
            _send_and_count(port, text, began, state, lock)
            return
        try:
            seen = leave_early(port, text, after)
        except OSError:
            seen = "error"
        with lock:
            early[seen] = early.get(seen, 0) + 1

    _run_senders(send, total, rate, state, lock)
    row = summary(state["latencies"], state["errors"], seconds)
    staying = total - len(leaving)
    row.update(
        offered=total,
        leaving=len(leaving),
        early=early,
        refused=state["refused"],
        refused_share=state["refused"] / max(staying, 1),
        late_ms=1000 * state["late"],
    )
    return row


def wait_idle(port: int, timeout: float = 300) -> dict:
    """`/healthz` once nothing is queued or decoding (its counters final)."""
    deadline = time.monotonic() + timeout
    while True:
        stats = healthz(port)
        if stats["queued"] == stats["decoding"] == 0 or time.monotonic() > deadline:
            return stats
        time.sleep(0.1)


def token_counts(run_dir: str, sentences: list[str]) -> list[int]:
    """Subword tokens of each sentence with the run's tokenizer, as the
    server counts them (in a child: the tokenizer's import loads Keras)."""
    script = (
        "import json, sys\n"
        "from keras_transformer.run.directory import RunDirectory\n"
        "tokenizer = RunDirectory(sys.argv[1]).load_tokenizer()\n"
        "texts = json.load(sys.stdin)\n"
        "print(json.dumps([len(ids) for ids in tokenizer.encode(texts)]))\n"
    )
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    child = subprocess.run(
        [sys.executable, "-c", script, run_dir],
        input=json.dumps(sentences),
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        check=True,
    )
    return json.loads(child.stdout.splitlines()[-1])


def ready_table() -> list[str]:
    """The header of the start-to-ready table (`ready_row`'s rows)."""
    return [
        "| engine | backend | --warmup-tokens | start to address line s "
        "| start to /readyz 200 s | warm-up s (server) | warm-up compilations "
        "| RSS at ready GB |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]


def ready_row(server: Server, engine: str, backend: str, tokens: int) -> str:
    """A server's start-to-ready row, read once it is ready. Compilations
    are the programs `compile_function` traced (the Keras engine on JAX or
    TensorFlow; 0 for the others, whose runtimes compile on their own)."""
    samples = server_metrics(server.port)
    cells = [engine, backend, tokens]
    cells += [f"{server.listening_s:.1f}", f"{server.ready_s:.1f}"]
    cells += [f"{metric(samples, 'warmup_seconds'):.1f}"]
    cells += [f"{metric(samples, 'compilations_total', phase='warmup'):.0f}"]
    cells += [f"{server.rss_mb() / 1024:.2f}"]
    return "| " + " | ".join(map(str, cells)) + " |"


def start_to_ready(args) -> list[str]:
    """`--ready-only`: a server per backend, engine and --warmup-tokens,
    stopped once ready."""
    ready = ready_table()
    for backend in args.backends:
        for engine in args.engines:
            for tokens in args.warmup_tokens:
                flags = ["--warmup-tokens", str(tokens), *args.serve_flag]
                server = Server(args.run_dir, engine, flags, backend, args.cache_dir)
                try:
                    ready.append(ready_row(server, engine, backend, tokens))
                    print(ready[-1], flush=True)
                finally:
                    server.stop()
    return ready


def operations(args, sentences) -> list[str]:
    clients = args.clients[0] if args.clients else 8
    (warmup_tokens,) = args.warmup_tokens
    longest = token_counts(args.run_dir, sentences)
    over = sum(count > warmup_tokens for count in longest)
    tokens = f"{warmup_tokens} ({over} of {len(sentences)} over it)"
    print(f"longest sentence {max(longest)} tokens; {tokens}", flush=True)
    ready = ready_table()
    windows = [
        "| engine | window after ready | clients | sentences/s | p50 ms | p99 ms "
        "| errors | serving compilations so far | --warmup-tokens (sentences over it) "
        "| load avg |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    overload = [
        "| engine | offered/s (2x capacity) | leaving | served/s (staying, 200) "
        "| 503 share (staying) | p99 ms (staying, 200) | leaving: answer back "
        "before they left | texts decoded for leavers (answered before they left) "
        "| dropped texts | disconnects | errors | load avg |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    flags = ["--warmup-tokens", str(warmup_tokens), *args.serve_flag]
    servers = [
        (backend, engine) for backend in args.backends for engine in args.engines
    ]
    for backend, engine in servers:
        server = Server(args.run_dir, engine, flags, backend, args.cache_dir)
        try:
            ready.append(ready_row(server, engine, backend, warmup_tokens))
            print(ready[-1], flush=True)
            if len(args.backends) > 1:  # The rows below say which too.
                engine = f"{engine} on {backend}"

            window = args.window
            for number in (1, 2):
                row = closed_loop(server.port, sentences, clients, 10**9, window)
                samples = server_metrics(server.port)
                compiled = metric(samples, "compilations_total", phase="serving")
                span = f"{(number - 1) * window:.0f}-{number * window:.0f} s"
                cells = [engine, span, clients, f"{row['per_second']:.1f}"]
                cells += [f"{row[p]:,.0f}" for p in ("p50", "p99")]
                cells += [row["errors"], f"{compiled:.0f}", tokens]
                cells += [f"{os.getloadavg()[0]:.1f}"]
                windows.append("| " + " | ".join(map(str, cells)) + " |")
                print(windows[-1], flush=True)
            capacity = row["per_second"]

            before, samples = wait_idle(server.port), server_metrics(server.port)
            row = open_loop_abandoning(
                server.port,
                sentences,
                2 * capacity,
                args.overload_seconds,
                args.abandon_share,
                args.seed,
            )
            after, later = wait_idle(server.port), server_metrics(server.port)
            decoded = after["texts"] - before["texts"]
            answered_early = row["early"].get("200", 0)
            wasted = decoded - row["answered"]  # One text per request.
            dropped = after["dropped"] - before["dropped"]
            counted = metric(later, "dropped_texts_total") - metric(
                samples, "dropped_texts_total"
            )
            gone = metric(later, "disconnects_total") - metric(
                samples, "disconnects_total"
            )
            translated = metric(later, "texts_translated_total") - metric(
                samples, "texts_translated_total"
            )
            early = ", ".join(f"{k}: {v}" for k, v in sorted(row["early"].items()))
            share = f"{100 * args.abandon_share:.0f}% ({row['leaving']})"
            cells = [engine, f"{2 * capacity:.1f}", share, f"{row['per_second']:.1f}"]
            cells += [f"{100 * row['refused_share']:.0f}%", f"{row['p99']:,.0f}"]
            cells += [early, f"{wasted} ({answered_early})", f"{counted:.0f}"]
            cells += [f"{gone:.0f}", row["errors"], f"{os.getloadavg()[0]:.1f}"]
            overload.append("| " + " | ".join(map(str, cells)) + " |")
            print(
                overload[-1],
                f"(offered {row['offered']}; decoded {decoded}; texts_translated "
                f"{translated:.0f}; /healthz dropped {dropped}; senders at most "
                f"{row['late_ms']:.0f} ms late)",
                flush=True,
            )
        finally:
            server.stop()
    return ready + [""] + windows + [""] + overload


def sweep(args, sentences) -> list[str]:
    lines = [
        "| engine | max batch size | max wait ms | clients | sentences/s "
        "| mean batch | p50 ms | p99 ms |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for engine in args.engines:
        for size in args.sweep_batch:
            for wait in args.sweep_wait:
                flags = ["--max-batch-size", str(size), "--max-wait-ms", str(wait)]
                server = Server(args.run_dir, engine, flags + args.serve_flag)
                try:
                    warm_up(server.port, sentences, [1, 32])
                    for clients in (1, 32):
                        row = measured_loop(server.port, sentences, clients, args)
                        cells = [
                            engine,
                            size,
                            wait,
                            clients,
                            f"{row['per_second']:.1f}",
                            f"{row['batch']:.1f}",
                        ]
                        cells += [f"{row['p50']:,.0f}", f"{row['p99']:,.0f}"]
                        lines.append("| " + " | ".join(map(str, cells)) + " |")
                        print(lines[-1], flush=True)
                finally:
                    server.stop()
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="--write replaces only the tables between the section's marker "
        "lines in its benchmark page (docs/benchmarks*.md); the prose around "
        "them is kept (see the module's docstring).",
    )
    parser.add_argument("--run-dir", required=True, help="a trained run (small)")
    parser.add_argument(
        "--source", help="Multi30k test2016 .en(.gz) (not for --ready-only)"
    )
    parser.add_argument("--sentences", type=int, default=200)
    parser.add_argument("--engines", nargs="+", default=["keras", "ctranslate2"])
    parser.add_argument(
        "--backends",
        nargs="+",
        help="--operations: each server's KERAS_BACKEND (default: this "
        "process's, tensorflow if unset)",
    )
    parser.add_argument(
        "--clients", type=int, nargs="+", help="default 1 32; --operations: one, 8"
    )
    parser.add_argument("--requests", type=int, default=320, help="per client count")
    parser.add_argument("--seconds", type=float, default=90, help="per client count")
    parser.add_argument("--overload-seconds", type=float, default=30)
    parser.add_argument(
        "--serve-flag", action="append", default=[], help="passed to serve"
    )
    parser.add_argument("--sweep", action="store_true")
    parser.add_argument("--sweep-batch", type=int, nargs="+", default=[8, 32, 64])
    parser.add_argument("--sweep-wait", type=float, nargs="+", default=[0, 10, 30])
    parser.add_argument("--operations", action="store_true")
    parser.add_argument("--window", type=float, default=60, help="--operations")
    parser.add_argument(
        "--cache-dir",
        help="--operations: the servers' KERAS_TRANSFORMER_CACHE, where compiled "
        "programs are kept between runs: a new directory measures a first "
        "start, one a server has filled a restart (default: as set, else "
        "~/.cache/keras_transformer)",
    )
    parser.add_argument(
        "--ready-only",
        action="store_true",
        help="--operations: start to ready only, per backend, engine and "
        "--warmup-tokens value",
    )
    parser.add_argument(
        "--warmup-tokens",
        type=int,
        nargs="+",
        default=[64],
        help="--operations: the servers' --warmup-tokens (several: --ready-only)",
    )
    parser.add_argument("--abandon-share", type=float, default=0.3)
    parser.add_argument("--seed", type=int, default=0, help="who abandons")
    parser.add_argument(
        "--write",
        action="store_true",
        help="put the tables into their section of docs/benchmarks*.md, between "
        "its marker lines, keeping the section's prose",
    )
    args = parser.parse_args()
    if args.operations and args.clients and len(args.clients) > 1:
        parser.error("--operations takes one --clients count")
    if args.ready_only and not args.operations:
        parser.error("--ready-only goes with --operations")
    if len(args.warmup_tokens) > 1 and not args.ready_only:
        parser.error("several --warmup-tokens values need --operations --ready-only")
    if args.source is None and not args.ready_only:
        parser.error("--source is required (but for --operations --ready-only)")
    if not args.operations:
        args.clients = args.clients or [1, 32]
    backend = os.environ.get("KERAS_BACKEND", "tensorflow")
    args.backends = args.backends or [backend]
    if args.backends != [backend] and not args.operations:
        parser.error("--backends goes with --operations (else set KERAS_BACKEND)")
    backend = ", ".join(args.backends)

    if args.ready_only:
        lines = start_to_ready(args)
        title = "HTTP serving: start to ready"
        cache = (
            f"compilation cache {args.cache_dir}"
            if args.cache_dir
            else ("the user's compilation cache")
        )
        setup = (
            "start to ready only, each server stopped once ready; engines "
            f"{', '.join(args.engines)}; --warmup-tokens "
            f"{', '.join(map(str, args.warmup_tokens))}; {cache}"
        )
    elif args.operations:
        sentences = read_sentences(args.source, args.sentences)
        lines = operations(args, sentences)
        title = "HTTP serving: operations"
        setup = (
            f"{len(sentences)} Multi30k test2016 sentences, one per request; "
            f"{args.clients[0] if args.clients else 8} clients for two windows of "
            f"{args.window:.0f} s from ready; then {args.overload_seconds:.0f} s "
            f"open loop at twice the second window's rate, "
            f"{100 * args.abandon_share:.0f}% of requests (seed {args.seed}) from "
            "clients who close the connection 0.2 s after sending, unread"
        )
    else:
        sentences = read_sentences(args.source, args.sentences)
        lines = sweep(args, sentences) if args.sweep else measure(args, sentences)
        title = (
            "HTTP serving: batching flags" if args.sweep else "HTTP serving under load"
        )
        setup = (
            f"{len(sentences)} Multi30k test2016 sentences, one per request; "
            f"up to {args.requests} requests or {args.seconds:.0f} s per row"
        )
    text = "\n".join(
        [
            f"{machine_line()}; Keras engine on {backend}; run {args.run_dir}; "
            f"{setup}; serve flags: {' '.join(args.serve_flag) or 'defaults'}.",
            "",
            *lines,
        ]
    )
    print("\n" + text)
    if args.write:
        print(write_tables(title, text))


if __name__ == "__main__":
    main()
