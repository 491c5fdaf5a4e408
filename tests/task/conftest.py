"""A small model with a tokenizer, fitted briefly on built-in pairs, for the
task tests (module-scoped: fitting once serves every test of a module)."""

from __future__ import annotations

import keras
import pytest

from keras_transformer.data.tokenizer import train_tokenizer
from tests.helpers import TRAINING_MODEL, short_pairs

# The training tests' model with one layer each side: fits in seconds.
SMALL = dict(
    TRAINING_MODEL, num_encoder_layers=1, num_decoder_layers=1, max_position=64
)


@pytest.fixture(scope="module")
def pairs():
    """240 short built-in pairs as (sources, targets)."""
    chosen = short_pairs("train", 240)
    return [en for en, _ in chosen], [de for _, de in chosen]


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
