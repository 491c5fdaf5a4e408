"""One accelerator: `base` in bfloat16 with XLA, training and beam-4 decoding.

Trains on fixed random batches of about `--tokens-per-step` target tokens
(the paper's ~25,000) and prints the step time, target tokens per second and
MFU against the accelerator's bf16 dense peak (`--peak-tflops`; H100/H200
SXM: 989), plus the best bf16 matmul rate measured in this process. Then
decodes with the cached beam-4 search (EOS masked, so every sentence has the
same output length) and prints sentences per second. Run through
`benchmarks/gpu.sh` on a GPU machine, never in CI.

    KERAS_BACKEND=jax python benchmarks/gpu_benchmark.py
    # a CPU smoke run of the same code path:
    python benchmarks/gpu_benchmark.py --preset tiny --tokens-per-step 1024 \\
        --steps 2 --decode-batch 8 --matmul-size 512 --allow-cpu
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import keras
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import best_matmul_flops, peak_rss_mb, training_flops  # noqa: E402
from decoding_throughput import NoEosModel  # noqa: E402

from keras_transformer import TransformerConfig, training  # noqa: E402
from keras_transformer.decoding.generator import SequenceGenerator  # noqa: E402
from keras_transformer.training.model_setup import dtype_policy  # noqa: E402


def accelerator() -> str | None:
    """The first GPU's name, or None when there is none."""
    if keras.backend.backend() == "jax":
        import jax

        gpus = [d for d in jax.devices() if d.platform == "gpu"]
        return gpus[0].device_kind if gpus else None
    if keras.backend.backend() == "torch":
        import torch

        return torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    import tensorflow as tf

    gpus = tf.config.list_physical_devices("GPU")
    if not gpus:
        return None
    return tf.config.experimental.get_device_details(gpus[0]).get("device_name", "GPU")


def compiled() -> bool:
    return keras.backend.backend() != "torch"


def train(args, config) -> dict:
    options = training.TrainOptions(precision=args.precision)
    model = training.build_model(options, config)
    # The same optimizer, loss and metrics as `train`, with XLA (torch: eager,
    # as its `fit` runs by default).
    training.compile_model(model, config, options, jit_compile=compiled())
    rows = max(8, args.tokens_per_step // args.length // 8 * 8)
    rng = np.random.default_rng(0)
    ids = rng.integers(4, config.vocab_size, (rows, args.length)).astype(np.int32)
    inputs = {"source_ids": ids, "target_ids": ids}

    def window() -> float:
        # Per step, as benchmarks/training_throughput.py: no `fit` start-up.
        start = time.perf_counter()
        for _ in range(args.steps):
            model.train_on_batch(inputs, ids)
        return (time.perf_counter() - start) / args.steps

    window()  # compile
    step = statistics.median(window() for _ in range(args.windows))
    tokens = rows * args.length
    flops = training_flops(config, rows, args.length, args.length)
    return {"rows": rows, "step": step, "tokens": tokens, "flops": flops}


def decode(args, config) -> float:
    keras.utils.set_random_seed(0)
    with dtype_policy(args.precision):
        model = NoEosModel(training.build_model(training.TrainOptions(), config))
    rng = np.random.default_rng(1)
    shape = (args.decode_batch, args.length)
    source = rng.integers(4, config.vocab_size, shape).astype(np.int32)
    generator = SequenceGenerator(model, beam_size=4, max_extra_length=args.length)
    generator(source)  # compile
    times = []
    for _ in range(3):
        start = time.perf_counter()
        generator(source)
        times.append(time.perf_counter() - start)
    return args.decode_batch / statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="base")
    parser.add_argument("--vocab-size", type=int, default=37000)
    parser.add_argument("--tokens-per-step", type=int, default=25000)
    parser.add_argument("--length", type=int, default=32)
    parser.add_argument("--precision", default="mixed_bfloat16")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--windows", type=int, default=3)
    parser.add_argument("--decode-batch", type=int, default=256)
    parser.add_argument("--peak-tflops", type=float, default=989.0)
    parser.add_argument("--matmul-size", type=int, default=8192)
    parser.add_argument("--allow-cpu", action="store_true")
    args = parser.parse_args()
    device = accelerator()
    if device is None and not args.allow_cpu:
        sys.exit(
            f"No GPU is visible to the {keras.backend.backend()} backend. This "
            "benchmark is for a GPU machine (see docs/benchmarking.md); pass "
            "--allow-cpu for a smoke run."
        )
    config = TransformerConfig.preset(args.preset, vocab_size=args.vocab_size)
    result = train(args, config)
    rate = result["tokens"] / result["step"]
    achieved = result["flops"] / result["step"] / 1e12
    dtype = "bfloat16" if "bfloat16" in args.precision else "float32"
    size = args.matmul_size
    measured = best_matmul_flops([(size, size, size)], dtype) / 1e12
    sentences = decode(args, config)
    print(
        f"\nbackend {keras.backend.backend()}, device {device or 'CPU'}, "
        f"{args.preset}, {args.precision}, {'XLA' if compiled() else 'eager'}\n"
        f"| batch | step time | target tok/s | model TFLOP/s | MFU vs "
        f"{args.peak_tflops:g} | measured matmul TFLOP/s | beam-4 sentences/s "
        f"(batch {args.decode_batch}, {args.length} -> {2 * args.length} tokens) "
        f"| peak host RSS |\n| --- | --- | --- | --- | --- | --- | --- | --- |\n"
        f"| {result['rows']} x {args.length} | {result['step'] * 1000:,.0f} ms "
        f"| {rate:,.0f} | {achieved:,.1f} | {achieved / args.peak_tflops:.1%} "
        f"| {measured:,.1f} | {sentences:,.1f} | {peak_rss_mb():,.0f} MB |"
    )


if __name__ == "__main__":
    main()
