"""Attention masks against hand-written NumPy expectations."""

from __future__ import annotations

import keras
import numpy as np
import pytest

from keras_transformer.layers import masks
from tests.helpers import to_numpy

pytestmark = pytest.mark.usefixtures("keras_state")

IDS = np.array([[5, 6, 7, 0, 0], [3, 0, 0, 0, 0], [4, 4, 4, 4, 4]], "int32")
VALID = np.array(
    [[1, 1, 1, 0, 0], [1, 0, 0, 0, 0], [1, 1, 1, 1, 1]], bool
)  # Written out by hand, not derived from IDS.


def as_bool(x):
    x = to_numpy(x)
    assert x.dtype == np.bool_
    return x


def test_padding_mask():
    np.testing.assert_array_equal(as_bool(masks.padding_mask(IDS)), VALID)


def test_padding_mask_custom_pad_id():
    ids = np.array([[9, 2, 9, 0]], "int32")
    expected = np.array([[False, True, False, True]])
    np.testing.assert_array_equal(as_bool(masks.padding_mask(ids, pad_id=9)), expected)


@pytest.mark.parametrize("offset", [0, 3])
def test_token_positions(offset):
    positions = to_numpy(masks.token_positions(IDS, offset=offset))
    assert positions.dtype == np.int32
    expected = np.array([[0, 1, 2, 3, 4]] * 3) + offset
    np.testing.assert_array_equal(positions, expected)


def test_causal_mask():
    query = np.array([[0, 1, 2]], "int32")
    key = np.array([[0, 1, 2]], "int32")
    expected = np.array([[[1, 0, 0], [1, 1, 0], [1, 1, 1]]], bool)
    np.testing.assert_array_equal(as_bool(masks.causal_mask(query, key)), expected)


def test_causal_mask_for_a_decoding_step():
    # One query at step 2 against a cache of 5 slots.
    query = np.array([[2], [4]], "int32")
    key = np.array([[0, 1, 2, 3, 4]], "int32")
    expected = np.array([[[1, 1, 1, 0, 0]], [[1, 1, 1, 1, 1]]], bool)
    np.testing.assert_array_equal(as_bool(masks.causal_mask(query, key)), expected)


def test_window_mask_is_a_neighbourhood_of_r_positions():
    positions = np.array([[0, 1, 2, 3, 4]], "int32")
    expected = np.array(
        [
            [1, 1, 0, 0, 0],
            [1, 1, 1, 0, 0],
            [0, 1, 1, 1, 0],
            [0, 0, 1, 1, 1],
            [0, 0, 0, 1, 1],
        ],
        bool,
    )[None]
    np.testing.assert_array_equal(
        as_bool(masks.window_mask(positions, positions, 3)), expected
    )
    wide = as_bool(masks.window_mask(positions, positions, 5))
    assert wide[0, 0].tolist() == [True, True, True, False, False]
    assert wide[0, 4].tolist() == [False, False, True, True, True]


@pytest.mark.parametrize("size", [1, 2, 3, 4, 7])
@pytest.mark.parametrize("causal", [False, True])
def test_window_covers_exactly_r_positions_as_in_section_4(size, causal):
    """§4 / Table 1: a neighbourhood of size r, not 2r + 1 positions."""
    positions = np.arange(20, dtype="int32")[None]
    mask = as_bool(masks.window_mask(positions, positions, size, causal=causal))[0]
    for query in range(size, 20 - size):  # Away from the edges.
        keys = np.flatnonzero(mask[query])
        assert len(keys) == size
        assert keys.max() - keys.min() == size - 1  # Contiguous.
        assert query in keys
        if causal:
            assert keys.max() == query  # The r positions ending at the query.
        else:
            assert query - keys.min() == size // 2  # Centred; one more before.


def test_self_attention_mask_padding_only():
    mask = as_bool(masks.self_attention_mask(IDS))
    assert mask.shape == (3, 5, 5)
    expected = np.stack([np.tile(row, (5, 1)) for row in VALID])
    np.testing.assert_array_equal(mask, expected)


def test_self_attention_mask_causal_and_padding():
    mask = as_bool(masks.self_attention_mask(IDS, causal=True))
    assert mask.shape == (3, 5, 5)
    lower = np.array(
        [
            [1, 0, 0, 0, 0],
            [1, 1, 0, 0, 0],
            [1, 1, 1, 0, 0],
            [1, 1, 1, 1, 0],
            [1, 1, 1, 1, 1],
        ],
        bool,
    )
    first = np.array(
        [
            [1, 0, 0, 0, 0],
            [1, 1, 0, 0, 0],
            [1, 1, 1, 0, 0],
            [1, 1, 1, 0, 0],
            [1, 1, 1, 0, 0],
        ],
        bool,
    )
    second = np.zeros((5, 5), bool)
    second[:, 0] = True
    np.testing.assert_array_equal(mask[0], first)
    np.testing.assert_array_equal(mask[1], second)
    np.testing.assert_array_equal(mask[2], lower)


def test_self_attention_mask_causal_window_and_padding():
    mask = as_bool(masks.self_attention_mask(IDS, causal=True, window=2))
    expected_full_row = np.array(
        [
            [1, 0, 0, 0, 0],
            [1, 1, 0, 0, 0],
            [0, 1, 1, 0, 0],
            [0, 0, 1, 1, 0],
            [0, 0, 0, 1, 1],
        ],
        bool,
    )
    np.testing.assert_array_equal(mask[2], expected_full_row)
    expected_padded = expected_full_row & np.array([1, 1, 1, 0, 0], bool)
    np.testing.assert_array_equal(mask[0], expected_padded)


def test_cross_attention_mask():
    source = np.array([[8, 9, 0, 0, 0, 0], [8, 9, 10, 11, 12, 13]], "int32")
    target = np.array([[1, 2, 3], [1, 0, 0]], "int32")
    mask = as_bool(masks.cross_attention_mask(source, target))
    assert mask.shape == (2, 3, 6)  # (B, T, S) with T != S.
    expected = np.zeros((2, 3, 6), bool)
    expected[0, :, :2] = True
    expected[1, :, :] = True  # Target padding rows keep the key mask.
    np.testing.assert_array_equal(mask, expected)


def test_masks_accept_symbolic_inputs():
    ids = keras.Input(shape=(None,), dtype="int32")
    mask = masks.self_attention_mask(ids, causal=True, window=2)
    assert tuple(mask.shape) == (None, None, None)
    cross = masks.cross_attention_mask(keras.Input(shape=(7,), dtype="int32"), ids)
    assert cross.shape[-1] == 7
