"""DecoderBlock: wiring, masks, contract, and decode_step against call."""

from __future__ import annotations

import numpy as np
import pytest
from keras import ops

from keras_transformer.layers import DecoderBlock
from tests.helpers import assert_layer_contract, to_numpy

B, T, S, D, H, F = 2, 4, 6, 16, 4, 32


def example_inputs(seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(B, T, D)).astype("float32")
    memory = rng.normal(size=(B, S, D)).astype("float32")
    self_mask = np.broadcast_to(np.tril(np.ones((T, T), bool)), (B, T, T)).copy()
    source_valid = np.array([[1, 1, 1, 1, 1, 1], [1, 1, 1, 0, 0, 0]], bool)
    cross_mask = np.broadcast_to(source_valid[:, None, :], (B, T, S)).copy()
    return x, memory, self_mask, cross_mask


@pytest.mark.parametrize("norm_first", [False, True])
def test_layer_contract(tmp_path, norm_first):
    assert_layer_contract(
        DecoderBlock,
        {
            "num_heads": H,
            "intermediate_dim": F,
            "dropout_rate": 0.1,
            "attention_dropout_rate": 0.1,
            "norm_first": norm_first,
        },
        list(example_inputs()),
        tmp_path=tmp_path,
    )


@pytest.mark.parametrize("norm_first", [False, True])
def test_wiring_matches_sublayers(norm_first):
    x, memory, self_mask, cross_mask = example_inputs(1)
    x = ops.convert_to_tensor(x)  # The sums below add tensors, not arrays.
    block = DecoderBlock(H, F, norm_first=norm_first)
    output = to_numpy(block(x, memory, self_mask, cross_mask))

    def self_attend(h):
        return block.self_attention(h, attention_mask=self_mask)

    def cross_attend(h):
        return block.cross_attention(h, memory, attention_mask=cross_mask)

    if norm_first:
        h = x + self_attend(block.self_attention_norm(x))
        h = h + cross_attend(block.cross_attention_norm(h))
        expected = h + block.feed_forward(block.feed_forward_norm(h))
    else:
        h = block.self_attention_norm(x + self_attend(x))
        h = block.cross_attention_norm(h + cross_attend(h))
        expected = block.feed_forward_norm(h + block.feed_forward(h))
    np.testing.assert_allclose(output, to_numpy(expected), atol=1e-5)


def test_causal_and_source_padding():
    x, memory, self_mask, cross_mask = example_inputs(2)
    block = DecoderBlock(H, F)
    output = to_numpy(block(x, memory, self_mask, cross_mask))
    later = x.copy()
    later[:, 2:] += 5.0
    changed = to_numpy(block(later, memory, self_mask, cross_mask))
    np.testing.assert_allclose(changed[:, :2], output[:, :2], atol=1e-5)
    assert not np.allclose(changed[:, 2:], output[:, 2:], atol=1e-3)
    padded_memory = memory.copy()
    padded_memory[1, 3:] = -7.0  # Only padding positions of sequence 1.
    changed = to_numpy(block(x, padded_memory, self_mask, cross_mask))
    np.testing.assert_allclose(changed, output, atol=1e-5)


def test_returns_both_attention_weights():
    x, memory, self_mask, cross_mask = example_inputs(3)
    block = DecoderBlock(H, F)
    output, weights = block(
        x, memory, self_mask, cross_mask, return_attention_weights=True
    )
    assert sorted(weights) == ["cross_attention", "self_attention"]
    self_weights = to_numpy(weights["self_attention"])
    cross_weights = to_numpy(weights["cross_attention"])
    assert self_weights.shape == (B, H, T, T)
    assert cross_weights.shape == (B, H, T, S)
    upper = np.triu(np.ones((T, T), bool), 1)
    assert np.all(self_weights[:, :, upper] == 0)
    assert np.all(self_weights[:, :, ~upper] > 0)
    assert np.all(cross_weights[1, :, :, 3:] == 0)
    np.testing.assert_allclose(
        to_numpy(output), to_numpy(block(x, memory, self_mask, cross_mask))
    )


