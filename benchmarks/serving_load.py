"""HTTP serving under load: `keras-transformer serve` on 127.0.0.1, Keras and
CTranslate2 engines, dynamic batching on and off.

For each engine and batching mode it starts the server (a subprocess, as a
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

    KERAS_BACKEND=tensorflow python benchmarks/serving_load.py \\
        --run-dir runs/m30k-small --source test_2016_flickr.en.gz [--write]

Sentences: Multi30k test2016, the first `--sentences`, cycled.
"""

from __future__ import annotations

import argparse
import gzip
import http.client
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import machine_line, write_section  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


class Server:
    """`keras-transformer serve` with `flags` on a free port."""

    def __init__(self, run_dir: str, engine: str, flags: list[str]):
        command = [sys.executable, "-m", "keras_transformer", "serve"]
        command += ["--run-dir", run_dir, "--engine", engine, "--port", "0", *flags]
        self.log_path = Path(tempfile.mkstemp(prefix="serving_load-", suffix=".log")[1])
        self.log = open(self.log_path, "wb")  # Closed in stop().
        self.process = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=self.log, cwd=ROOT
        )
        line = self.process.stdout.readline().decode()
        found = re.search(r"http://127\.0\.0\.1:(\d+)/", line)
        if not found:
            tail = self.log_path.read_text(errors="replace")[-2000:]
            raise RuntimeError(f"serve did not start: {line!r}\n{tail}")
        self.port = int(found.group(1))

    def peak_rss_mb(self) -> float:
        status = Path(f"/proc/{self.process.pid}/status").read_text()
        return int(re.search(r"VmHWM:\s+(\d+) kB", status).group(1)) / 1024

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(600)
        self.log.close()
        self.log_path.unlink()


def batching_stats(port: int) -> tuple[int, int]:
    """(batches, texts) the server has decoded so far."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    connection.request("GET", "/healthz")
    stats = json.loads(connection.getresponse().read())
    connection.close()
    return stats["batches"], stats["texts"]


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


def open_loop(port: int, sentences: list[str], rate: float, seconds: float):
    """Requests at `rate` per second on a fixed schedule for `seconds`."""
    total = int(rate * seconds)
    lock = threading.Lock()
    state = {"next": 0, "latencies": [], "refused": 0, "errors": 0, "late": 0.0}
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
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
            try:
                status = post(connection, [sentences[index % len(sentences)]])
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

    threads = [threading.Thread(target=sender) for _ in range(min(total, 600))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
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
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run-dir", required=True, help="a trained run (small)")
    parser.add_argument("--source", required=True, help="Multi30k test2016 .en(.gz)")
    parser.add_argument("--sentences", type=int, default=200)
    parser.add_argument("--engines", nargs="+", default=["keras", "ctranslate2"])
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 32])
    parser.add_argument("--requests", type=int, default=320, help="per client count")
    parser.add_argument("--seconds", type=float, default=90, help="per client count")
    parser.add_argument("--overload-seconds", type=float, default=30)
    parser.add_argument(
        "--serve-flag", action="append", default=[], help="passed to serve"
    )
    parser.add_argument("--sweep", action="store_true")
    parser.add_argument("--sweep-batch", type=int, nargs="+", default=[8, 32, 64])
    parser.add_argument("--sweep-wait", type=float, nargs="+", default=[0, 10, 30])
    parser.add_argument("--write", action="store_true", help="into docs/benchmarks.md")
    args = parser.parse_args()

    sentences = read_sentences(args.source, args.sentences)
    backend = os.environ.get("KERAS_BACKEND", "tensorflow")
    lines = sweep(args, sentences) if args.sweep else measure(args, sentences)
    title = "HTTP serving: batching flags" if args.sweep else "HTTP serving under load"
    text = "\n".join(
        [
            f"{machine_line()}; Keras engine on {backend}; run {args.run_dir}; "
            f"{len(sentences)} Multi30k test2016 sentences, one per request; "
            f"up to {args.requests} requests or {args.seconds:.0f} s per row; "
            f"serve flags: {' '.join(args.serve_flag) or 'defaults'}.",
            "",
            *lines,
        ]
    )
    print("\n" + text)
    if args.write:
        write_section(title, text)


if __name__ == "__main__":
    main()
