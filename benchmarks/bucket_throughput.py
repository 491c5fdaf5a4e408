"""Length buckets: real target tokens per second on the real pipeline's batches.

The token budget counts padded target tokens, so the padding the length
buckets leave is throughput lost: a batch of 2,048 padded tokens that is 79%
real trains 1,620 real tokens, one that is 89% real 1,820, in about the same
step time. Finer buckets cost more batch shapes, each compiled once. This
compares sets of buckets on the same corpus and model, per backend, in one
process per backend, with the contenders' timing windows alternated:

- batch shapes and the share of real tokens in the padded targets and
  sources over one epoch;
- the compiling pass: one training step on one batch of every shape (what a
  run pays once, without a warm compilation cache);
- real target tokens per second over windows of consecutive batches of the
  epoch (median).

The model is the README recipe's (`small`, 8,000-piece vocabulary).

    python benchmarks/bucket_throughput.py --multi30k ../shared/data/multi30k --write
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
    machine_line,
    real_token_shares,
    run_child,
    write_section,
)

# name -> padded lengths (those below --max-length, then --max-length).
BUCKET_SETS = {
    "every 4 up to 32 (default)": None,
    "every 8 up to 32 (before)": (8, 16, 24, 32, 48, 64, 96, 128, 192, 256),
}


def contenders(multi30k: str | None) -> tuple[list[dict], int]:
    import keras

    from keras_transformer import training
    from keras_transformer.data.datasets import DatasetSpec
    from keras_transformer.data.pipeline import DEFAULT_BUCKETS

    spec = DatasetSpec("multi30k", data_dir=multi30k) if multi30k else DatasetSpec()
    options = training.TrainOptions(data=spec, preset="small", vocab_size=8000)
    splits = training.load_splits(options)
    tokenizer = training.prepare_tokenizer(options, splits)
    config = training.model_config(options, tokenizer)
    runs = []
    for name, buckets in BUCKET_SETS.items():
        data = training.prepare_batches(
            options, splits, tokenizer, buckets=buckets or DEFAULT_BUCKETS
        ).train
        first_of_shape = {}
        for index in range(len(data)):
            labels = data[index][1]
            if labels.size:
                first_of_shape.setdefault(labels.shape, index)
        shares = real_token_shares(data)
        keras.utils.set_random_seed(0)
        model = training.build_model(options, config)
        start = time.perf_counter()
        for index in first_of_shape.values():
            inputs, labels, weights = data[index]
            model.train_on_batch(inputs, labels, sample_weight=weights)
        runs.append(
            {
                "name": name,
                "model": model,
                "data": data,
                "position": 0,
                "rates": [],
                "epoch_batches": len(data),
                "shapes": len(first_of_shape),
                "compile_s": time.perf_counter() - start,
                "target_share": shares["target"],
                "source_share": shares["source"],
            }
        )
    return runs, len(splits["train"].source)


def window(run: dict, steps: int) -> float:
    """Real target tokens per second over the next `steps` batches."""
    import numpy as np

    data, model = run["data"], run["model"]
    real = 0
    start = time.perf_counter()
    for _ in range(steps):
        inputs, labels, weights = data[run["position"] % len(data)]
        run["position"] += 1
        if labels.size == 0:
            continue  # an empty filler batch that completes an update
        model.train_on_batch(inputs, labels, sample_weight=weights)
        real += int(np.count_nonzero(labels))
    return real / (time.perf_counter() - start)


def child(multi30k: str | None, windows: int, steps: int) -> dict:
    import keras

    runs, pairs = contenders(multi30k)
    for _ in range(windows):
        for run in runs:  # alternate, so load changes hit all alike
            run["rates"].append(window(run, steps))
    return {
        "backend": keras.backend.backend(),
        "pairs": pairs,
        "runs": [
            {key: value for key, value in run.items() if key not in ("model", "data")}
            for run in runs
        ],
    }


def table(results: list[dict]) -> str:
    lines = [
        "| backend | buckets | batches per epoch | shapes | real / padded target "
        "| real / padded source | compiling pass s | real target tok/s "
        "| vs before |",
        "| --- " * 9 + "|",
    ]
    for result in results:
        before = statistics.median(result["runs"][-1]["rates"])
        for run in result["runs"]:
            rate = statistics.median(run["rates"])
            lines.append(
                f"| {result['backend']} | {run['name']} | {run['epoch_batches']} "
                f"| {run['shapes']} | {run['target_share']:.1%} "
                f"| {run['source_share']:.1%} | {run['compile_s']:.1f} "
                f"| {rate:,.0f} | {rate / before:.2f}x |"
            )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", default="tensorflow,jax")
    parser.add_argument("--multi30k", help="Multi30k directory (else built-in)")
    parser.add_argument("--windows", type=int, default=4)
    parser.add_argument("--steps", type=int, default=25, help="batches per window")
    parser.add_argument("--write", action="store_true", help="update the docs")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        result = child(args.multi30k, args.windows, args.steps)
        print("RESULT " + json.dumps(result), flush=True)
        return
    results = []
    for backend in args.backends.split(","):
        command = [sys.executable, __file__, "--child"]
        command += ["--windows", str(args.windows), "--steps", str(args.steps)]
        if args.multi30k:
            command += ["--multi30k", args.multi30k]
        results.append(run_child(command, backend))
        print(table(results[-1:]), flush=True)
    corpus = "Multi30k train" if args.multi30k else "the built-in corpus"
    text = (
        "`python benchmarks/bucket_throughput.py"
        + (f" --multi30k {args.multi30k}" if args.multi30k else "")
        + f"` on {machine_line()}.\n\n"
        f"`small` preset, {corpus} ({results[0]['pairs']:,} pairs), 8,000-piece "
        "vocabulary, 2,048 padded target tokens per batch, float32. Per "
        "backend one process; after the compiling pass (one step on one "
        f"batch of every shape), {args.windows} alternating windows of "
        f"{args.steps} consecutive batches per contender; median.\n\n" + table(results)
    )
    print("\n" + text)
    if args.write:
        write_section("Length buckets", text)


if __name__ == "__main__":
    main()
