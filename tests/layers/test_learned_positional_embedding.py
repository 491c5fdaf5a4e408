"""LearnedPositionalEmbedding: one trainable vector per position."""

from __future__ import annotations

import keras
import numpy as np
import pytest

from keras_transformer.layers import LearnedPositionalEmbedding
from tests.helpers import assert_layer_contract, to_numpy


def test_layer_contract(tmp_path):
    inputs = np.random.default_rng(0).normal(size=(2, 5, 8)).astype("float32")
    assert_layer_contract(
        LearnedPositionalEmbedding,
        {"max_position": 12, "initializer": "random_normal"},
        [inputs],
        tmp_path=tmp_path,
    )


def test_adds_table_rows():
    inputs = np.random.default_rng(1).normal(size=(2, 5, 8)).astype("float32")
    layer = LearnedPositionalEmbedding(10)
    output = to_numpy(layer(inputs))
    table = to_numpy(layer.position_embeddings)
    assert table.shape == (10, 8)
    np.testing.assert_allclose(output, inputs + table[None, :5], atol=1e-6)
    assert [w.name for w in layer.trainable_weights] == ["position_embeddings"]


@pytest.mark.parametrize("start_index", [0, 2, 6])
def test_start_index_offsets_positions(start_index):
    layer = LearnedPositionalEmbedding(10)
    zeros = np.zeros((1, 4, 8), "float32")
    output = to_numpy(layer(zeros, start_index=start_index))
    table = to_numpy(layer.position_embeddings)
    np.testing.assert_allclose(output[0], table[start_index : start_index + 4])
    as_tensor = layer(zeros, start_index=keras.ops.convert_to_tensor(start_index))
    np.testing.assert_allclose(to_numpy(as_tensor), output)


def test_too_long_sequence_raises():
    layer = LearnedPositionalEmbedding(4)
    layer(np.zeros((1, 4, 8), "float32"))
    with pytest.raises(ValueError, match="max_position=4"):
        layer(np.zeros((1, 5, 8), "float32"))
    with pytest.raises(ValueError, match="max_position=4"):
        layer(np.zeros((1, 2, 8), "float32"), start_index=3)


@pytest.mark.parametrize("max_position", [0, -3, 2.5])
def test_invalid_max_position(max_position):
    with pytest.raises(ValueError, match="max_position"):
        LearnedPositionalEmbedding(max_position)
