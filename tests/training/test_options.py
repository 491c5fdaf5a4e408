"""`TrainOptions` refuses settings that could not train as asked, before any
data is read."""

from __future__ import annotations

import pytest

from keras_transformer.training.options import TrainOptions


def test_max_position_without_learned_positions_is_refused_as_without_effect():
    with pytest.raises(ValueError) as info:
        TrainOptions(overrides={"max_position": 1})
    message = str(info.value)
    assert "--set max_position=1 has no effect" in message
    assert "sinusoidal" in message and "position_encoding=learned" in message


@pytest.mark.parametrize("limit", [1, 127])
def test_learned_positions_shorter_than_the_training_sequences_are_refused(limit):
    overrides = {"position_encoding": "learned", "max_position": limit}
    with pytest.raises(ValueError) as info:
        TrainOptions(max_length=128, overrides=overrides)
    message = str(info.value)
    assert f"--set max_position={limit}" in message
    assert "--max-length 128" in message and "max_position >= 128" in message


def test_learned_positions_that_cover_the_training_sequences_are_accepted():
    overrides = {"position_encoding": "learned", "max_position": 128}
    assert TrainOptions(max_length=128, overrides=overrides).overrides == overrides
    # The preset's own limit (1,024) against a longer --max-length.
    with pytest.raises(ValueError, match=r"max_position=1024 \(the tiny preset's\)"):
        TrainOptions(max_length=2048, overrides={"position_encoding": "learned"})
