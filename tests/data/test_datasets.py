"""DatasetSpec: settings that the chosen dataset would ignore are refused."""

from __future__ import annotations

import pytest

from keras_transformer.data.datasets import DatasetSpec
from keras_transformer.data.text_files import DataError

pytestmark = pytest.mark.backend_neutral

FILES = {"train": ("a.en", "a.de")}


@pytest.mark.parametrize(
    "spec, named",
    [
        (dict(name="builtin", files=FILES), "--train-src/tgt/tsv (files=)"),
        (dict(name="tfds:wmt14_translate/de-en", files=FILES), "--train-src"),
        (dict(name="builtin", data_dir="d"), "--data-dir (data_dir=)"),
        (dict(name="files", files=FILES, data_dir="d"), "--data-dir"),
        (dict(name="builtin", source_lang="de"), "--source-lang (source_lang=)"),
        (dict(name="files", files=FILES, target_lang="en"), "--target-lang"),
    ],
)
def test_settings_the_dataset_does_not_read_are_refused(spec, named):
    with pytest.raises(DataError) as info:
        DatasetSpec(**spec)
    message = str(info.value)
    assert named in message and f"--dataset {spec['name']}" in message


@pytest.mark.parametrize(
    "spec",
    [
        dict(),
        dict(name="files", files=FILES),
        dict(name="multi30k", data_dir="d", source_lang="de", target_lang="en"),
        dict(name="tfds:wmt14_translate/de-en", data_dir="d", source_lang="de"),
        dict(name="bogus", data_dir="d"),  # load_dataset names the bad name.
    ],
)
def test_settings_the_dataset_reads_are_accepted(spec):
    assert DatasetSpec(**spec).data_dir == spec.get("data_dir")


@pytest.mark.parametrize("name", ["store:", "store:  "])
def test_a_store_without_a_directory_is_refused(name):
    """It used to read the current directory as the store (issue 50)."""
    with pytest.raises(DataError, match="names no directory .* give store:DIR"):
        DatasetSpec(name=name)


def test_a_treebank_tree_that_cannot_be_a_target_names_its_file_and_line(tmp_path):
    from keras_transformer.data.datasets import dataset_sources

    trees = tmp_path / "trees.mrg"
    # Line 2's root holds two constituents: there is no one phrase to write.
    trees.write_text(
        "( (S (NP (NN a)) (VP (VBD b))) )\n( (S (NN c)) (. .) )\n", encoding="utf-8"
    )
    spec = DatasetSpec(name="treebank", files={"train": (str(trees),)})
    with pytest.raises(DataError, match=f"{trees}:2: this tree cannot be"):
        list(dataset_sources(spec)["train"].blocks())


def test_treebank_pairs_are_words_and_linearized_trees(tmp_path):
    from keras_transformer.data.datasets import dataset_sources

    trees = tmp_path / "trees.mrg"
    trees.write_text("( (S (NP (NN a)) (VP (VBD b))) )\n", encoding="utf-8")
    for linearization, target in (
        ("tags", "(S (NP NN )NP (VP VBD )VP )S"),
        ("tags+words", "(S (NP NN a )NP (VP VBD b )VP )S"),
    ):
        spec = DatasetSpec(
            name="treebank", files={"train": (str(trees),)}, linearization=linearization
        )
        (block,) = dataset_sources(spec)["train"].blocks()
        assert (block.source, block.target) == (["a b"], [target])


def test_subtree_substitution_adds_training_pairs_after_the_treebanks(tmp_path):
    from keras_transformer.data.datasets import dataset_sources

    trees = tmp_path / "trees.mrg"
    trees.write_text(
        "( (S (NP (NN a)) (VP (VBD b))) )\n( (S (NP (NN c)) (VP (VBD d))) )\n",
        encoding="utf-8",
    )
    files = {"train": (str(trees),), "valid": (str(trees),)}
    spec = DatasetSpec(name="treebank", files=files, subtree_substitution=1)
    sources = dataset_sources(spec)
    own, new = sources["train"].blocks()
    assert (own.first_line, own.source) == (1, ["a b", "c d"])
    # Each tree's one copy swaps its NP or its VP for the other tree's.
    assert new.first_line == 3 and len(new.source) == 2
    assert set(new.source) <= {"c b", "a d"}
    assert new.target == ["(S (NP NN )NP (VP VBD )VP )S"] * 2
    assert sources["train"].identity["subtree_substitution"] == 1
    (valid,) = sources["valid"].blocks()  # Only the training trees grow.
    assert "subtree_substitution" not in sources["valid"].identity
    plain = dataset_sources(DatasetSpec(name="treebank", files=files))["train"]
    assert "subtree_substitution" not in plain.identity  # Old stores keep theirs.


@pytest.mark.parametrize(
    "linearization, own", [("tags", True), ("xx", True), ("tags+words", False)]
)
def test_tree_symbol_targets_get_a_vocabulary_of_their_own(
    tmp_path, linearization, own
):
    # A new tokenizer (the targets' symbols first) makes a new store: the
    # identity says so, where the targets are tree symbols only.
    from keras_transformer.data.datasets import dataset_sources

    trees = tmp_path / "trees.mrg"
    trees.write_text("( (S (NP (NN a)) (VP (VBD b))) )\n", encoding="utf-8")
    spec = DatasetSpec(
        name="treebank", files={"train": (str(trees),)}, linearization=linearization
    )
    assert spec.target_vocabulary is own
    identity = dataset_sources(spec)["train"].identity
    assert identity.get("target_vocabulary", False) is own
    assert DatasetSpec(name="files").target_vocabulary is False


@pytest.mark.parametrize("copies", [-1, 1.5, True])
def test_subtree_substitution_must_be_a_count(copies):
    with pytest.raises(DataError, match="--subtree-substitution must be a whole"):
        DatasetSpec(name="treebank", subtree_substitution=copies)


def test_subtree_substitution_is_refused_for_text_data():
    with pytest.raises(
        DataError, match="--subtree-substitution .* only with --dataset treebank"
    ):
        DatasetSpec(name="builtin", subtree_substitution=2)
