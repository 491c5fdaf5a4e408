"""Sinusoidal positional encoding against the closed form of §3.5."""

from __future__ import annotations

import functools

import keras
import numpy as np
import pytest

from keras_transformer.layers import SinusoidalPositionalEncoding, sinusoidal_table
from tests.helpers import assert_layer_contract, to_numpy


def closed_form(pos, dim, depth):
    """PE(pos, 2i) = sin(pos / 10000^(2i/d)); PE(pos, 2i+1) = cos(same)."""
    angle = pos / 10000 ** (2 * (dim // 2) / depth)
    return np.sin(angle) if dim % 2 == 0 else np.cos(angle)


@functools.cache
def table_512():
    return to_numpy(sinusoidal_table(np.arange(51), 512))


def test_layer_contract(tmp_path):
    inputs = np.random.default_rng(0).normal(size=(2, 5, 8)).astype("float32")
    assert_layer_contract(SinusoidalPositionalEncoding, {}, [inputs], tmp_path=tmp_path)


@pytest.mark.parametrize("pos", [0, 1, 7, 50])
@pytest.mark.parametrize("i", [0, 1, 5, 100, 255])
def test_table_matches_closed_form(pos, i):
    depth = 512
    table = table_512()
    assert table.shape == (51, depth)
    assert table.dtype == np.float32
    angle = pos / 10000 ** (2 * i / depth)
    np.testing.assert_allclose(table[pos, 2 * i], np.sin(angle), atol=2e-5)
    np.testing.assert_allclose(table[pos, 2 * i + 1], np.cos(angle), atol=2e-5)


def test_whole_table_interleaves_sine_and_cosine():
    depth = 16
    table = to_numpy(sinusoidal_table(np.arange(20), depth))
    expected = np.array(
        [[closed_form(p, d, depth) for d in range(depth)] for p in range(20)]
    )
    np.testing.assert_allclose(table, expected, atol=1e-5)
    # Position 0: sin(0) = 0 on even dims, cos(0) = 1 on odd dims.
    np.testing.assert_array_equal(table[0, 0::2], 0.0)
    np.testing.assert_array_equal(table[0, 1::2], 1.0)


def test_layer_adds_table_to_inputs():
    inputs = np.random.default_rng(1).normal(size=(2, 6, 8)).astype("float32")
    output = to_numpy(SinusoidalPositionalEncoding()(inputs))
    expected = inputs + to_numpy(sinusoidal_table(np.arange(6), 8))[None]
    np.testing.assert_allclose(output, expected, atol=1e-6)


@pytest.mark.parametrize("start_index", [0, 3, 17])
def test_start_index_equals_slice_of_longer_table(start_index):
    depth, length = 8, 4
    longer = to_numpy(
        SinusoidalPositionalEncoding()(np.zeros((1, start_index + length, depth)))
    )
    layer = SinusoidalPositionalEncoding()
    zeros = np.zeros((1, length, depth), "float32")
    shifted = to_numpy(layer(zeros, start_index=start_index))
    np.testing.assert_allclose(shifted, longer[:, start_index:], atol=1e-6)
    as_tensor = layer(zeros, start_index=keras.ops.convert_to_tensor(start_index))
    np.testing.assert_allclose(to_numpy(as_tensor), shifted, atol=1e-6)


def test_lengths_far_beyond_training_work():
    depth, length = 32, 5000
    output = to_numpy(SinusoidalPositionalEncoding()(np.zeros((1, length, depth))))
    assert output.shape == (1, length, depth)
    assert np.all(np.isfinite(output))
    assert np.all(np.abs(output) <= 1.0)
    positions = np.array([1000, 4321, 4999])
    expected = np.array(
        [[closed_form(p, d, depth) for d in range(depth)] for p in positions]
    )
    # float32 angles of up to 5000 rad carry ~1e-3 absolute rounding.
    np.testing.assert_allclose(output[0, positions], expected, atol=2e-3)


def test_output_keeps_input_dtype():
    layer = SinusoidalPositionalEncoding(dtype="float16")
    output = layer(keras.ops.zeros((1, 3, 8), "float16"))
    assert keras.backend.standardize_dtype(output.dtype) == "float16"
