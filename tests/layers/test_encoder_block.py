"""EncoderBlock: residual wiring (post- and pre-norm), masks, contract."""

from __future__ import annotations

import numpy as np
import pytest
from keras import ops

from keras_transformer.layers import EncoderBlock
from tests.helpers import assert_layer_contract, to_numpy

B, S, D, H, F = 2, 6, 16, 4, 32


def inputs_and_mask(seed=0):
    x = np.random.default_rng(seed).normal(size=(B, S, D)).astype("float32")
    valid = np.array([[1, 1, 1, 1, 1, 1], [1, 1, 1, 0, 0, 0]], bool)
    mask = np.broadcast_to(valid[:, None, :], (B, S, S)).copy()
    return x, mask


@pytest.mark.parametrize("norm_first", [False, True])
def test_layer_contract(tmp_path, norm_first):
    x, mask = inputs_and_mask()
    assert_layer_contract(
        EncoderBlock,
        {
            "num_heads": H,
            "intermediate_dim": F,
            "dropout_rate": 0.1,
            "attention_dropout_rate": 0.1,
            "relu_dropout_rate": 0.1,
            "norm_first": norm_first,
            "layer_norm_epsilon": 1e-5,
        },
        [x, mask],
        tmp_path=tmp_path,
    )


@pytest.mark.parametrize("norm_first", [False, True])
def test_wiring_matches_sublayers(norm_first):
    x, mask = inputs_and_mask(1)
    x = ops.convert_to_tensor(x)  # The sums below add tensors, not arrays.
    block = EncoderBlock(H, F, norm_first=norm_first)
    output = to_numpy(block(x, mask))

    def attend(h):
        return block.self_attention(h, attention_mask=mask)

    if norm_first:
        h = x + attend(block.self_attention_norm(x))
        expected = h + block.feed_forward(block.feed_forward_norm(h))
    else:
        h = block.self_attention_norm(x + attend(x))
        expected = block.feed_forward_norm(h + block.feed_forward(h))
    np.testing.assert_allclose(output, to_numpy(expected), atol=1e-5)


def test_post_norm_output_is_normalised():
    x, mask = inputs_and_mask(2)
    output = to_numpy(EncoderBlock(H, F)(x * 10, mask))
    np.testing.assert_allclose(output.mean(-1), 0.0, atol=1e-4)
    np.testing.assert_allclose(output.std(-1), 1.0, atol=1e-3)


def test_padded_keys_do_not_matter():
    x, mask = inputs_and_mask(3)
    block = EncoderBlock(H, F)
    output = to_numpy(block(x, mask))
    changed = x.copy()
    changed[1, 3:] = 100.0  # Padding positions of the second sequence.
    output_changed = to_numpy(block(changed, mask))
    np.testing.assert_allclose(output_changed[1, :3], output[1, :3], atol=1e-5)
    np.testing.assert_array_equal(output_changed[0], output[0])


def test_returns_attention_weights():
    x, mask = inputs_and_mask(4)
    block = EncoderBlock(H, F)
    output, weights = block(x, mask, return_attention_weights=True)
    weights = to_numpy(weights)
    assert weights.shape == (B, H, S, S)
    assert np.all(weights[1, :, :, 3:] == 0)
    np.testing.assert_allclose(to_numpy(output), to_numpy(block(x, mask)))


def test_dropout_only_in_training():
    x, mask = inputs_and_mask(5)
    block = EncoderBlock(H, F, dropout_rate=0.5)
    inference = to_numpy(block(x, mask, training=False))
    np.testing.assert_array_equal(to_numpy(block(x, mask)), inference)
    training = to_numpy(block(x, mask, training=True))
    assert np.all(np.isfinite(training))
    assert not np.allclose(training, inference)


def test_sublayer_initializers_differ():
    x, mask = inputs_and_mask(6)
    block = EncoderBlock(H, F)
    block(x, mask)
    query = to_numpy(block.self_attention.query_dense.kernel)
    key = to_numpy(block.self_attention.key_dense.kernel)
    assert not np.array_equal(query, key)


def test_layer_contract_with_key_dim(tmp_path):
    x, mask = inputs_and_mask(3)
    assert_layer_contract(
        EncoderBlock,
        {"num_heads": H, "intermediate_dim": F, "key_dim": 2},
        [x, mask],
        tmp_path=tmp_path,
    )
    block = EncoderBlock(H, F, key_dim=2)
    block(x, mask)
    assert block.self_attention.key_dim == 2
    assert tuple(block.self_attention.query_dense.kernel.shape) == (D, H * 2)
    assert EncoderBlock(H, F).get_config()["key_dim"] is None
