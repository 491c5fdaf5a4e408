"""ScaledEmbedding: lookup times sqrt(d_model), and its transpose (logits)."""

from __future__ import annotations

import keras
import numpy as np
import pytest

from keras_transformer.layers import ScaledEmbedding
from tests.helpers import assert_layer_contract, to_numpy

V, D = 50, 16


def test_layer_contract(tmp_path):
    ids = np.array([[1, 5, 49, 0], [7, 7, 0, 0]], "int32")
    assert_layer_contract(
        ScaledEmbedding, {"vocab_size": V, "model_dim": D}, [ids], tmp_path=tmp_path
    )


def test_layer_contract_reverse(tmp_path):
    hidden = np.random.default_rng(0).normal(size=(2, 3, D)).astype("float32")
    outputs = assert_layer_contract(
        ScaledEmbedding,
        {"vocab_size": V, "model_dim": D},
        [hidden],
        call_kwargs={"reverse": True},
        tmp_path=tmp_path,
    )
    assert outputs[0].shape == (2, 3, V)


def test_lookup_is_scaled_by_sqrt_model_dim():
    layer = ScaledEmbedding(V, D)
    ids = np.array([[3, 0, 49]], "int32")
    output = to_numpy(layer(ids))
    table = to_numpy(layer.embeddings)
    np.testing.assert_allclose(output[0], table[[3, 0, 49]] * np.sqrt(D), rtol=1e-6)


def test_reverse_is_transposed_table():
    layer = ScaledEmbedding(V, D)
    layer.build()
    hidden = np.random.default_rng(1).normal(size=(2, 3, D)).astype("float32")
    logits = layer(hidden, reverse=True)
    assert keras.backend.standardize_dtype(logits.dtype) == "float32"
    expected = hidden @ to_numpy(layer.embeddings).T
    np.testing.assert_allclose(to_numpy(logits), expected, atol=1e-5)


def test_one_variable_for_both_directions():
    layer = ScaledEmbedding(V, D)
    layer(np.ones((1, 2), "int32"))
    layer(np.ones((1, 2, D), "float32"), reverse=True)
    assert len(layer.weights) == 1
    assert tuple(layer.weights[0].shape) == (V, D)


def test_initial_scale_gives_unit_variance_embeddings():
    layer = ScaledEmbedding(1000, 64)
    layer.build()
    std = np.std(to_numpy(layer.embeddings))
    np.testing.assert_allclose(std, 64**-0.5, rtol=0.05)


@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
def test_mixed_precision_dtypes(policy):
    layer = ScaledEmbedding(V, D, dtype=policy)
    vectors = layer(np.array([[1, 2]], "int32"))
    assert keras.backend.standardize_dtype(vectors.dtype) == policy.split("_")[1]
    assert keras.backend.standardize_dtype(layer.embeddings.dtype) == "float32"
    logits = layer(vectors, reverse=True)
    assert keras.backend.standardize_dtype(logits.dtype) == "float32"


@pytest.mark.parametrize("name,args", [("vocab_size", (0, D)), ("model_dim", (V, 0))])
def test_invalid_sizes(name, args):
    with pytest.raises(ValueError, match=name):
        ScaledEmbedding(*args)


def _lora_layer(rank: int = 3) -> ScaledEmbedding:
    layer = ScaledEmbedding(V, D)
    layer.build()
    layer.enable_lora(rank, lora_alpha=6.0)
    rng = np.random.default_rng(1)
    layer.lora_embeddings_b.assign(rng.normal(size=(rank, D)).astype("float32"))
    return layer


ROWS = [2, 7, 40]


def _lora_rows_layer() -> ScaledEmbedding:
    layer = ScaledEmbedding(V, D)
    layer.build()
    layer.enable_lora(2, rows=ROWS)
    rng = np.random.default_rng(2)
    layer.lora_embeddings_b.assign(rng.normal(size=(2, D)).astype("float32"))
    layer.lora_rows.assign(rng.normal(size=(len(ROWS), D)).astype("float32"))
    return layer


