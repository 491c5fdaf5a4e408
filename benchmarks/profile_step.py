"""Where a training step's time goes, by difference, on the current backend.

Each row is the full training step with one thing changed or removed,
timed with every row's windows alternated in one process; the difference to
the full step is that thing's cost. Rows:

- full: ours as `keras-transformer train` compiles it (with its metrics);
- no metrics: loss only;
- no dropout: dropout rates 0;
- vocabulary 1,000: the output projection and the softmax/loss over the
  vocabulary at 1/8 the size (8/7 of the difference is their cost);
- forward only: the compiled forward pass (`predict_on_batch`);
- one fit call per window: the same steps through one `model.fit` call
  (every other row calls `train_on_batch` per step), which adds `fit`'s
  fixed start-up cost, spread over the window's steps;
- fit, steps_per_execution 8: the same with eight batches per compiled call
  (not on torch, where Keras 3.15 allows only 1);
- XLA (TensorFlow only): the train step compiled with XLA;

    KERAS_BACKEND=tensorflow python benchmarks/profile_step.py
    KERAS_BACKEND=jax python benchmarks/profile_step.py --size small
"""

from __future__ import annotations

import argparse
import statistics
import time

import keras
import numpy as np

from keras_transformer import TransformerConfig, build_transformer, training


def variants(size: str, vocab_size: int) -> dict:
    base = TransformerConfig.preset(size, vocab_size=vocab_size)
    no_dropout = TransformerConfig.preset(size, vocab_size=vocab_size, dropout_rate=0.0)
    small_vocab = TransformerConfig.preset(size, vocab_size=1000)
    rows = {
        "full": (base, {}),
        "no metrics": (base, {"metrics": False}),
        "no dropout": (no_dropout, {}),
        "vocabulary 1,000": (small_vocab, {}),
        "forward only": (base, {"forward": True}),
        "one fit call per window": (base, {"fit": True}),
    }
    if keras.backend.backend() != "torch":  # Keras 3.15 on torch: 1 only.
        rows["fit, steps_per_execution 8"] = (
            base,
            {"fit": True, "steps_per_execution": 8},
        )
    if keras.backend.backend() == "tensorflow":
        rows["XLA"] = (base, {"jit_compile": True})
    return rows


def build(config, settings):
    keras.utils.set_random_seed(0)
    model = build_transformer(config)
    compile_options = {
        key: settings[key]
        for key in ("jit_compile", "steps_per_execution")
        if key in settings
    }
    if not settings.get("metrics", True):
        compile_options["metrics"] = None
    training.compile_model(model, config, training.TrainOptions(), **compile_options)
    return model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="small")
    parser.add_argument("--rows", type=int, default=64)
    parser.add_argument("--length", type=int, default=32)
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--windows", type=int, default=5)
    parser.add_argument("--steps", type=int, default=8)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    runs = {}
    for name, (config, settings) in variants(args.size, args.vocab_size).items():
        shape = (args.rows * args.steps, args.length)
        ids = rng.integers(4, config.vocab_size, shape, np.int32)
        inputs = {"source_ids": ids, "target_ids": ids}
        model = build(config, settings)

        def window(model=model, inputs=inputs, ids=ids, settings=settings):
            start = time.perf_counter()
            if settings.get("fit"):
                model.fit(inputs, ids, batch_size=args.rows, verbose=0, shuffle=False)
                return (time.perf_counter() - start) / args.steps
            for step in range(args.steps):
                rows = slice(step * args.rows, (step + 1) * args.rows)
                batch = {k: v[rows] for k, v in inputs.items()}
                if settings.get("forward"):
                    model.predict_on_batch(batch)
                else:
                    model.train_on_batch(batch, ids[rows])
            return (time.perf_counter() - start) / args.steps

        window()  # compile
        runs[name] = {"window": window, "seconds": []}
    for _ in range(args.windows):
        for run in runs.values():
            run["seconds"].append(run["window"]())
    full = statistics.median(runs["full"]["seconds"])
    print(
        f"\nbackend {keras.backend.backend()}, {args.size}, batch {args.rows} x "
        f"{args.length}, vocabulary {args.vocab_size}; ms per step (median of "
        f"{args.windows} alternating windows of {args.steps} steps)\n"
    )
    print("| variant | ms/step | vs full |")
    print("| --- | --- | --- |")
    for name, run in runs.items():
        ms = statistics.median(run["seconds"]) * 1000
        print(f"| {name} | {ms:,.0f} | {ms / (full * 1000):.2f} |")


if __name__ == "__main__":
    main()
