"""A small model with a tokenizer, fitted briefly on built-in pairs, for the
task tests (session-scoped: fitting once serves every task module of a
suite; test_seq2seq_lm, test_preset_files, test_hub and test_preset_backends
each fitted their own). The fitted task is read-only: a test that changed
its weights would change what the other modules test, and an autouse check
fails it."""

from __future__ import annotations

import keras
import numpy as np
import pytest

from keras_transformer.data.tokenizer import train_tokenizer
from tests.helpers import TRAINING_MODEL, short_pairs

# The training tests' model with one layer each side: fits in seconds.
SMALL = dict(
    TRAINING_MODEL, num_encoder_layers=1, num_decoder_layers=1, max_position=64
)


@pytest.fixture(scope="session")
def pairs():
    """240 short built-in pairs as (sources, targets)."""
    chosen = short_pairs("train", 240)
    return [en for en, _ in chosen], [de for _, de in chosen]


@pytest.fixture(scope="session")
def tokenizer(pairs):
    source, target = pairs
    return train_tokenizer(source + target, 400)


def _weights(task) -> list[np.ndarray]:
    return [np.array(keras.ops.convert_to_numpy(w)) for w in task.weights]


# The fitted task and its weights right after fitting (set by `fitted`).
_fitted: list[tuple] = []


@pytest.fixture(scope="session")
def fitted(pairs, tokenizer):
    """A `TransformerSeq2SeqLM` fitted 10 epochs on the pairs (about 110
    updates: it then translates them with words, not only EOS), and its
    history. Shared by the session: read-only."""
    from keras_transformer import TransformerSeq2SeqLM

    keras.utils.set_random_seed(7)
    task = TransformerSeq2SeqLM.from_preset(
        "tiny", tokenizer=tokenizer, tokens_per_batch=256, max_length=32, **SMALL
    )
    task.compile()
    history = task.fit(x=pairs, epochs=10, verbose=0)
    _fitted.append((task, _weights(task)))
    return task, history


@pytest.fixture(autouse=True)
def _fitted_stays_unchanged(request):
    """After a test that used `fitted`: fail if its weights changed."""
    yield
    if "fitted" in request.fixturenames and _fitted:
        task, weights = _fitted[0]
        for before, after in zip(weights, _weights(task), strict=True):
            if not np.array_equal(before, after):
                raise AssertionError(
                    f"{request.node.nodeid} changed the weights of the shared "
                    "`fitted` task (tests/task/conftest.py): fit a copy instead."
                )