def test_lora_reads_the_table_plus_the_scaled_low_rank_update():
    layer = _lora_layer()
    base = to_numpy(layer._embeddings)
    update = to_numpy(layer.lora_embeddings_a) @ to_numpy(layer.lora_embeddings_b)
    expected = base + (6.0 / 3) * update
    np.testing.assert_allclose(to_numpy(layer.embeddings), expected, rtol=1e-5)
    ids = np.array([[3, 0, 49]], "int32")
    np.testing.assert_allclose(
        to_numpy(layer(ids))[0], expected[[3, 0, 49]] * np.sqrt(D), rtol=1e-5
    )
    hidden = np.ones((1, 2, D), "float32")
    np.testing.assert_allclose(
        to_numpy(layer(hidden, reverse=True))[0], hidden[0] @ expected.T, rtol=1e-5
    )
    trainable = {v.path.split("/")[-1] for v in layer.trainable_weights}
    assert trainable == {"lora_embeddings_a", "lora_embeddings_b"}


@pytest.mark.parametrize("make", [_lora_layer, _lora_rows_layer])
def test_lora_saves_the_merged_table_only_and_loads_it_as_the_base(make):
    layer = make()
    store = {}
    layer.save_own_variables(store)
    assert list(store) == ["0"]
    np.testing.assert_allclose(to_numpy(store["0"]), to_numpy(layer.embeddings))
    plain = ScaledEmbedding(V, D)
    plain.build()
    plain.load_own_variables(store)
    np.testing.assert_allclose(to_numpy(plain.embeddings), to_numpy(layer.embeddings))
    again = make()
    again.load_own_variables(store)  # As Keras's LoRA Dense: factors zeroed.
    np.testing.assert_allclose(to_numpy(again.embeddings), to_numpy(store["0"]))
    assert not to_numpy(again.lora_embeddings_b).any()
    assert again.lora_rows is None or not to_numpy(again.lora_rows).any()


def test_lora_is_refused_where_it_cannot_apply():
    with pytest.raises(ValueError, match="unbuilt"):
        ScaledEmbedding(V, D).enable_lora(2)
    layer = _lora_layer()
    with pytest.raises(ValueError, match="LoRA"):
        layer.enable_lora(2)
    with pytest.raises(ValueError, match="LoRA-enabled"):
        layer.quantize("int8")
    fresh = ScaledEmbedding(V, D)
    fresh.build()
    with pytest.raises(ValueError, match=r"rank must be in \[1, 16\]"):
        fresh.enable_lora(17)
    fresh.quantize("int8")
    with pytest.raises(ValueError, match="int8"):
        fresh.enable_lora(2)


def test_lora_rows_add_their_update_to_those_rows_only():
    layer = _lora_rows_layer()
    low_rank = to_numpy(layer.lora_embeddings_a) @ to_numpy(layer.lora_embeddings_b)
    expected = to_numpy(layer._embeddings) + low_rank
    expected[ROWS] += to_numpy(layer.lora_rows)
    np.testing.assert_allclose(to_numpy(layer.embeddings), expected, rtol=1e-5)
    hidden = np.ones((1, 1, D), "float32")
    np.testing.assert_allclose(
        to_numpy(layer(hidden, reverse=True))[0], hidden[0] @ expected.T, rtol=1e-5
    )
    trainable = {v.path.split("/")[-1] for v in layer.trainable_weights}
    assert trainable == {"lora_embeddings_a", "lora_embeddings_b", "lora_rows"}
    assert to_numpy(layer.lora_row_ids).tolist() == ROWS


def test_lora_rows_learn_their_rows_and_no_other():
    layer = _lora_rows_layer()
    layer.lora_rows.assign(np.zeros((len(ROWS), D), "float32"))
    for factor in (layer.lora_embeddings_a, layer.lora_embeddings_b):
        factor.trainable = False  # The rows' own update alone.
    hidden = np.random.default_rng(3).normal(size=(4, 5, D)).astype("float32")
    targets = np.array([[2, 7, 40, 9, 2]] * 4, "int32")
    before = to_numpy(layer.embeddings)
    inputs = keras.Input((5, D))
    model = keras.Model(inputs, layer(inputs, reverse=True))
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    model.compile(optimizer=keras.optimizers.SGD(1.0), loss=loss)
    model.fit(hidden, targets, epochs=1, batch_size=4, verbose=0)
    moved = np.abs(to_numpy(layer.embeddings) - before).max(axis=1) > 0
    assert np.flatnonzero(moved).tolist() == ROWS


@pytest.mark.parametrize(
    "rows,message",
    [([], "at least one"), ([3, 3], "distinct"), ([1, V], rf"in \[0, {V}\)")],
)
def test_lora_rows_are_refused_unless_distinct_ids_of_the_table(rows, message):
    layer = ScaledEmbedding(V, D)
    layer.build()
    with pytest.raises(ValueError, match=message):
        layer.enable_lora(2, rows=rows)
    assert not layer.lora_enabled
