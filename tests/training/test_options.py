"""`TrainOptions` refuses settings that could not train as asked, before any
data is read."""

from __future__ import annotations

import pytest

from keras_transformer.training.options import TrainOptions

pytestmark = pytest.mark.backend_neutral


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


# --- task: translation or parsing --------------------------------------------------


def _treebank():
    from keras_transformer.data.datasets import DatasetSpec

    return DatasetSpec(name="treebank", files={"train": ("x",)})


def test_translation_is_the_default_task_with_its_tokenizer_and_beam():
    options = TrainOptions()
    assert options.task == "translation"
    assert options.tokenizer == "sentencepiece"
    assert (options.beam_size, options.alpha) == (4, 0.6)


def test_parsing_fills_the_word_tokenizer_and_the_papers_search():
    options = TrainOptions(task="parsing", data=_treebank())
    assert options.tokenizer == "words"
    assert (options.beam_size, options.alpha) == (21, 0.3)


@pytest.mark.parametrize("task", ["translation", "parsing"])
def test_an_explicit_final_search_is_kept(task):
    data = _treebank() if task == "parsing" else TrainOptions().data
    options = TrainOptions(task=task, data=data, beam_size=2, alpha=1.5)
    assert (options.beam_size, options.alpha) == (2, 1.5)


def test_a_negative_alpha_is_refused_naming_it():
    with pytest.raises(ValueError, match="alpha"):
        TrainOptions(alpha=-0.5)


def test_an_explicit_tokenizer_is_kept_for_translation():
    assert TrainOptions(tokenizer="wordpiece").tokenizer == "wordpiece"


def test_parsing_without_a_treebank_is_refused_naming_train_trees():
    with pytest.raises(ValueError) as info:
        TrainOptions(task="parsing")
    message = str(info.value)
    assert "--train-trees" in message and "--dataset builtin" in message


def test_a_treebank_for_translation_is_refused_naming_task_parsing():
    with pytest.raises(ValueError, match="--task parsing"):
        TrainOptions(data=_treebank())


@pytest.mark.parametrize("tokenizer", ["sentencepiece", "wordpiece"])
def test_parsing_with_a_subword_tokenizer_is_refused_naming_words(tokenizer):
    with pytest.raises(ValueError) as info:
        TrainOptions(task="parsing", data=_treebank(), tokenizer=tokenizer)
    message = str(info.value)
    assert "--tokenizer words" in message and f"--tokenizer {tokenizer}" in message


@pytest.mark.parametrize("linearization", ["tags", "xx"])
def test_shared_embeddings_for_tree_symbol_targets_are_refused(linearization):
    # The targets' own vocabulary is smaller than the words': the decoder's
    # table cannot be the encoder's (training/model_setup.py).
    from keras_transformer.data.datasets import DatasetSpec

    data = DatasetSpec(
        name="treebank", files={"train": ("x",)}, linearization=linearization
    )
    with pytest.raises(ValueError) as info:
        TrainOptions(task="parsing", data=data, overrides={"share_embeddings": True})
    message = str(info.value)
    assert "--set share_embeddings=true" in message
    assert f"--linearization {linearization}" in message
    words = DatasetSpec(
        name="treebank", files={"train": ("x",)}, linearization="tags+words"
    )
    shared = TrainOptions(
        task="parsing", data=words, overrides={"share_embeddings": True}
    )
    assert shared.overrides == {"share_embeddings": True}  # One joint vocabulary.


def test_an_unknown_task_is_refused_listing_the_tasks():
    with pytest.raises(ValueError) as info:
        TrainOptions(task="tagging")
    message = str(info.value)
    assert "task (--task)" in message and "'tagging'" in message
    assert "translation" in message and "parsing" in message


def test_a_translation_runs_identity_is_what_it_was_before_tasks():
    # Runs made before the parsing task must resume: no new identity keys.
    from keras_transformer.data.datasets import DatasetSpec
    from keras_transformer.training.distribution import setup_distribution
    from keras_transformer.training.job import run_identity

    plan = setup_distribution("none")
    identity = run_identity(TrainOptions(), "fingerprint", plan)
    assert "task" not in identity and "linearization" not in identity["data"]
    parsing = TrainOptions(
        task="parsing",
        data=DatasetSpec(
            name="treebank", files={"train": ("x",)}, linearization="tags+words"
        ),
    )
    identity = run_identity(parsing, "fingerprint", plan)
    assert identity["task"] == "parsing"
    assert identity["data"]["linearization"] == "tags+words"
