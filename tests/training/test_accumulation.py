"""One optimizer update = k accumulated batches, normalised per token.

Review findings: the warmup schedule ran k times too fast under gradient
accumulation, and the loss was normalised per batch (and logged per row)
instead of per real target token of the update.
"""

from __future__ import annotations

import functools

import keras
import numpy as np
import pytest

from keras_transformer import (
    LabelSmoothedCrossEntropy,
    TokenCrossEntropy,
    TokenPerplexity,
    TransformerSchedule,
    build_transformer,
    transformer_optimizer,
)
from keras_transformer.config import BOS_ID, EOS_ID, PAD_ID
from keras_transformer.data.pipeline import token_weights
from keras_transformer.losses import smoothed_token_losses
from tests.helpers import small_config

pytestmark = pytest.mark.usefixtures("keras_state")

EPSILON = 0.1


def schedule_at(step_num, d_model=16, warmup=4):
    """The paper's formula at its 1-based step_num."""
    return d_model**-0.5 * min(step_num**-0.5, step_num * warmup**-1.5)


# --- the schedule counts updates ----------------------------------------------------


@pytest.mark.parametrize("accumulation", [1, 2, 3, 4])
def test_learning_rate_at_update_u_is_the_schedule_at_step_num_u(accumulation):
    """Adam with a constant gradient moves each weight by exactly the
    learning rate of the update (m_hat / sqrt(v_hat) = 1), so the weight's
    path reads off the rate every update used."""
    optimizer = transformer_optimizer(
        TransformerSchedule(16, warmup_steps=4),
        gradient_accumulation_steps=accumulation,
    )
    weight = keras.Variable(np.zeros((3,), "float32"))
    optimizer.build([weight])
    gradient = keras.ops.ones((3,))
    values = []
    for _ in range(8 * accumulation):
        optimizer.apply([gradient], [weight])
        values.append(float(keras.ops.convert_to_numpy(weight)[0]))
    moves = -np.diff([0.0] + values)
    for batch, move in enumerate(moves, start=1):
        if batch % accumulation:
            assert move == 0.0  # Accumulating: no update yet.
            continue
        update = batch // accumulation
        np.testing.assert_allclose(move, schedule_at(update), rtol=1e-5)
    assert int(keras.ops.convert_to_numpy(optimizer.iterations)) == 8


# --- an update of k batches equals one batch of all their rows -----------------------


def make_batches(seed=0):
    """Three batches of different shapes and very different token counts."""
    rng = np.random.default_rng(seed)
    batches = []
    for rows, length, fill in ((4, 6, 0.9), (2, 9, 0.95), (1, 5, 0.1)):
        lengths = np.maximum(1, (rng.random(rows) * fill * (length - 1)).astype(int))
        source = np.zeros((rows, length), "int32")
        target = np.zeros((rows, length), "int32")
        labels = np.zeros((rows, length), "int32")
        for row, n in enumerate(lengths):
            words = rng.integers(4, 50, n)
            source[row, :n] = rng.integers(4, 50, n)
            target[row, : n + 1] = [BOS_ID, *words]
            labels[row, : n + 1] = [*words, EOS_ID]
        batches.append(({"source_ids": source, "target_ids": target}, labels))
    return batches


def merge(batches):
    """All rows of `batches` in one batch padded to the longest length."""
    length = max(labels.shape[1] for _, labels in batches)

    def pad(array):
        return np.pad(array, ((0, 0), (0, length - array.shape[1])))

    return (
        {
            key: np.concatenate([pad(x[key]) for x, _ in batches])
            for key in ("source_ids", "target_ids")
        },
        np.concatenate([pad(labels) for _, labels in batches]),
    )


# One encoder and one decoder layer: what is checked is the optimizer's
# arithmetic and the loss's normalisation, which depth does not change. JAX
# compiles a train step per batch shape and per optimizer (ten programs in
# this module): with two layers each it cost 78 s of the JAX suite.
ONE_LAYER = dict(num_encoder_layers=1, num_decoder_layers=1)


def initial_model():
    keras.utils.set_random_seed(3)
    return build_transformer(small_config(dropout_rate=0.0, **ONE_LAYER))


def trained_weights(batches, optimizer, accumulation, weighted=True):
    model = initial_model()
    # TensorFlow would trace a graph per batch shape (about 20 s each on
    # two cores); eager runs the same optimizer code. JAX stays compiled.
    model.compile(
        optimizer=optimizer,
        loss=LabelSmoothedCrossEntropy(EPSILON),
        run_eagerly=keras.backend.backend() == "tensorflow",
    )
    tokens = sum(int((labels != PAD_ID).sum()) for _, labels in batches)
    for inputs, labels in batches:
        weights = token_weights(labels, tokens, accumulation) if weighted else None
        model.train_on_batch(inputs, labels, sample_weight=weights)
    return [keras.ops.convert_to_numpy(w) for w in model.trainable_weights]


def optimizers(accumulation):
    steps = accumulation if accumulation > 1 else None
    return {
        # SGD shows any error of scale (Adam's first step hides it).
        "sgd": keras.optimizers.SGD(1.0, gradient_accumulation_steps=steps),
        "transformer_adam": transformer_optimizer(
            TransformerSchedule(32, 4), gradient_accumulation_steps=steps
        ),
    }


