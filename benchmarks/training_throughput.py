"""Training speed: ours vs the keras-hub assembly, MFU, padding, memory.

One command for both backends; each backend is measured in its own process
(a child of this one), and within it, for the `tiny`, `small` and `base`
sizes, our model and the same sizes assembled from keras-hub layers train
on the same fixed batch with their timing windows alternated. Printed per
backend and size:

- target tokens per second (median over the windows), ours and keras-hub,
  and their ratio;
- MFU: model matmul FLOPs per step (formula in `_common.training_flops`)
  x steps per second / the best dense matmul rate measured in the same
  process on the same backend, in the matmul dtype of the row's precision
  (so "peak" is what this CPU reaches through `keras.ops.matmul`, not a
  datasheet figure);
- the process's peak resident memory.

Ours is compiled exactly as `keras-transformer train` compiles it
(`training.compile_model`: with its three per-token metrics); keras-hub
gets the same optimizer and loss, no metrics, Keras's default compile.

Each size runs under every dtype policy of `--precisions` (both contenders
under the same policy); `mixed_bfloat16` pays off on CPUs with native
bfloat16 matmuls (AVX-512 BF16, AMX), and the backends differ in how they
use them.

It also reports the share of real tokens in the batches the real pipeline
builds (token budget 2,048, default buckets) on Multi30k when `--multi30k
DIR` is given, else on the built-in corpus.

    python benchmarks/training_throughput.py --multi30k ../shared/data/multi30k
    python benchmarks/training_throughput.py --backends jax --sizes small --write
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
    keras_hub_model,
    machine_line,
    peak_rss_mb,
    real_token_shares,
    run_child,
    training_flops,
    write_section,
)

# Matmul shapes like the model's (rows = the tokens of a batch).
MATMUL_SHAPES = ((2048, 256, 1024), (2048, 1024, 256), (2048, 512, 2048))

# (batch rows, length, windows, steps per window) per size: `base` is slow
# on 2 cores, so it gets a smaller batch and fewer steps.
SHAPES = {
    "tiny": (64, 32, 5, 10),
    "small": (64, 32, 5, 4),
    "base": (32, 32, 3, 1),
}


def _contenders(size: str, vocab_size: int, precision: str):
    import keras

    from keras_transformer import TransformerConfig, build_transformer, training

    config = TransformerConfig.preset(size, vocab_size=vocab_size)
    options = training.TrainOptions(precision=precision)
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy(precision)
    try:
        keras.utils.set_random_seed(0)
        ours = build_transformer(config)
        training.compile_model(ours, config, options)
        keras.utils.set_random_seed(0)
        hub = keras_hub_model(config)
        # The same optimizer, schedule and loss; no metrics, Keras's defaults.
        training.compile_model(hub, config, options, metrics=None)
    finally:
        keras.config.set_dtype_policy(previous)
    return config, {"ours": ours, "keras-hub": hub}


def measure_size(size: str, vocab_size: int, precision: str) -> dict:
    import numpy as np

    rows, length, windows, steps = SHAPES[size]
    rng = np.random.default_rng(0)
    ids = rng.integers(4, vocab_size, (rows, length), np.int32)
    inputs = {"source_ids": ids, "target_ids": ids}
    config, models = _contenders(size, vocab_size, precision)

    def window(model) -> float:
        # train_on_batch, not one `fit` per window: each `fit` call has a
        # fixed start-up cost (seconds on TensorFlow) that a real run pays
        # once per epoch, not once per few steps.
        start = time.perf_counter()
        for _ in range(steps):
            model.train_on_batch(inputs, ids)
        return time.perf_counter() - start

    for model in models.values():
        window(model)  # compile and warm up
    seconds = {name: [] for name in models}
    for _ in range(windows):  # alternate, so load changes hit both alike
        for name, model in models.items():
            seconds[name].append(window(model))
    tokens = rows * length * steps
    rates = {name: tokens / statistics.median(s) for name, s in seconds.items()}
    flops_per_token = training_flops(config, rows, length, length) / (rows * length)
    return {
        "size": size,
        "precision": precision,
        "batch": f"{rows} x {length}",
        "params": {name: m.count_params() for name, m in models.items()},
        "rates": rates,
        "flops_per_token": flops_per_token,
    }


MATMUL_DTYPES = {"float32": "float32", "mixed_bfloat16": "bfloat16"}


def child(sizes: list[str], vocab_size: int, precisions: list[str]) -> dict:
    import keras

    peaks = {
        precision: best_matmul_flops(MATMUL_SHAPES, MATMUL_DTYPES[precision]) / 1e9
        for precision in precisions
    }
    results = [
        measure_size(size, vocab_size, precision)
        for size in sizes
        for precision in precisions
    ]
    return {
        "backend": keras.backend.backend(),
        "matmul_peak_gflops": peaks,
        "sizes": results,
        "peak_rss_mb": peak_rss_mb(),
    }


def padding_share(multi30k: str | None) -> dict:
    """Real / padded target (and source) tokens over one epoch of the real
    pipeline's batches."""
    from keras_transformer import training
    from keras_transformer.data.datasets import DatasetSpec

    spec = DatasetSpec("multi30k", data_dir=multi30k) if multi30k else DatasetSpec()
    options = training.TrainOptions(data=spec, vocab_size=8000)
    splits = training.load_splits(options)
    tokenizer = training.prepare_tokenizer(options, splits)
    data = training.prepare_batches(options, splits, tokenizer).train
    return {
        "corpus": "Multi30k train" if multi30k else "built-in corpus",
        "batches": len(data),
        "shapes": len(data.shapes()),
        **real_token_shares(data),
    }


