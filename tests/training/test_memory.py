"""A batch budget the machine cannot hold is refused before anything is
built, with one that fits; a real out-of-memory becomes a sentence."""

from __future__ import annotations

import pytest

from keras_transformer.config import TransformerConfig
from keras_transformer.training import memory

pytestmark = pytest.mark.backend_neutral

TINY = TransformerConfig.preset("tiny", vocab_size=400)
GIB = 2**30


def test_the_estimate_grows_with_every_size_it_names():
    base = memory.activation_bytes_per_token(TINY, 128)
    assert memory.activation_bytes_per_token(TINY, 256) > base
    for field in ("d_model", "d_ff", "vocab_size", "num_decoder_layers"):
        bigger = TINY.replace(**{field: getattr(TINY, field) * 2})
        assert memory.activation_bytes_per_token(bigger, 128) > base, field
    # The closed form of the module doc, for tiny: 6 layer-equivalents.
    assert base == 5 * (6 * (8 * 64 + 3 * 256 + 3 * 4 * 128) + 4 * 400)


def test_a_budget_over_the_limit_is_refused_with_one_that_fits(monkeypatch):
    # The review's case: 384,000 tokens (the whole corpus padded) under an
    # 8 GiB address-space limit died after 60 s allocating [384000, 256].
    limit = (8 * GIB, "its address-space limit (ulimit)")
    monkeypatch.setattr(memory, "memory_limit", lambda: limit)
    with pytest.raises(ValueError) as info:
        memory.check_memory(TINY, 384_000, 128, capacity=384_000)
    message = str(info.value)
    assert "--tokens-per-batch 384,000 would need about" in message
    assert "its address-space limit (ulimit) allows 8.0 GiB" in message
    fits = memory.largest_budget(TINY, 128, 8 * GIB)
    assert f"Use at most --tokens-per-batch {fits} " in message
    assert 128 <= fits < 384_000
    memory.check_memory(TINY, fits, 128)  # The advice runs.
    with pytest.raises(ValueError):
        memory.check_memory(TINY, fits + 1, 128)


def test_the_advice_never_exceeds_what_the_training_set_fills(monkeypatch):
    monkeypatch.setattr(memory, "memory_limit", lambda: (3 * GIB, "x"))
    with pytest.raises(ValueError, match="at most --tokens-per-batch 5000 "):
        memory.check_memory(TINY, 10**6, 128, capacity=5000)


def test_a_model_that_fits_no_row_says_so(monkeypatch):
    monkeypatch.setattr(memory, "memory_limit", lambda: (2 * GIB + 1000, "x"))
    with pytest.raises(ValueError, match="not even one pair"):
        memory.check_memory(TINY, 4096, 128)


def test_the_limit_is_the_smallest_of_the_machines_limits():
    limit, source = memory.memory_limit()
    assert 0 < limit <= memory._physical_memory()
    assert source


class ResourceExhaustedError(Exception):
    """Named as TensorFlow's is."""


@pytest.mark.parametrize(
    "error, expected",
    [
        (ResourceExhaustedError("OOM when allocating tensor"), True),
        (RuntimeError("RESOURCE_EXHAUSTED: Out of memory allocating"), True),
        (MemoryError(), True),
        (ValueError("a shape mismatch"), False),
    ],
)
def test_out_of_memory_is_told_by_name_or_message(error, expected):
    assert memory.is_out_of_memory(error) is expected


def test_the_out_of_memory_sentence_names_the_flag_and_a_smaller_value():
    error = ResourceExhaustedError("OOM when allocating tensor with shape[384000,256]")
    message = str(memory.out_of_memory(error, 0, 384_000, run_kept=False))
    assert "out of memory in training step 1 with --tokens-per-batch 384,000" in message
    assert "shape[384000,256]" in message and "to 192,000" in message
    assert "was removed" in message
