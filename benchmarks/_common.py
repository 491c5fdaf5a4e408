"""Shared by the benchmark scripts: machine facts, model FLOPs, the matmul
peak, peak memory, the step profiles' model and table, and writing a
section of the benchmark pages (docs/benchmarks.md and
docs/benchmarks-*.md, a topic each)."""

from __future__ import annotations

import argparse
import os
import platform
import resource
import sys
import time
from importlib import metadata
from pathlib import Path

DOCS = Path(__file__).resolve().parents[1] / "docs" / "benchmarks.md"


def benchmark_page(heading: str) -> Path:
    """The benchmark page holding the `### heading` section: DOCS or one of
    the docs/benchmarks-*.md pages; DOCS when none does (a new section)."""
    for page in sorted(DOCS.parent.glob("benchmarks*.md")):
        text = page.read_text(encoding="utf-8")
        if text.startswith(f"### {heading}\n") or f"\n### {heading}\n" in text:
            return page
    return DOCS


def cpu_model() -> str:
    """The CPU's marketing name (from /proc/cpuinfo on Linux)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine_line() -> str:
    """CPU, cores, versions and date: the context a table is read in."""
    versions = ", ".join(
        f"{name} {_version(name)}"
        for name in ("keras", "tensorflow", "jax", "keras-hub")
        if _version(name)
    )
    return (
        f"{cpu_model()}, {os.cpu_count()} cores; Python "
        f"{sys.version.split()[0]}, {versions}; {time.strftime('%Y-%m-%d')}"
    )


def _version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def peak_rss_mb() -> float:
    """This process's peak resident memory so far, in MB."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 1024 if sys.platform != "darwin" else peak / 2**20


def best_matmul_flops(shapes, dtype: str = "float32", repeats: int = 3) -> float:
    """Best dense matmul rate (FLOP/s) measured on this backend and dtype.

    `shapes` are (m, k, n) triples. Each is timed through every compiler
    the backend trains with (XLA; on TensorFlow also plain `tf.function`,
    its default on CPU; torch's eager matmul, what its `fit` runs), 10
    products per timing, best of `repeats`.
    """
    import keras

    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        compiled = [tf.function(tf.matmul), tf.function(tf.matmul, jit_compile=True)]
    elif keras.backend.backend() == "torch":
        compiled = [keras.ops.matmul]
    else:
        import jax

        compiled = [jax.jit(keras.ops.matmul)]

    def wait(tensor):  # a float32 scalar to the host: the product is done
        keras.ops.convert_to_numpy(keras.ops.sum(keras.ops.cast(tensor, "float32")))

    best = 0.0
    for m, k, n in shapes:
        a = keras.random.normal((m, k), dtype=dtype)
        b = keras.random.normal((k, n), dtype=dtype)
        for fn in compiled:
            wait(fn(a, b))  # compile
            for _ in range(repeats):
                start = time.perf_counter()
                for _ in range(10):
                    out = fn(a, b)
                wait(out)
                seconds = (time.perf_counter() - start) / 10
                best = max(best, 2 * m * k * n / seconds)
    return best


def training_flops(config, batch: int, source_length: int, target_length: int):
    """Matmul FLOPs of one training step (forward + backward) for a batch.

    2 FLOPs per multiply-add; backward = 2x forward, so training = 3x
    forward. Counted, with d = d_model, f = d_ff, V = vocabulary, S and T
    the padded source and target lengths, per sequence:

    - encoder layer: S (8 d^2 [Q, K, V, O] + 4 d f [FFN] + 4 S d [scores,
      context]);
    - decoder layer: T (8 d^2 + 4 T d) self-attention (the full T x T
      product, as computed), cross-attention T (4 d^2 [Q, O] + 4 S d) +
      S 4 d^2 [K, V of the memory], and T 4 d f [FFN];
    - output projection: T 2 d V.

    Not counted: embeddings lookups, layer norms, softmaxes, dropout, the
    optimizer. So MFU is the share of time spent on the model's necessary
    matmuls; everything else lowers it.
    """
    d, f = config.d_model, config.d_ff
    vocab = config.target_vocab_size or config.vocab_size
    s, t = source_length, target_length
    encoder = s * (8 * d * d + 4 * d * f + 4 * s * d)
    decoder = t * (8 * d * d + 4 * t * d + 4 * d * d + 4 * s * d + 4 * d * f)
    decoder += s * 4 * d * d
    forward = (
        config.num_encoder_layers * encoder
        + config.num_decoder_layers * decoder
        + t * 2 * d * vocab
    )
    return 3 * forward * batch


