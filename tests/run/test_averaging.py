"""Checkpoint averaging: `average_checkpoints` and `keras-transformer average`."""

from __future__ import annotations

import shutil

import keras
import numpy as np
import pytest

from keras_transformer import build_transformer
from keras_transformer.cli import main
from keras_transformer.config import EOS_ID, PAD_ID
from keras_transformer.data.pipeline import DataPosition
from keras_transformer.decoding.generator import SequenceGenerator
from keras_transformer.run.averaging import average_checkpoints
from keras_transformer.run.checkpoints import save_checkpoint
from tests.helpers import small_config


def tiny_config(**overrides):
    values = dict(
        vocab_size=30,
        d_model=16,
        d_ff=32,
        num_heads=2,
        num_encoder_layers=1,
        num_decoder_layers=1,
    )
    values.update(overrides)
    return small_config(**values)


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """Three .keras files of one architecture with different weights:
    (paths, list of each file's weights as float32 arrays)."""
    folder = tmp_path_factory.mktemp("checkpoints")
    # Module fixtures run before the per-test seed: seed here.
    keras.utils.set_random_seed(0)
    model = build_transformer(tiny_config())
    base = model.get_weights()
    rng = np.random.default_rng(0)
    paths, weights = [], []
    for index in range(3):
        values = [
            (w + rng.normal(scale=0.5, size=w.shape)).astype(w.dtype) for w in base
        ]
        model.set_weights(values)
        path = folder / f"model-{index}.keras"
        model.save(path)
        paths.append(path)
        weights.append(values)
    return paths, weights


def test_average_of_copies_of_one_checkpoint_is_that_checkpoint(checkpoints):
    paths, weights = checkpoints
    averaged = average_checkpoints([paths[1]] * 3)
    result = averaged.get_weights()
    assert len(result) == len(weights[1])
    for got, expected in zip(result, weights[1]):
        assert got.dtype == expected.dtype
        np.testing.assert_array_equal(got, expected)


def test_average_is_the_elementwise_mean(checkpoints):
    paths, weights = checkpoints
    averaged = average_checkpoints(paths)
    assert averaged.config == tiny_config()
    for index, got in enumerate(averaged.get_weights()):
        expected = np.mean([np.float64(w[index]) for w in weights], axis=0)
        np.testing.assert_allclose(got, expected, atol=1e-6, rtol=0)
        # Not just one of the inputs.
        assert not np.array_equal(got, weights[0][index])


def test_averaged_model_saves_loads_and_decodes(checkpoints, tmp_path):
    paths, _ = checkpoints
    averaged = average_checkpoints(paths[:2])
    path = tmp_path / "averaged.keras"
    averaged.save(path)
    loaded = keras.saving.load_model(path, compile=False)
    for got, expected in zip(loaded.get_weights(), averaged.get_weights()):
        np.testing.assert_array_equal(got, expected)
    source = np.array([[5, 6, 7], [8, 0, 0]], np.int32)
    generator = SequenceGenerator(loaded, beam_size=2, max_extra_length=2, jit=False)
    sequences, scores = generator(source)
    assert sequences.shape == (2, 2, 5)
    assert scores.shape == (2, 2)
    assert np.all(np.isfinite(scores))
    assert np.all((sequences >= 0) & (sequences < 30))
    limits = [5, 3]
    for row, limit in enumerate(limits):
        for hypothesis in sequences[row]:
            ends = np.flatnonzero(hypothesis == EOS_ID)
            end = ends[0] + 1 if len(ends) else limit
            assert end <= limit
            assert np.all(hypothesis[end:] == PAD_ID)


def _first_shape_mismatch(config_a, config_b):
    a, b = build_transformer(config_a), build_transformer(config_b)
    for va, vb in zip(a.weights, b.weights):
        if tuple(va.shape) != tuple(vb.shape):
            return va.path
    raise AssertionError("the configs have the same shapes")


def test_shape_mismatch_names_file_and_weight(checkpoints, tmp_path):
    paths, _ = checkpoints
    other_config = tiny_config(d_ff=48)
    other = tmp_path / "wider-ffn.keras"
    build_transformer(other_config).save(other)
    name = _first_shape_mismatch(tiny_config(), other_config)
    assert "feed_forward" in name
    with pytest.raises(ValueError) as error:
        average_checkpoints([paths[0], other])
    message = str(error.value)
    assert str(other) in message
    assert name in message


def test_weight_count_mismatch_names_file(checkpoints, tmp_path):
    paths, _ = checkpoints
    other = tmp_path / "deeper.keras"
    build_transformer(tiny_config(num_decoder_layers=2)).save(other)
    with pytest.raises(ValueError, match="weights") as error:
        average_checkpoints([paths[0], other])
    assert str(other) in str(error.value)


def test_empty_checkpoint_list_is_an_error():
    with pytest.raises(ValueError, match="at least one"):
        average_checkpoints([])


# --- keras-transformer average ---------------------------------------------------


@pytest.fixture
def run_dir(checkpoints, tmp_path):
    """R/checkpoints with the three models as the checkpoints of steps 1..3
    (and an unfinished temporary file, which is not a checkpoint)."""
    _, weights = checkpoints
    folder = tmp_path / "run" / "checkpoints"
    model = build_transformer(tiny_config())
    model.compile(optimizer="adam", loss="mse")
    model.optimizer.build(model.trainable_variables)
    for step, values in zip((1, 2, 3), weights):
        model.set_weights(values)
        save_checkpoint(model, folder, step=step, run_id="run", position=DataPosition())
    shutil.copy(folder / "ckpt-00000001.keras", folder / ".ckpt-00000004.partial.keras")
    return tmp_path / "run"


def test_cli_average_last_two(run_dir, checkpoints, capsys):
    _, weights = checkpoints
    assert main(["average", "--run-dir", str(run_dir), "--last", "2"]) == 0
    output = run_dir / "averaged-last-2.keras"
    assert output.exists()
    printed = capsys.readouterr().out
    assert "ckpt-00000002.keras, ckpt-00000003.keras" in printed
    assert str(output) in printed
    loaded = keras.saving.load_model(output, compile=False)
    for index, got in enumerate(loaded.get_weights()):
        expected = (np.float64(weights[1][index]) + weights[2][index]) / 2
        np.testing.assert_allclose(got, expected, atol=1e-6, rtol=0)


def test_cli_average_more_checkpoints_than_exist(run_dir, capsys):
    assert main(["average", "--run-dir", str(run_dir), "--last", "5"]) == 2
    error = capsys.readouterr().err
    assert "--last 5" in error
    assert "only 3 checkpoints" in error
    assert not (run_dir / "averaged-last-5.keras").exists()
