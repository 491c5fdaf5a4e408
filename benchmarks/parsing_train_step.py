"""The parsing model's training step: one joint vocabulary, or the targets' own.

A parsing run's targets hold only tree symbols (brackets and tags: about a
hundred on the Penn Treebank sample), while its words tokenizer holds
thousands of words. With one joint vocabulary, tied to the output layer,
every step computes logits, softmax and loss over every word; with the
targets' own vocabulary (`WordTokenizer.target_size`: a parsing run's
default since it was added), over the tree symbols alone. Both models are
the recipe's (`tiny` with `--word-pointer`), compiled as `train` compiles
them, and train on the same fixed batches shaped like the recipe's (2,048
target tokens, sources 0.39 as long, as in the sample's store), their
timing windows alternated in one process:

    KERAS_BACKEND=tensorflow python benchmarks/parsing_train_step.py
    KERAS_BACKEND=jax python benchmarks/parsing_train_step.py --windows 9
"""

from __future__ import annotations

import argparse
import statistics
import time

import keras
import numpy as np

from keras_transformer import TransformerConfig, build_transformer, training


def contenders(vocab_size: int, target_size: int) -> dict[str, TransformerConfig]:
    # About half the tree symbols are brackets (50 of the sample's 97); which
    # ids they are does not change the step's cost. Within the targets' own
    # vocabulary, so that any --target-size builds.
    brackets = tuple(range(4, 4 + (target_size - 4) // 2))
    joint = TransformerConfig.preset(
        "tiny", vocab_size=vocab_size, pointer_bracket_ids=brackets
    )
    own = TransformerConfig.preset(
        "tiny",
        vocab_size=vocab_size,
        share_embeddings=False,
        target_vocab_size=target_size,
        pointer_bracket_ids=brackets,
    )
    return {
        f"one joint vocabulary ({vocab_size:,} logits)": joint,
        f"the targets' own ({target_size} logits)": own,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--target-size", type=int, default=101)
    parser.add_argument("--rows", type=int, default=32)
    parser.add_argument("--target-length", type=int, default=64)
    parser.add_argument("--source-length", type=int, default=25)
    parser.add_argument("--windows", type=int, default=5)
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    count = args.rows * args.steps
    sources = rng.integers(4, args.vocab_size, (count, args.source_length), np.int32)
    # Every target symbol is within the smaller vocabulary: the same batches
    # are valid for both.
    targets = rng.integers(4, args.target_size, (count, args.target_length), np.int32)
    runs = {}
    for name, config in contenders(args.vocab_size, args.target_size).items():
        keras.utils.set_random_seed(0)
        model = build_transformer(config)
        training.compile_model(model, config, training.TrainOptions())

        def window(model=model):
            start = time.perf_counter()
            for step in range(args.steps):
                rows = slice(step * args.rows, (step + 1) * args.rows)
                batch = {"source_ids": sources[rows], "target_ids": targets[rows]}
                model.train_on_batch(batch, targets[rows])
            return (time.perf_counter() - start) / args.steps

        window()  # Compile.
        runs[name] = {"window": window, "seconds": [], "params": model.count_params()}
    for _ in range(args.windows):
        for run in runs.values():
            run["seconds"].append(run["window"]())
    first = statistics.median(next(iter(runs.values()))["seconds"])
    tokens = args.rows * args.target_length
    print(
        f"\nbackend {keras.backend.backend()}, tiny with the word pointer, batch "
        f"{args.rows} x {args.target_length} targets ({tokens:,} tokens), "
        f"sources {args.source_length}; ms per step, median of "
        f"{args.windows} alternating windows of {args.steps} steps\n"
    )
    print("| output layer | parameters | ms / step | speed-up |")
    print("| --- | ---: | ---: | ---: |")
    for name, run in runs.items():
        seconds = statistics.median(run["seconds"])
        print(
            f"| {name} | {run['params']:,} | {seconds * 1000:,.0f} "
            f"| {first / seconds:.2f}x |"
        )


if __name__ == "__main__":
    main()