def real_token_shares(batches) -> dict[str, float]:
    """Real / padded target and source tokens over one epoch of a
    `BucketedBatches` (its empty filler batches skipped)."""
    import numpy as np

    real = padded = real_source = padded_source = 0
    for index in range(len(batches)):
        inputs, labels, _ = batches[index]
        if labels.size == 0:
            continue
        real += int(np.count_nonzero(labels))
        padded += labels.size
        real_source += int(np.count_nonzero(inputs["source_ids"]))
        padded_source += inputs["source_ids"].size
    return {"target": real / padded, "source": real_source / padded_source}


def write_section(heading: str, text: str) -> None:
    """Replace the `### heading` section of the benchmark page holding it,
    or append it to docs/benchmarks.md."""
    docs = benchmark_page(heading)
    heading = f"### {heading}"
    section = heading + "\n\n" + text.strip() + "\n"
    content = docs.read_text(encoding="utf-8") if docs.exists() else "# Benchmarks\n"
    start = content.find(heading + "\n")
    if start < 0:
        content = content.rstrip("\n") + "\n\n" + section
    else:
        ends = [
            e
            for e in (content.find(m, start + 1) for m in ("\n### ", "\n## "))
            if e >= 0
        ]
        end = min(ends) + 1 if ends else len(content)
        content = content[:start] + section + ("\n" if ends else "") + content[end:]
    docs.write_text(content, encoding="utf-8")


def run_child(
    command: list[str], backend: str, timeout: float | None = None
) -> dict | None:
    """Run a benchmark's child process on `backend`; return the JSON of its
    last `RESULT {...}` line, or exit with its output when it failed. Past
    `timeout` seconds the child and everything it started are killed and
    the answer is None."""
    import json
    import signal
    import subprocess

    env = {**os.environ, "KERAS_BACKEND": backend, "TF_CPP_MIN_LOG_LEVEL": "2"}
    child = subprocess.Popen(
        command,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # Its compile workers go with it on a timeout.
    )
    try:
        stdout, stderr = child.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, signal.SIGKILL)
        child.communicate()
        return None
    lines = [x for x in stdout.splitlines() if x.startswith("RESULT ")]
    if child.returncode or not lines:
        sys.exit(f"{backend} run failed:\n{stdout[-3000:]}{stderr[-3000:]}")
    return json.loads(lines[-1][len("RESULT ") :])


def cli_seconds(
    arguments: list[str], backend: str, cache: str, stdin: str = ""
) -> float:
    """Wall time of one `keras-transformer` command, from process start to
    exit, with `cache` as its compilation-cache root; exits on failure."""
    import subprocess

    env = {
        **os.environ,
        "KERAS_BACKEND": backend,
        "TF_CPP_MIN_LOG_LEVEL": "2",
        "KERAS_TRANSFORMER_CACHE": cache,
    }
    env.pop("TF_XLA_FLAGS", None)  # the command sets its own cache flag
    command = [sys.executable, "-m", "keras_transformer", *arguments]
    start = time.perf_counter()
    out = subprocess.run(
        command, input=stdin, env=env, capture_output=True, text=True, check=False
    )
    seconds = time.perf_counter() - start
    if out.returncode or not out.stdout.strip():
        sys.exit(f"{arguments[0]} failed on {backend}:\n{out.stderr[-3000:]}")
    return seconds