@functools.cache
def one_batch_of_all_rows(name, weighted=True):
    """The weights after one update on `merge(make_batches())` (computed
    once: the SGD one serves both optimizers' tests)."""
    return trained_weights([merge(make_batches())], optimizers(1)[name], 1, weighted)


# The paper's optimizer on every backend; plain SGD (the same accumulation,
# a simpler update) in the neutral suite, for CI time.
@pytest.mark.parametrize(
    "name", [pytest.param("sgd", marks=pytest.mark.backend_neutral), "transformer_adam"]
)
def test_accumulated_update_equals_one_batch_of_all_rows(name):
    batches = make_batches()
    counts = [int((labels != PAD_ID).sum()) for _, labels in batches]
    assert max(counts) > 3 * min(counts)  # Unequal token counts.
    accumulated = trained_weights(batches, optimizers(3)[name], 3)
    single = one_batch_of_all_rows(name)
    unweighted = one_batch_of_all_rows(name, weighted=False)
    model = initial_model()
    paths = [w.path for w in model.trainable_weights]
    initial = [keras.ops.convert_to_numpy(w) for w in model.trainable_weights]
    checked = [np.ones(w.shape, bool) for w in initial]
    if name != "sgd":
        # Adam's first update is lr * g / (|g| + 1e-9): where |g| is within
        # a few orders of epsilon (the key biases' true gradient is 0, as
        # softmax ignores a shift shared by all keys) it turns rounding noise
        # into steps of any size. SGD (step -g) checks those elements; Adam
        # those whose gradient is at least 1000 epsilon.
        sgd = one_batch_of_all_rows("sgd")
        checked = [np.abs(i - s) >= 1e-6 for i, s in zip(initial, sgd)]
        assert sum(m.sum() for m in checked) > 0.9 * sum(m.size for m in checked)
    for path, mask, a, b, c in zip(
        paths, checked, accumulated, single, unweighted, strict=True
    ):
        np.testing.assert_allclose(a[mask], b[mask], atol=1e-5, rtol=0, err_msg=path)
        np.testing.assert_allclose(b[mask], c[mask], atol=1e-6, rtol=0, err_msg=path)
    assert any(not np.allclose(a, i) for a, i in zip(accumulated, initial))


def test_loss_with_token_weights_is_the_weighted_sum():
    rng = np.random.default_rng(0)
    labels = np.array([[5, 6, EOS_ID, 0], [7, EOS_ID, 0, 0]], "int32")
    logits = rng.normal(size=(2, 4, 12)).astype("float32")
    weights = rng.random((2, 4)).astype("float32")
    loss = LabelSmoothedCrossEntropy(EPSILON)
    token = keras.ops.convert_to_numpy(smoothed_token_losses(labels, logits, EPSILON))
    real = labels != PAD_ID
    expected = float((token * weights * real).sum())
    got = float(keras.ops.convert_to_numpy(loss(labels, logits, weights)))
    np.testing.assert_allclose(got, expected, rtol=1e-6)
    per_token = float((token * real).sum() / real.sum())
    got = float(keras.ops.convert_to_numpy(loss(labels, logits)))
    np.testing.assert_allclose(got, per_token, rtol=1e-6)


# --- logged loss and perplexity are per token ------------------------------------


class Batches(keras.utils.PyDataset):
    def __init__(self, batches):
        super().__init__()
        self.batches = batches

    def __len__(self):
        return len(self.batches)

    def __getitem__(self, index):
        return self.batches[index]


def test_evaluate_reports_per_token_loss_and_perplexity():
    """Batches of 4 long rows and of 16 one-token rows: a row-weighted mean
    of per-batch losses (Keras's own `loss`) differs from the per-token
    value."""
    keras.utils.set_random_seed(1)
    config = small_config(dropout_rate=0.0, **ONE_LAYER)
    model = build_transformer(config)
    model.compile(
        optimizer="adam",
        loss=LabelSmoothedCrossEntropy(EPSILON),
        metrics=[TokenCrossEntropy(EPSILON), TokenPerplexity()],
    )
    rng = np.random.default_rng(2)
    batches = []
    for rows, length, real in ((4, 12, 11), (16, 4, 1)):
        ids = rng.integers(4, 50, (rows, length)).astype("int32")
        labels = ids.copy()
        labels[:, real:] = PAD_ID
        batches.append(({"source_ids": ids, "target_ids": ids}, labels))

    results = model.evaluate(Batches(batches), return_dict=True, verbose=0)
    losses, nll, counts = [], [], []
    for inputs, labels in batches:
        logits = model(inputs)
        real = labels != PAD_ID
        smoothed = keras.ops.convert_to_numpy(
            smoothed_token_losses(labels, logits, EPSILON)
        )
        plain = keras.ops.convert_to_numpy(smoothed_token_losses(labels, logits, 0))
        losses.append((smoothed * real).sum())
        nll.append((plain * real).sum())
        counts.append(real.sum())
    per_token = sum(losses) / sum(counts)
    np.testing.assert_allclose(results["loss"], per_token, rtol=1e-5)
    np.testing.assert_allclose(
        results["perplexity"], np.exp(sum(nll) / sum(counts)), rtol=1e-5
    )
    per_batch = [loss / count for loss, count in zip(losses, counts)]
    row_weighted = (4 * per_batch[0] + 16 * per_batch[1]) / 20
    assert abs(row_weighted - per_token) > 1e-3  # The case tells them apart.
