"""LabelSmoothedCrossEntropy (§5.4): values, masking, dtypes, serialization."""

from __future__ import annotations

import math

import keras
import numpy as np
import pytest

from keras_transformer.losses import (
    LabelSmoothedCrossEntropy,
    _label_logits,
    _label_logits_by_gather,
    _label_logits_by_mask,
    smoothed_token_losses,
)

VOCAB = 11


def reference_token_losses(labels, logits, epsilon):
    """NumPy: cross-entropy (log_softmax) against smoothed targets, per token."""
    logits = np.asarray(logits, np.float64)
    vocab = logits.shape[-1]
    shifted = logits - logits.max(-1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
    targets = np.full(logits.shape, epsilon / (vocab - 1))
    np.put_along_axis(targets, labels[..., None], 1.0 - epsilon, axis=-1)
    return -(targets * log_probs).sum(-1)


def reference_loss(labels, logits, epsilon, pad_id=0):
    """Mean of the reference token losses over non-pad tokens."""
    real = labels != pad_id
    return reference_token_losses(labels, logits, epsilon)[real].sum() / real.sum()


def random_batch(seed=0, batch=3, length=7, vocab=VOCAB):
    rng = np.random.default_rng(seed)
    logits = rng.normal(scale=3.0, size=(batch, length, vocab)).astype("float32")
    labels = rng.integers(1, vocab, (batch, length)).astype("int32")
    labels[0, 4:] = 0  # Rows of different real lengths.
    labels[2, 1:] = 0
    return labels, logits


def as_float(x):
    return float(keras.ops.convert_to_numpy(x))


@pytest.mark.parametrize("epsilon", [0.0, 0.1, 0.3])
def test_matches_numpy_reference(epsilon):
    labels, logits = random_batch()
    got = as_float(LabelSmoothedCrossEntropy(epsilon)(labels, logits))
    assert got == pytest.approx(reference_loss(labels, logits, epsilon), rel=1e-5)


def test_token_losses_match_reference_per_token():
    labels, logits = random_batch(seed=1)
    got = keras.ops.convert_to_numpy(smoothed_token_losses(labels, logits, 0.1))
    assert got.shape == labels.shape
    assert got.dtype == np.float32
    # Pad positions are included (masking is the caller's job).
    np.testing.assert_allclose(
        got, reference_token_losses(labels, logits, 0.1), rtol=1e-5
    )


def test_other_pad_id():
    labels, logits = random_batch(seed=2)
    labels = np.where(labels == 0, 7, labels)  # 7 is the pad now.
    loss = LabelSmoothedCrossEntropy(0.1, pad_id=7)
    got = as_float(loss(labels, logits))
    assert got == pytest.approx(reference_loss(labels, logits, 0.1, 7), rel=1e-5)


def test_pad_columns_change_nothing():
    labels, logits = random_batch(seed=3)
    loss = LabelSmoothedCrossEntropy(0.1)
    before = as_float(loss(labels, logits))
    rng = np.random.default_rng(99)
    extra = 5
    padded_labels = np.concatenate(
        [labels, np.zeros((labels.shape[0], extra), "int32")], axis=1
    )
    garbage = rng.normal(scale=50.0, size=(labels.shape[0], extra, VOCAB))
    padded_logits = np.concatenate([logits, garbage.astype("float32")], axis=1)
    # Arbitrary logits at the existing pad positions too.
    padded_logits[padded_labels == 0] = rng.normal(scale=50.0, size=(VOCAB,))
    after = as_float(loss(padded_labels, padded_logits))
    assert after == pytest.approx(before, rel=1e-6)


def test_all_pad_batch_is_zero_not_nan():
    logits = np.random.default_rng(4).normal(size=(2, 3, VOCAB)).astype("float32")
    got = as_float(LabelSmoothedCrossEntropy(0.1)(np.zeros((2, 3), "int32"), logits))
    assert got == 0.0


def test_epsilon_zero_equals_keras_sparse_cross_entropy_with_ignore_class():
    """Keras scales the kept tokens by total/valid under
    sum_over_batch_size, so with ignore_class it is the masked mean too."""
    labels, logits = random_batch(seed=5)
    assert (labels == 0).any() and (labels != 0).any()
    ours = as_float(LabelSmoothedCrossEntropy(0.0)(labels, logits))
    keras_loss = keras.losses.SparseCategoricalCrossentropy(
        from_logits=True, ignore_class=0
    )
    theirs = as_float(keras_loss(labels, logits))
    assert ours == pytest.approx(theirs, rel=1e-5)
    assert ours == pytest.approx(reference_loss(labels, logits, 0.0), rel=1e-5)


@pytest.mark.parametrize("epsilon", [0.1, 0.25])
def test_subtract_entropy_is_zero_for_the_smoothed_distribution(epsilon):
    labels, _ = random_batch(seed=6)
    off = epsilon / (VOCAB - 1)
    target = np.full(labels.shape + (VOCAB,), off)
    np.put_along_axis(target, labels[..., None], 1.0 - epsilon, axis=-1)
    logits = np.log(target).astype("float32")
    plain = as_float(LabelSmoothedCrossEntropy(epsilon)(labels, logits))
    entropy = -(1 - epsilon) * math.log(1 - epsilon) - epsilon * math.log(off)
    assert plain == pytest.approx(entropy, rel=1e-5)
    kl = as_float(
        LabelSmoothedCrossEntropy(epsilon, subtract_entropy=True)(labels, logits)
    )
    assert abs(kl) < 1e-5
    # Any other prediction scores higher (KL > 0).
    _, other = random_batch(seed=7)
    worse = LabelSmoothedCrossEntropy(epsilon, subtract_entropy=True)(labels, other)
    assert as_float(worse) > 0.01


def logits_gradient(function, logits):
    """d sum(function(logits)) / d logits, by the backend's autodiff."""
    if keras.backend.backend() == "jax":
        import jax

        return np.asarray(jax.grad(lambda z: function(z).sum())(logits))
    if keras.backend.backend() == "torch":
        import torch

        logits = torch.tensor(logits, requires_grad=True)
        function(logits).sum().backward()
        return logits.grad.numpy()
    import tensorflow as tf

    logits = tf.constant(logits)
    with tf.GradientTape() as tape:
        tape.watch(logits)
        total = tf.reduce_sum(function(logits))
    return tape.gradient(total, logits).numpy()


@pytest.mark.parametrize("epsilon", [0.0, 0.1])
def test_gradient_is_softmax_minus_smoothed_targets(epsilon):
    labels, logits = random_batch(seed=10)
    got = logits_gradient(lambda z: smoothed_token_losses(labels, z, epsilon), logits)
    shifted = np.asarray(logits, np.float64)
    shifted = shifted - shifted.max(-1, keepdims=True)
    softmax = np.exp(shifted) / np.exp(shifted).sum(-1, keepdims=True)
    targets = np.full(logits.shape, epsilon / (VOCAB - 1))
    np.put_along_axis(targets, labels[..., None], 1.0 - epsilon, axis=-1)
    np.testing.assert_allclose(got, softmax - targets, atol=1e-6)


@pytest.mark.parametrize(
    "label_logits", [_label_logits, _label_logits_by_gather, _label_logits_by_mask]
)
def test_label_logits_pick_exactly_the_label_entry(label_logits):
    # The masked sum (TensorFlow's way: the gather's gradient is a slow
    # scatter there) adds zeros to the label's logit, so both ways must
    # equal NumPy's gather bit for bit.
    labels, logits = random_batch(seed=12, vocab=32000)
    logits = logits * 7.0
    got = keras.ops.convert_to_numpy(label_logits(logits, labels))
    expected = np.take_along_axis(logits, labels[..., None], axis=-1)[..., 0]
    np.testing.assert_array_equal(got, expected)


def test_large_vocabulary_keeps_float32_precision():
    # The loss sums all V logits and subtracts V * logsumexp: with a 32k
    # vocabulary and large logits that difference must not lose the value.
    labels, logits = random_batch(seed=11, vocab=32000)
    logits = logits * 5.0
    got = keras.ops.convert_to_numpy(smoothed_token_losses(labels, logits, 0.1))
    np.testing.assert_allclose(
        got, reference_token_losses(labels, logits, 0.1), rtol=1e-6
    )


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_low_precision_logits_give_finite_float32(dtype):
    labels, logits = random_batch(seed=8)
    logits = logits * 20.0  # exp() of these overflows in float16.
    low = keras.ops.cast(logits, dtype)
    token_losses = smoothed_token_losses(labels, low, 0.1)
    assert keras.backend.standardize_dtype(token_losses.dtype) == "float32"
    assert np.isfinite(keras.ops.convert_to_numpy(token_losses)).all()
    value = LabelSmoothedCrossEntropy(0.1)(labels, low)
    assert keras.backend.standardize_dtype(value.dtype) == "float32"
    got = as_float(value)
    assert math.isfinite(got)
    rounded = keras.ops.convert_to_numpy(keras.ops.cast(low, "float32"))
    assert got == pytest.approx(reference_loss(labels, rounded, 0.1), rel=1e-4)


def test_mixed_precision_policy_keeps_float32(keras_state):
    # keras_state: the float32 policy again afterwards, for the next module.
    keras.config.set_dtype_policy("mixed_float16")
    labels, logits = random_batch(seed=9)
    value = LabelSmoothedCrossEntropy(0.1)(labels, logits.astype("float16"))
    assert keras.backend.standardize_dtype(value.dtype) == "float32"
    assert math.isfinite(as_float(value))


def test_config_round_trip():
    loss = LabelSmoothedCrossEntropy(0.2, pad_id=5, subtract_entropy=True, name="ls")
    config = loss.get_config()
    assert config["epsilon"] == 0.2
    assert config["pad_id"] == 5
    assert config["subtract_entropy"] is True
    assert config["name"] == "ls"
    assert "reduction" not in config
    clone = LabelSmoothedCrossEntropy.from_config(config)
    assert clone.get_config() == config
    labels, logits = random_batch(seed=10)
    assert as_float(clone(labels, logits)) == as_float(loss(labels, logits))


def test_keras_serialization_round_trip():
    loss = LabelSmoothedCrossEntropy(0.15, subtract_entropy=True)
    serialized = keras.saving.serialize_keras_object(loss)
    restored = keras.saving.deserialize_keras_object(serialized)
    assert type(restored) is LabelSmoothedCrossEntropy
    assert restored.get_config() == loss.get_config()
    assert keras.losses.get(serialized).get_config() == loss.get_config()


def test_reduction_argument_cannot_double_average():
    labels, logits = random_batch(seed=11)
    loss = LabelSmoothedCrossEntropy(0.1, reduction="sum_over_batch_size")
    assert as_float(loss(labels, logits)) == pytest.approx(
        reference_loss(labels, logits, 0.1), rel=1e-5
    )


@pytest.mark.parametrize("epsilon", [-0.1, 1.0, 1.5])
def test_epsilon_out_of_range_raises(epsilon):
    with pytest.raises(ValueError, match="epsilon"):
        LabelSmoothedCrossEntropy(epsilon)
