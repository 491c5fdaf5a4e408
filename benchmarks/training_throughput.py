"""Training throughput: our Transformer vs the same sizes built from keras-hub.

Prints a table of target tokens per second (median of 3 timing windows) for
fixed batches of 64 sentences x 32 tokens, both models side by side in one
process, on the backend chosen by KERAS_BACKEND. Sizes: the `small` preset
(d_model 256, 3 + 3 layers, 4 heads, d_ff 1024, shared vocabulary 8,000),
the configuration of shared/docs/measured-peers.md.

    KERAS_BACKEND=tensorflow python benchmarks/training_throughput.py
    KERAS_BACKEND=jax python benchmarks/training_throughput.py
"""

from __future__ import annotations

import argparse
import statistics
import time

import keras
import numpy as np

from keras_transformer import TransformerConfig, build_transformer
from keras_transformer.losses import LabelSmoothedCrossEntropy
from keras_transformer.schedules import TransformerSchedule, transformer_optimizer


def keras_hub_model(config: TransformerConfig) -> keras.Model:
    """The peer assembly: keras-hub blocks with a tied embedding."""
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


def measure(model, config, batch, *, windows: int, steps: int) -> float:
    model.compile(
        optimizer=transformer_optimizer(TransformerSchedule(config.d_model, 400)),
        loss=LabelSmoothedCrossEntropy(0.1),
    )
    inputs, labels = batch
    for _ in range(3):  # compile and warm up
        model.train_on_batch(inputs, labels)
    tokens = int(np.sum(labels != 0))
    rates = []
    for _ in range(windows):
        start = time.perf_counter()
        for _ in range(steps):
            model.train_on_batch(inputs, labels)
        rates.append(tokens * steps / (time.perf_counter() - start))
    return statistics.median(rates)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--length", type=int, default=32)
    parser.add_argument("--windows", type=int, default=3)
    parser.add_argument("--steps", type=int, default=10)
    args = parser.parse_args()
    config = TransformerConfig.preset("small")
    rng = np.random.default_rng(0)
    ids = rng.integers(4, config.vocab_size, (args.batch, args.length), np.int32)
    batch = ({"source_ids": ids, "target_ids": ids}, ids)
    rows = []
    for name, make in (
        ("keras-transformer (ours)", lambda: build_transformer(config)),
        ("keras-hub layers", lambda: keras_hub_model(config)),
    ):
        keras.utils.set_random_seed(0)
        model = make()
        rate = measure(model, config, batch, windows=args.windows, steps=args.steps)
        rows.append((name, model.count_params(), rate))
    backend = keras.backend.backend()
    print(f"\nbackend {backend}, batch {args.batch} x {args.length}, small sizes")
    print("| implementation | parameters | target tokens/s | ratio to keras-hub |")
    print("| --- | --- | --- | --- |")
    for name, params, rate in rows:
        print(f"| {name} | {params:,} | {rate:,.0f} | {rate / rows[1][2]:.2f} |")


if __name__ == "__main__":
    main()
