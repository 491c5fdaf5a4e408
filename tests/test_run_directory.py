"""`RunDirectory.save_model`: a model from your own `model.fit` becomes a run
directory that translate, evaluate and export take."""

from __future__ import annotations

import numpy as np
import pytest

from keras_transformer.data.tokenizer import train_tokenizer
from keras_transformer.model import build_transformer
from keras_transformer.run_directory import RunDirectory
from tests.helpers import make_corpus, small_config, to_numpy


@pytest.fixture(scope="module")
def tokenizer():
    return train_tokenizer(make_corpus(), 300)


def test_saved_model_loads_back_with_its_tokenizer(tokenizer, tmp_path):
    model = build_transformer(small_config(vocab_size=tokenizer.vocab_size))
    run = RunDirectory(tmp_path / "run")
    run.save_model(model, tokenizer)
    assert run.load_config() == model.config
    assert run.load_tokenizer().encode(["the dog"]) == tokenizer.encode(["the dog"])
    inputs = {"source_ids": np.array([[5, 6, 7]]), "target_ids": np.array([[2, 9]])}
    np.testing.assert_allclose(
        to_numpy(run.load_model()(inputs)), to_numpy(model(inputs)), atol=1e-6
    )
    with pytest.raises(FileExistsError, match="already exists"):
        run.save_model(model, tokenizer)


def test_tokenizer_of_another_size_is_refused(tokenizer, tmp_path):
    model = build_transformer(small_config(vocab_size=tokenizer.vocab_size + 1))
    run = RunDirectory(tmp_path / "run")
    with pytest.raises(ValueError, match="vocab_size"):
        run.save_model(model, tokenizer)
    assert not run.path.exists()
