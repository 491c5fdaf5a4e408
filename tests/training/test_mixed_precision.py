"""Forward and backward passes under mixed_float16 and mixed_bfloat16."""

from __future__ import annotations

import keras
import numpy as np
import pytest

from keras_transformer import build_transformer
from tests.helpers import (
    predict_logits,
    shifted_labels,
    small_config,
    to_numpy,
    train_one_step,
)

pytestmark = pytest.mark.usefixtures("keras_state")


# Row 2 of the source is all padding: its encoder self-attention and every
# cross-attention query over it see no key at all.
SOURCE = np.array([[5, 6, 7, 8, 9], [10, 11, 0, 0, 0], [0, 0, 0, 0, 0]], "int32")
TARGET = np.array([[2, 20, 21, 22], [2, 23, 0, 0], [2, 24, 25, 0]], "int32")


@pytest.fixture
def policy(request):
    keras.config.set_dtype_policy(request.param)
    try:
        yield request.param
    finally:
        keras.config.set_dtype_policy("float32")


@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"], indirect=True)
def test_forward_and_training_step(policy):
    compute_dtype = policy.split("_")[1]
    config = small_config(num_encoder_layers=1, num_decoder_layers=1)
    model = build_transformer(config)
    assert model.dtype_policy.name == policy
    assert model.encoder_blocks[0].compute_dtype == compute_dtype
    assert model.decoder_blocks[0].cross_attention.compute_dtype == compute_dtype
    assert all(w.dtype == "float32" for w in model.weights)
    assert model.output.dtype == "float32"

    before = [to_numpy(w).copy() for w in model.trainable_weights]
    inputs = {"source_ids": SOURCE, "target_ids": TARGET}
    loss = train_one_step(model, inputs, shifted_labels(TARGET))
    assert np.isfinite(loss)
    if policy == "mixed_float16":
        assert isinstance(model.optimizer, keras.optimizers.LossScaleOptimizer)
    after = [to_numpy(w) for w in model.trainable_weights]
    assert all(np.all(np.isfinite(w)) for w in after)
    # Loss scaling skips a float16 step whose gradient is not finite; this
    # first step must have been applied.
    changed = [not np.array_equal(a, b) for a, b in zip(after, before)]
    assert sum(changed) > len(changed) // 2

    logits = predict_logits(model, SOURCE, TARGET)
    assert logits.dtype == np.float32
    assert logits.shape == (3, 4, 50)
    assert np.all(np.isfinite(logits))


@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"], indirect=True)
def test_untied_output_projection_stays_float32(policy):
    config = small_config(
        num_encoder_layers=1,
        num_decoder_layers=1,
        share_embeddings=False,
        tie_output_projection=False,
    )
    model = build_transformer(config)
    assert model.get_layer("output_projection").compute_dtype == "float32"
    assert model.encoder_blocks[0].compute_dtype == policy.split("_")[1]
    assert model.output.dtype == "float32"