def profile_arguments(description: str) -> argparse.ArgumentParser:
    """The options both step profiles take."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--size", default="small")
    parser.add_argument("--rows", type=int, default=64)
    parser.add_argument("--length", type=int, default=32)
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument(
        "--keras-hub", action="store_true", help="profile the keras-hub assembly"
    )
    parser.add_argument(
        "--top", type=int, default=12, help="the costliest non-matmul ops listed"
    )
    return parser


def profiled_model(args):
    """The model to profile, compiled as `keras-transformer train` does (the
    keras-hub assembly: the same loss and optimizer, no metrics), warmed up;
    returns it, one step's inputs and labels, and its untraced ms per step."""
    import keras
    import numpy as np

    from keras_transformer import TransformerConfig, build_transformer, training

    config = TransformerConfig.preset(args.size, vocab_size=args.vocab_size)
    keras.utils.set_random_seed(0)
    if args.keras_hub:
        model = keras_hub_model(config)
        training.compile_model(model, config, training.TrainOptions(), metrics=None)
    else:
        model = build_transformer(config)
        training.compile_model(model, config, training.TrainOptions())
    ids = np.random.default_rng(0).integers(
        4, args.vocab_size, (args.rows, args.length)
    )
    inputs = {"source_ids": ids, "target_ids": ids}
    for _ in range(2):  # compile, then one warm step
        model.train_on_batch(inputs, ids)
    start = time.perf_counter()
    for _ in range(args.steps):
        model.train_on_batch(inputs, ids)
    wall_ms = (time.perf_counter() - start) * 1000 / args.steps
    return model, inputs, ids, wall_ms


def print_breakdown(title: str, totals, kinds, phases) -> None:
    """A (kind x phase) table of ms per step, with each kind's share."""
    summed = sum(totals.values())
    print(f"\n{title}\n")
    print("| kind | " + " | ".join(f"{p} ms" for p in phases) + " | total ms | share |")
    print("| --- " * (len(phases) + 3) + "|")
    for kind in kinds:
        parts = [totals[kind, p] for p in phases]
        cells = " | ".join(f"{part:,.0f}" for part in parts)
        print(f"| {kind} | {cells} | {sum(parts):,.0f} | {sum(parts) / summed:.0%} |")
    parts = [sum(totals[kind, p] for kind in kinds) for p in phases]
    cells = " | ".join(f"{part:,.0f}" for part in parts)
    print(f"| all | {cells} | {summed:,.0f} | 100% |")


def print_costliest(columns: tuple[str, ...], rows, top: int) -> None:
    """The `top` costliest (cells, ms per step) rows outside the matmuls."""
    print(f"\nThe {top} most expensive ops outside the matmuls:\n")
    print("| " + " | ".join(columns) + " | ms per step |")
    print("| --- " * (len(columns) + 1) + "|")
    for cells, ms in sorted(rows, key=lambda row: -row[1])[:top]:
        print("| " + " | ".join(cells) + f" | {ms:,.1f} |")


def keras_hub_model(config):
    """The peer assembly: keras-hub blocks with a tied embedding."""
    import keras
    import keras_hub

    source = keras.Input((None,), dtype="int32", name="source_ids")
    target = keras.Input((None,), dtype="int32", name="target_ids")
    embedding = keras_hub.layers.TokenAndPositionEmbedding(
        config.vocab_size, 256, config.d_model, tie_weights=True
    )
    x = embedding(source)
    for _ in range(config.num_encoder_layers):
        x = keras_hub.layers.TransformerEncoder(
            config.d_ff, config.num_heads, dropout=config.dropout_rate
        )(x, padding_mask=keras.ops.not_equal(source, 0))
    y = embedding(target)
    for _ in range(config.num_decoder_layers):
        y = keras_hub.layers.TransformerDecoder(
            config.d_ff, config.num_heads, dropout=config.dropout_rate
        )(
            y,
            x,
            decoder_padding_mask=keras.ops.not_equal(target, 0),
            encoder_padding_mask=keras.ops.not_equal(source, 0),
        )
    logits = embedding.token_embedding(y, reverse=True)
    return keras.Model({"source_ids": source, "target_ids": target}, logits)
