"""Training throughput on 1 and 2 (simulated) devices and per precision policy.

Splits the host CPU into 2 devices, then trains the `tiny` model on the
built-in corpus's real batches (token budget 2,048) under four contenders in
one process, alternating their timing windows:

- float32 on one device,
- float32 data-parallel over the 2 devices (`--distribute mirrored`),
- mixed_bfloat16 on one device,
- mixed_float16 on one device (with dynamic loss scaling).

Prints real target tokens per second (median over the windows) and, with
--write, replaces this backend's section of docs/benchmarks*.md.

    KERAS_BACKEND=tensorflow python benchmarks/distributed_throughput.py --write
    KERAS_BACKEND=jax python benchmarks/distributed_throughput.py --write
"""

from __future__ import annotations

import argparse
import contextlib
import platform
import statistics
import sys
import time
from pathlib import Path

import keras
import numpy as np

from keras_transformer.training.distribution import (
    DistributionPlan,
    setup_distribution,
    simulate_cpu_devices,
)

simulate_cpu_devices(2)  # Before anything starts the backend.

from keras_transformer import training  # noqa: E402
from keras_transformer.data.datasets import DatasetSpec  # noqa: E402
from keras_transformer.data.pipeline import DataPosition  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import write_section  # noqa: E402


def contenders(args):
    options = training.TrainOptions(
        data=DatasetSpec(builtin_size=args.pairs),
        vocab_size=2000,
        tokens_per_batch=2048,
        max_length=64,
    )
    splits = training.load_splits(options)
    tokenizer = training.prepare_tokenizer(options, splits)
    config = training.model_config(options, tokenizer)
    single = DistributionPlan("none")
    mirrored = setup_distribution("mirrored")  # JAX: sets a global default.
    distribution = keras.distribution.distribution()
    if distribution is not None:
        keras.distribution.set_distribution(None)
    runs = []
    for name, plan, precision in (
        ("float32, 1 device", single, "float32"),
        ("float32, 2 devices", mirrored, "float32"),
        ("mixed_bfloat16, 1 device", single, "mixed_bfloat16"),
        ("mixed_float16, 1 device", single, "mixed_float16"),
    ):
        run_options = training.TrainOptions(
            data=options.data,
            vocab_size=2000,
            tokens_per_batch=2048,
            max_length=64,
            precision=precision,
        )
        data = training.prepare_batches(run_options, splits, tokenizer, plan)
        scope = contextlib.nullcontext
        if plan.mode != "none" and distribution is not None:
            scope = distribution.scope
        with scope():
            keras.utils.set_random_seed(0)
            model = training.build_model(run_options, config, plan)
        runs.append({"name": name, "model": model, "data": data, "scope": scope})
    return runs


def real_tokens(data, position, steps):
    counts = data.train.real_tokens_per_batch()
    total = 0
    for _ in range(steps):
        total += counts[position.index]
        position = data.train.advance(position, 1)
    return total, position


def measure(runs, windows: int, steps: int):
    for run in runs:  # Compile every bucket shape once.
        run["position"] = DataPosition()
        run["rates"] = []
        _window(run, len(run["data"].train))
    for _ in range(windows):
        for run in runs:
            tokens, seconds = _window(run, steps)
            run["rates"].append(tokens / seconds)
    return runs


def _window(run, steps):
    data = run["data"]
    tokens, after = real_tokens(data, run["position"], steps)
    with run["scope"]():
        start = time.perf_counter()
        run["model"].fit(
            data.train.for_fit(run["position"]),
            steps_per_epoch=steps,
            epochs=1,
            verbose=0,
            shuffle=False,
        )
        seconds = time.perf_counter() - start
    run["position"] = after
    return tokens, seconds


def table(runs) -> str:
    base = statistics.median(runs[0]["rates"])
    lines = [
        "| contender | real target tok/s (median) | vs float32, 1 device |",
        "| --- | --- | --- |",
    ]
    for run in runs:
        rate = statistics.median(run["rates"])
        lines.append(f"| {run['name']} | {rate:,.0f} | {rate / base:.2f}x |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=4000)
    parser.add_argument("--windows", type=int, default=5)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args()
    runs = measure(contenders(args), args.windows, args.steps)
    cpu = platform.processor() or platform.machine()
    machine = f"{cpu}, {time.strftime('%Y-%m-%d')}"
    text = (
        f"`KERAS_BACKEND={keras.backend.backend()} python "
        f"benchmarks/distributed_throughput.py`: `tiny` on the built-in corpus "
        f"({args.pairs} pairs, vocabulary 2,000, 2,048 tokens per batch), host CPU "
        f"split into 2 devices; {args.windows} alternating windows of "
        f"{args.steps} steps after a compiling pass ({machine}).\n\n" + table(runs)
    )
    print(text)
    if args.write:
        write_section(f"Devices and precision, backend {keras.backend.backend()}", text)


if __name__ == "__main__":
    np.set_printoptions(precision=3)
    main()
