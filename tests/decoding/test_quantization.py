"""int8 inference (`--quantize int8`): Keras's int8 projections and the
shared embedding's own int8 table, against float32 on every backend."""

from __future__ import annotations

import keras
import numpy as np
import pytest

from keras_transformer.config import BOS_ID
from keras_transformer.decoding.quantization import (
    check_quantize_mode,
    quantize_model,
    quantized_layers,
)
from keras_transformer.layers import ScaledEmbedding
from keras_transformer.model import build_transformer
from keras_transformer.run.directory import RunDirectory
from tests.helpers import (
    predict_logits,
    short_pairs,
    small_config,
    to_numpy,
)

V, D = 50, 16


def _embedding():
    keras.utils.set_random_seed(3)
    layer = ScaledEmbedding(V, D)
    layer.build()
    return layer


def test_int8_embedding_rows_are_within_half_a_step_of_float():
    layer = _embedding()
    table = to_numpy(layer.embeddings).copy()
    ids = np.arange(V, dtype="int32")[None]
    layer.quantize("int8")
    assert layer.int8 and str(layer.embeddings.dtype) == "int8"
    # One step of row r is max|row r| / 127; rounding moves a value half of it.
    step = np.abs(table).max(axis=1, keepdims=True) / 127
    looked_up = to_numpy(layer(ids))[0] / np.sqrt(D)
    assert np.all(np.abs(looked_up - table) <= step / 2 + 1e-6)


def test_int8_output_projection_matches_the_float_logits_closely():
    layer = _embedding()
    table = to_numpy(layer.embeddings).copy()
    hidden = np.random.default_rng(0).normal(size=(2, 3, D)).astype("float32")
    exact = hidden @ table.T
    layer.quantize("int8")
    logits = to_numpy(layer(hidden, reverse=True))
    assert logits.dtype == np.float32 and logits.shape == (2, 3, V)
    # Both factors are rounded to 1/127 of their largest entry per row:
    # the error of a product is bounded by the two steps times the sizes.
    hidden_step = np.abs(hidden).max(-1, keepdims=True) / 127
    table_step = np.abs(table).max(-1) / 127
    bound = (
        hidden_step * np.abs(table).sum(-1)
        + np.abs(hidden).sum(-1, keepdims=True) * table_step
    ) / 2 + hidden_step * table_step * D / 4
    assert np.all(np.abs(logits - exact) <= bound + 1e-5)
    assert not np.array_equal(logits, exact)  # Quantized, not a float path.


def test_quantizing_twice_or_to_another_mode_is_refused():
    layer = _embedding()
    with pytest.raises(NotImplementedError, match="int8 only"):
        layer.quantize("int4")
    layer.quantize("int8")
    with pytest.raises(ValueError, match="already quantized"):
        layer.quantize("int8")


def test_an_unknown_mode_names_the_flag_and_the_modes():
    with pytest.raises(ValueError, match=r"--quantize 'int4' .* use one of int8"):
        check_quantize_mode("int4")
    check_quantize_mode(None)  # float32: nothing to check.


def test_every_projection_and_the_shared_embedding_become_int8():
    config = small_config(vocab_size=V)
    model = build_transformer(config)
    dense = [
        layer
        for layer in model._flatten_layers()
        if isinstance(layer, keras.layers.Dense)
    ]
    assert quantize_model(model, "int8") is model
    assert quantized_layers(model) == len(dense) + 1
    kernels = [w for w in model.weights if w.path.endswith(("kernel", "embeddings"))]
    assert kernels and {str(w.dtype) for w in kernels} == {"int8"}


def test_a_mixed_precision_model_is_refused(keras_state):
    keras.config.set_dtype_policy("mixed_bfloat16")
    model = build_transformer(small_config(vocab_size=V))
    with pytest.raises(ValueError, match="needs a float32 model"):
        quantize_model(model, "int8")


def _teacher_forced(model, tokenizer, pairs):
    sources, _ = tokenizer.tokenize([source for source, _ in pairs])
    targets, _ = tokenizer.tokenize([target for _, target in pairs], add_eos=True)
    bos = np.full((len(pairs), 1), BOS_ID, "int32")
    targets = np.concatenate([bos, targets], axis=1)
    logits = predict_logits(model, sources, targets[:, :-1]).astype("float64")
    log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    return log_probs, targets[:, 1:] != 0


@pytest.mark.slow
def test_a_trained_model_predicts_the_same_tokens_in_int8(trained_run):
    """On the session's trained run (tests/conftest.py: 300 updates on this
    suite's backend), read-only: each side opens its own copy of the model."""
    pairs = short_pairs("valid", 12)
    float_run = RunDirectory(trained_run).open_for_inference()
    expected, real = _teacher_forced(float_run.model, float_run.tokenizer, pairs)
    run = RunDirectory(trained_run).open_for_inference()
    quantize_model(run.model, "int8")
    actual, _ = _teacher_forced(run.model, run.tokenizer, pairs)
    # The stated tolerance (docs/int8.md): log-probabilities within
    # 0.05 nats on average, and the same most likely token almost everywhere.
    difference = np.abs(actual - expected)[real]
    assert difference.mean() < 0.05
    agreement = (actual.argmax(-1) == expected.argmax(-1))[real].mean()
    assert agreement >= 0.95
    # The compiled search on an int8 model: tests/cli/test_decoding_commands.py.
