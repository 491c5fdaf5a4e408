"""Training speed of the three backends: target tokens per second and MFU.

Each backend trains in its own process (the backend is fixed when Keras is
imported), and the processes take turns: round 1 runs TensorFlow, JAX and
torch one after another, round 2 again, and so on, so a change in the
machine's load hits every backend alike. In each process: the model of one
size, compiled exactly as `keras-transformer train` compiles it
(`training.compile_model`: warmup schedule, label-smoothed loss, the three
per-token metrics; Keras's default compile: XLA on TensorFlow and JAX, eager
on torch), trains on one fixed batch; after a warm-up window that compiles,
`--windows` windows of `--steps` updates are timed. MFU is the model's
matmul FLOPs per token (`_common.training_flops`) times tokens per second
over the best dense float32 matmul rate measured in the same process on the
same backend (`_common.best_matmul_flops`). The table gives the median
window over all rounds.

    python benchmarks/backend_throughput.py --sizes small,base --rounds 3
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (  # noqa: E402
    best_matmul_flops,
    machine_line,
    run_child,
    training_flops,
    write_section,
)

# Matmul shapes like the model's (rows = the tokens of a batch).
MATMUL_SHAPES = ((2048, 256, 1024), (2048, 1024, 256), (2048, 512, 2048))
# (batch rows, length) per size: `base` is slow on 2 cores.
BATCHES = {"tiny": (64, 32), "small": (64, 32), "base": (32, 32)}


def compiled_model(size: str, vocab_size: int):
    """The model of `size`, compiled as `train` compiles it, and its batch."""
    import keras
    import numpy as np

    from keras_transformer import TransformerConfig, build_transformer, training

    rows, length = BATCHES[size]
    config = TransformerConfig.preset(size, vocab_size=vocab_size)
    keras.utils.set_random_seed(0)
    model = build_transformer(config)
    training.compile_model(model, config, training.TrainOptions())
    ids = np.random.default_rng(0).integers(4, vocab_size, (rows, length), np.int32)
    return model, ids


def training_windows(model, ids, windows: int, steps: int) -> list[float]:
    """Seconds of `windows` windows of `steps` updates on one batch, after a
    warm-up update that compiles."""
    inputs = {"source_ids": ids, "target_ids": ids}

    def window(count: int) -> float:
        start = time.perf_counter()
        for _ in range(count):
            model.train_on_batch(inputs, ids)
        return time.perf_counter() - start

    window(1)
    return [window(steps) for _ in range(windows)]


def child(size: str, vocab_size: int, windows: int, steps: int) -> dict:
    import keras

    model, ids = compiled_model(size, vocab_size)
    rows, length = ids.shape
    config = model.config
    seconds = training_windows(model, ids, windows, steps)
    flops = training_flops(config, rows, length, length) / (rows * length)
    return {
        "backend": keras.backend.backend(),
        "size": size,
        "tokens_per_window": rows * length * steps,
        "seconds": seconds,
        "flops_per_token": flops,
        "peak_gflops": best_matmul_flops(MATMUL_SHAPES) / 1e9,
    }


def table(results: dict) -> str:
    lines = [
        "| size | backend | target tok/s | MFU | matmul peak GFLOP/s | windows |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for (size, backend), runs in results.items():
        rates = [r["tokens_per_window"] / s for r in runs for s in r["seconds"]]
        rate = statistics.median(rates)
        peak = max(r["peak_gflops"] for r in runs)
        mfu = rate * runs[0]["flops_per_token"] / (peak * 1e9)
        lines.append(
            f"| {size} | {backend} | {rate:,.0f} | {100 * mfu:.1f}% | "
            f"{peak:.0f} | {len(rates)} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", default="tensorflow,jax,torch")
    parser.add_argument("--sizes", default="small,base")
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--windows", type=int, default=2)
    parser.add_argument("--steps", type=int, default=2, help="updates per window")
    parser.add_argument("--write", action="store_true", help="update the docs")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    for name in ("rounds", "windows", "steps"):
        value = getattr(args, name)
        if value < 1:
            parser.error(f"--{name} must be at least 1. Received: {value}")
    if args.child:
        result = child(args.child, args.vocab_size, args.windows, args.steps)
        print("RESULT " + json.dumps(result), flush=True)
        return
    results: dict = {}
    for round_ in range(args.rounds):
        for size in args.sizes.split(","):
            for backend in args.backends.split(","):
                command = [sys.executable, __file__, "--child", size]
                command += ["--vocab-size", str(args.vocab_size)]
                command += ["--windows", str(args.windows), "--steps", str(args.steps)]
                result = run_child(command, backend)
                results.setdefault((size, backend), []).append(result)
                print(f"round {round_ + 1} {size} {backend}: {result['seconds']}",
                      flush=True)  # fmt: skip
    text = (
        f"`python benchmarks/backend_throughput.py --sizes {args.sizes} --rounds "
        f"{args.rounds} --windows {args.windows} --steps {args.steps}` on "
        f"{machine_line()}. Vocabulary {args.vocab_size:,}, float32, one fixed "
        "batch (small: 64 x 32 tokens, base: 32 x 32), compiled as `train` "
        "compiles it (XLA on TensorFlow and JAX, eager on torch); each backend "
        "in its own process, the processes taking turns over the rounds; "
        "median window.\n\n" + table(results) + "\n"
    )
    print("\n" + text)
    if args.write:
        write_section("Training speed of the three backends", text)


if __name__ == "__main__":
    main()
