"""A small model with a tokenizer, fitted briefly on built-in pairs, for the
task tests (module-scoped: fitting once serves every test of a module)."""

from __future__ import annotations

import keras
import pytest

from keras_transformer.data.builtin_corpus import generate_corpus
from keras_transformer.data.tokenizer import train_tokenizer

# A model small enough to fit in seconds on two cores.
SMALL = dict(
    d_model=32,
    d_ff=64,
    num_heads=2,
    num_encoder_layers=1,
    num_decoder_layers=1,
    max_position=64,
    warmup_steps=20,
)


def short_pairs(count: int, seed: int = 5) -> tuple[list[str], list[str]]:
    splits = generate_corpus(num_train=2000, num_valid=50, num_test=10, seed=seed)
    pairs = [p for p in splits["train"] if len(p[0].split()) <= 7][:count]
    return [en for en, _ in pairs], [de for _, de in pairs]


@pytest.fixture(scope="module")
def pairs():
    return short_pairs(240)


@pytest.fixture(scope="module")
def tokenizer(pairs):
    source, target = pairs
    return train_tokenizer(source + target, 400)


@pytest.fixture(scope="module")
def fitted(pairs, tokenizer):
    """A `TransformerSeq2SeqLM` fitted 10 epochs on the pairs (about 110
    updates: it then translates them with words, not only EOS), and its
    history."""
    from keras_transformer import TransformerSeq2SeqLM

    keras.utils.set_random_seed(7)
    task = TransformerSeq2SeqLM.from_preset(
        "tiny", tokenizer=tokenizer, tokens_per_batch=256, max_length=32, **SMALL
    )
    task.compile()
    history = task.fit(x=pairs, epochs=10, verbose=0)
    return task, history