def table(results: list[dict]) -> str:
    lines = [
        "| backend | size | precision | batch | ours tok/s | keras-hub tok/s | ratio "
        "| GFLOP/token | ours GFLOP/s | matmul peak GFLOP/s | MFU ours "
        "| MFU keras-hub | peak RSS |",
        "| --- " * 13 + "|",
    ]
    for result in results:
        for size in result["sizes"]:
            peak = result["matmul_peak_gflops"][size["precision"]]
            ours, hub = size["rates"]["ours"], size["rates"]["keras-hub"]
            gflop = size["flops_per_token"] / 1e9
            lines.append(
                f"| {result['backend']} | {size['size']} | {size['precision']} "
                f"| {size['batch']} "
                f"| {ours:,.0f} | {hub:,.0f} | {ours / hub:.2f} | {gflop:.3f} "
                f"| {ours * gflop:,.0f} | {peak:,.0f} | {ours * gflop / peak:.0%} "
                f"| {hub * gflop / peak:.0%} | {result['peak_rss_mb']:,.0f} MB |"
            )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", default="tensorflow,jax")
    parser.add_argument("--sizes", default="tiny,small,base")
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument(
        "--precisions",
        default="float32,mixed_bfloat16",
        help=f"comma-separated dtype policies, of {list(MATMUL_DTYPES)}",
    )
    parser.add_argument("--multi30k", help="Multi30k directory, for the padding")
    parser.add_argument("--write", action="store_true", help="update the docs")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    sizes = args.sizes.split(",")
    unknown = set(sizes) - set(SHAPES)
    if unknown:
        parser.error(f"--sizes: unknown {sorted(unknown)}; expected {list(SHAPES)}")
    precisions = args.precisions.split(",")
    unknown = set(precisions) - set(MATMUL_DTYPES)
    if unknown:
        parser.error(
            f"--precisions: unknown {sorted(unknown)}; expected {list(MATMUL_DTYPES)}"
        )
    if args.child:
        result = child(sizes, args.vocab_size, precisions)
        print("RESULT " + json.dumps(result), flush=True)
        return
    results = []
    for backend in args.backends.split(","):
        command = [sys.executable, __file__, "--child", "--sizes", args.sizes]
        command += ["--vocab-size", str(args.vocab_size)]
        command += ["--precisions", args.precisions]
        results.append(run_child(command, backend))
        print(table(results[-1:]), flush=True)
    padding = padding_share(args.multi30k)
    text = (
        "`python benchmarks/training_throughput.py"
        + (f" --multi30k {args.multi30k}" if args.multi30k else "")
        + f"` on {machine_line()}.\n\n"
        "Fixed random batches (no padding), vocabulary "
        f"{args.vocab_size:,}, dropout 0.1, label-smoothed loss, Adam with the "
        "warmup schedule; median of alternating windows after a compiling "
        "window. MFU = matmul FLOPs per token (formula in "
        "`benchmarks/_common.py`: encoder, decoder, attention and output "
        "projection, x3 for forward and backward) x tokens/s / the best "
        "matmul rate measured in the same process through `keras.ops.matmul` "
        "in the precision's matmul dtype (float32, or bfloat16 for "
        "mixed_bfloat16). Both contenders run under the row's dtype policy."
        "\n\n"
        + table(results)
        + f"\n\nPadding in the real pipeline's batches ({padding['corpus']}, "
        f"2,048 target tokens per batch, {padding['batches']} batches of "
        f"{padding['shapes']} shapes): real tokens are {padding['target']:.1%} "
        f"of the padded target tokens and {padding['source']:.1%} of the "
        "padded source tokens.\n"
    )
    print("\n" + text)
    if args.write:
        write_section("Training speed: ours vs keras-hub, MFU, padding", text)


if __name__ == "__main__":
    main()