@pytest.mark.parametrize("norm_first", [False, True])
def test_decode_step_matches_call(norm_first):
    x, memory, self_mask, cross_mask = example_inputs(4)
    block = DecoderBlock(H, F, norm_first=norm_first)
    expected = to_numpy(block(x, memory, self_mask, cross_mask))
    max_length = T + 3
    cache = block.self_attention.empty_cache(B, max_length)
    cross_key_value = block.cross_attention.project_key_value_cache(memory)
    slots = np.arange(max_length)
    for t in range(T):
        step_mask = np.broadcast_to(slots <= t, (B, 1, max_length))
        output, cache = block.decode_step(
            ops.convert_to_tensor(x[:, t : t + 1]),
            cache,
            cross_key_value,
            t,
            step_mask,
            cross_mask[:, t : t + 1],
        )
        np.testing.assert_allclose(to_numpy(output)[:, 0], expected[:, t], atol=1e-5)
    key_cache = to_numpy(cache[0]).transpose(0, 2, 1, 3)  # Stored heads-first.
    assert key_cache.shape == (B, max_length, H, D // H)
    assert np.all(key_cache[:, T:] == 0)
    assert not np.any(np.all(key_cache[:, :T] == 0, axis=(-1, -2)))


def test_decode_step_several_positions_at_once():
    x, memory, self_mask, cross_mask = example_inputs(5)
    block = DecoderBlock(H, F)
    expected = to_numpy(block(x, memory, self_mask, cross_mask))
    max_length = T
    cache = block.self_attention.empty_cache(B, max_length)
    cross_key_value = block.cross_attention.project_key_value_cache(memory)
    slots = np.arange(max_length)
    first = np.broadcast_to(slots[None, :] <= np.arange(2)[:, None], (B, 2, T))
    output, cache = block.decode_step(
        ops.convert_to_tensor(x[:, :2]),
        cache,
        cross_key_value,
        0,
        first,
        cross_mask[:, :2],
    )
    np.testing.assert_allclose(to_numpy(output), expected[:, :2], atol=1e-5)
    rest = np.broadcast_to(slots[None, :] <= np.arange(2, 4)[:, None], (B, 2, T))
    output, cache = block.decode_step(
        ops.convert_to_tensor(x[:, 2:]),
        cache,
        cross_key_value,
        2,
        rest,
        cross_mask[:, 2:],
    )
    np.testing.assert_allclose(to_numpy(output), expected[:, 2:], atol=1e-5)


def test_has_cross_attention_and_three_norms():
    x, memory, self_mask, cross_mask = example_inputs(6)
    block = DecoderBlock(H, F)
    block(x, memory, self_mask, cross_mask)
    names = {w.path.split("/")[1] for w in block.weights}
    assert names == {
        "self_attention",
        "self_attention_norm",
        "cross_attention",
        "cross_attention_norm",
        "feed_forward",
        "feed_forward_norm",
    }


KEY_DIM = 6  # d_k apart from D / H = 4 (Table 3 row (B)).


def test_layer_contract_with_key_dim(tmp_path):
    assert_layer_contract(
        DecoderBlock,
        {"num_heads": H, "intermediate_dim": F, "key_dim": KEY_DIM},
        list(example_inputs(7)),
        tmp_path=tmp_path,
    )


def test_key_dim_reaches_both_attentions_and_decode_step_matches_call():
    x, memory, self_mask, cross_mask = example_inputs(8)
    block = DecoderBlock(H, F, key_dim=KEY_DIM)
    expected = to_numpy(block(x, memory, self_mask, cross_mask))
    for attention in (block.self_attention, block.cross_attention):
        assert attention.key_dim == KEY_DIM
        assert tuple(attention.key_dense.kernel.shape) == (D, H * KEY_DIM)
    assert block.get_config()["key_dim"] == KEY_DIM
    max_length = T + 1
    cache = block.self_attention.empty_cache(B, max_length)
    cross_key_value = block.cross_attention.project_key_value_cache(memory)
    assert tuple(cross_key_value[0].shape) == (B, H, S, KEY_DIM)
    slots = np.arange(max_length)
    for t in range(T):
        step_mask = np.broadcast_to(slots <= t, (B, 1, max_length))
        output, cache = block.decode_step(
            ops.convert_to_tensor(x[:, t : t + 1]),
            cache,
            cross_key_value,
            t,
            step_mask,
            cross_mask[:, t : t + 1],
        )
        np.testing.assert_allclose(to_numpy(output)[:, 0], expected[:, t], atol=1e-5)
    assert tuple(cache[0].shape) == (B, H, max_length, KEY_DIM)
    assert tuple(cache[1].shape) == (B, H, max_length, D // H)
