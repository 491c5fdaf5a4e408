"""`TransformerPreprocessor`: the batches `train` makes, from text pairs."""

from __future__ import annotations

import numpy as np
import pytest

from keras_transformer.data.text_files import DataError, ParallelCorpus
from keras_transformer.task.preprocessor import TransformerPreprocessor
from keras_transformer.training import batches as training_batches
from keras_transformer.training.options import TrainOptions


def test_the_batches_are_trains(pairs, tokenizer):
    source, target = pairs
    options = TrainOptions(tokens_per_batch=256, max_length=32, seed=3)
    corpus = ParallelCorpus(source, target, "pairs", list(range(1, 241)))
    expected = training_batches.prepare_batches(options, {"train": corpus}, tokenizer)
    got = TransformerPreprocessor(
        tokenizer, tokens_per_batch=256, max_length=32, seed=3
    ).batches((source, target))
    assert len(got.train) == len(expected.train) > 3
    for epoch in (0, 1):
        expected.train.set_epoch(epoch)
        got.train.set_epoch(epoch)
        for index in range(len(got.train)):
            a, b = expected.train[index], got.train[index]
            for name in ("source_ids", "target_ids"):
                np.testing.assert_array_equal(a[0][name], b[0][name])
            np.testing.assert_array_equal(a[1], b[1])
            np.testing.assert_array_equal(a[2], b[2])


def test_long_training_pairs_are_dropped_and_said(tokenizer, capsys):
    long = " ".join(["the old man likes the garden"] * 10)
    preprocessor = TransformerPreprocessor(
        tokenizer, max_length=32, tokens_per_batch=32
    )
    preprocessor.batches((["a dog.", long], ["ein Hund.", long]))
    assert (
        "x (text pairs): kept 1 pairs; dropped 1 over-long pair (line 2)"
        in capsys.readouterr().out
    )
    with pytest.raises(DataError, match=r"x \(text pairs\): no training pairs left"):
        preprocessor.batches(([long], [long]))


@pytest.mark.parametrize(
    ("bad", "error", "message"),
    [
        ("a text", TypeError, "x must be .source_texts, target_texts."),
        ([("a", "b"), ("c",)], TypeError, "x: item 1 is not a .source, target. pair"),
        ((["a", "b"], ["c"]), ValueError, "2 source texts but 1 target texts"),
        ((["a", None], ["c", "d"]), TypeError, "x: source text 1 is a NoneType"),
        (([], []), ValueError, "x: no text pairs"),
        ([], ValueError, "x: no text pairs"),
    ],
)
def test_bad_pairs_are_named(tokenizer, bad, error, message):
    with pytest.raises(error, match=message):
        TransformerPreprocessor(tokenizer).batches(bad)


@pytest.mark.parametrize("name", ["max_length", "tokens_per_batch", "seed"])
def test_settings_are_checked(tokenizer, name):
    with pytest.raises(ValueError, match=f"{name} must be an int"):
        TransformerPreprocessor(tokenizer, **{name: -1})
