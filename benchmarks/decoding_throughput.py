"""Decoding throughput: greedy and beam-4, cached and uncached, compiled.

Prints a table of generated tokens per second (median of 3 runs after a
compiling warm-up) at output lengths 16, 32 and 64, for the `small` preset
(untrained weights: speed does not depend on them; EOS is masked out so every
row runs to its length). Cached and uncached run side by side in one process.

    KERAS_BACKEND=tensorflow python benchmarks/decoding_throughput.py
    KERAS_BACKEND=jax python benchmarks/decoding_throughput.py
"""

from __future__ import annotations

import argparse
import statistics
import time

import keras
import numpy as np
from keras import ops

from keras_transformer import TransformerConfig, build_transformer
from keras_transformer.config import EOS_ID
from keras_transformer.decoding.generator import SequenceGenerator


class NoEosModel:
    """Wraps a Transformer so EOS is never chosen (fixed output lengths)."""

    def __init__(self, model):
        self._model = model
        self.variables = model.variables
        self._eos_mask = None

    def __getattr__(self, name):
        return getattr(self._model, name)

    def _mask(self, logits):
        vocab = ops.shape(logits)[-1]
        is_eos = ops.equal(ops.arange(vocab), EOS_ID)
        return ops.where(is_eos, -1e9, logits)

    def decode(self, *args, **kwargs):
        return self._mask(self._model.decode(*args, **kwargs))

    def decode_step(self, *args, **kwargs):
        logits, cache = self._model.decode_step(*args, **kwargs)
        return self._mask(logits), cache


def measure(generator, source, runs: int) -> float:
    generator(source)  # compile
    rates = []
    for _ in range(runs):
        start = time.perf_counter()
        sequences, _ = generator(source)
        elapsed = time.perf_counter() - start
        rates.append(np.sum(sequences[:, 0] != 0) / elapsed)
    return statistics.median(rates)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--source-length", type=int, default=8)
    parser.add_argument("--lengths", type=int, nargs="+", default=[16, 32, 64])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    keras.utils.set_random_seed(0)
    config = TransformerConfig.preset("small")
    model = NoEosModel(build_transformer(config))
    rng = np.random.default_rng(0)
    source = rng.integers(4, config.vocab_size, (args.batch, args.source_length))
    source = source.astype(np.int32)
    print(f"\nbackend {keras.backend.backend()}, small preset, batch {args.batch}")
    print("| search | output length | cached tok/s | uncached tok/s | speed-up |")
    print("| --- | --- | --- | --- | --- |")
    for beam in (1, 4):
        for length in args.lengths:
            extra = length - args.source_length
            rates = [
                measure(
                    SequenceGenerator(
                        model, beam_size=beam, max_extra_length=extra, cached=cached
                    ),
                    source,
                    args.runs,
                )
                for cached in (True, False)
            ]
            name = "greedy" if beam == 1 else f"beam {beam}"
            print(
                f"| {name} | {length} | {rates[0]:,.0f} | {rates[1]:,.0f} | "
                f"{rates[0] / rates[1]:.1f}x |"
            )


if __name__ == "__main__":
    main()
