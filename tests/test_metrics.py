"""MaskedTokenAccuracy: per-token accuracy over non-pad targets."""

from __future__ import annotations

import keras
import numpy as np
import pytest

from keras_transformer.metrics import MaskedTokenAccuracy

VOCAB = 9


def logits_predicting(predicted):
    """Logits whose argmax is `predicted` (B, T)."""
    predicted = np.asarray(predicted)
    logits = np.zeros(predicted.shape + (VOCAB,), "float32")
    np.put_along_axis(logits, predicted[..., None], 5.0, axis=-1)
    return logits


def result(metric):
    return float(keras.ops.convert_to_numpy(metric.result()))


def test_counts_only_non_pad_tokens():
    labels = np.array([[4, 5, 6, 0, 0], [7, 0, 0, 0, 0]])
    # Pad positions predicted as pad (0 == label): they must not count as
    # correct; real tokens: 4 right, 5 wrong, 6 right, 7 wrong.
    predicted = np.array([[4, 1, 6, 0, 0], [8, 0, 0, 0, 0]])
    metric = MaskedTokenAccuracy()
    metric.update_state(labels, logits_predicting(predicted))
    assert result(metric) == pytest.approx(2 / 4)


def test_pad_predictions_wrong_do_not_count_either():
    labels = np.array([[4, 5, 0, 0]])
    predicted = np.array([[4, 5, 3, 3]])  # Wrong only at pad positions.
    metric = MaskedTokenAccuracy()
    metric.update_state(labels, logits_predicting(predicted))
    assert result(metric) == pytest.approx(1.0)


def test_accumulates_per_token_across_batches():
    metric = MaskedTokenAccuracy()
    # Batch 1: 1 real token, correct (ratio 1.0).
    metric.update_state(np.array([[5, 0, 0, 0]]), logits_predicting([[5, 0, 0, 0]]))
    # Batch 2: 4 real tokens, 1 correct (ratio 0.25).
    labels = np.array([[4, 5, 6, 7], [0, 0, 0, 0]])
    predicted = np.array([[4, 1, 1, 1], [0, 0, 0, 0]])
    metric.update_state(labels, logits_predicting(predicted))
    # Total correct / total real = 2 / 5, not (1.0 + 0.25) / 2.
    assert result(metric) == pytest.approx(2 / 5)


def test_probabilities_work_like_logits():
    labels = np.array([[4, 5, 6, 0]])
    logits = np.random.default_rng(0).normal(size=(1, 4, VOCAB)).astype("float32")
    probabilities = keras.ops.convert_to_numpy(keras.ops.softmax(logits))
    a, b = MaskedTokenAccuracy(), MaskedTokenAccuracy()
    a.update_state(labels, logits)
    b.update_state(labels, probabilities)
    assert result(a) == result(b)
    expected = (logits.argmax(-1) == labels)[labels != 0].mean()
    assert result(a) == pytest.approx(expected)


def test_agrees_with_argmax_on_many_random_tokens():
    rng = np.random.default_rng(1)
    logits = rng.normal(size=(8, 50, VOCAB)).astype("float32")
    labels = rng.integers(1, VOCAB, (8, 50))
    metric = MaskedTokenAccuracy()
    metric.update_state(labels, logits)
    expected = (logits.argmax(-1) == labels).mean()
    assert 0.05 < expected < 0.3  # some right, most wrong: a real check
    assert result(metric) == pytest.approx(expected)


def test_a_label_tied_for_the_maximum_counts_as_correct():
    logits = np.zeros((1, 2, VOCAB), "float32")
    logits[0, :, 3] = logits[0, :, 6] = 2.0  # argmax would say 3 for both
    metric = MaskedTokenAccuracy()
    metric.update_state(np.array([[6, 4]]), logits)
    assert result(metric) == pytest.approx(0.5)


def test_reset_state():
    metric = MaskedTokenAccuracy()
    metric.update_state(np.array([[4, 5]]), logits_predicting([[4, 5]]))
    assert result(metric) == pytest.approx(1.0)
    metric.reset_state()
    assert result(metric) == 0.0
    metric.update_state(np.array([[4, 5]]), logits_predicting([[1, 5]]))
    assert result(metric) == pytest.approx(0.5)


def test_custom_pad_id():
    labels = np.array([[4, 5, 8, 8]])
    predicted = np.array([[4, 1, 8, 8]])
    metric = MaskedTokenAccuracy(pad_id=8)
    metric.update_state(labels, logits_predicting(predicted))
    assert result(metric) == pytest.approx(0.5)


def test_config_round_trip():
    metric = MaskedTokenAccuracy(pad_id=3, name="acc")
    config = metric.get_config()
    assert config["pad_id"] == 3
    assert config["name"] == "acc"
    clone = MaskedTokenAccuracy.from_config(config)
    assert clone.get_config() == config
    restored = keras.saving.deserialize_keras_object(
        keras.saving.serialize_keras_object(metric)
    )
    assert type(restored) is MaskedTokenAccuracy
    assert restored.pad_id == 3
    assert restored.name == "acc"


def test_in_compiled_evaluate():
    """As a compiled metric: the epoch value is per token over all batches."""
    labels = np.array([[5, 0, 0], [4, 5, 6], [4, 5, 0], [6, 0, 0]], "int32")
    predicted = np.array([[5, 0, 0], [1, 1, 1], [4, 1, 0], [6, 0, 0]])
    logits = logits_predicting(predicted)
    inputs = keras.Input((3, VOCAB))
    model = keras.Model(inputs, keras.layers.Identity()(inputs))
    model.compile(
        loss=lambda y_true, y_pred: keras.ops.sum(y_pred) * 0.0,
        metrics=[MaskedTokenAccuracy()],
    )
    results = model.evaluate(logits, labels, batch_size=2, verbose=0, return_dict=True)
    # Real tokens: 1 + 3 + 2 + 1 = 7; correct: 1 + 0 + 1 + 1 = 3.
    assert results["token_accuracy"] == pytest.approx(3 / 7)
