"""`parsing.tree`: the tagged-sentence reader (the trees themselves are
checked with the treebank reader, tests/data/test_treebank.py)."""

from __future__ import annotations

import pytest

from keras_transformer.parsing.tree import TreeError, split_tagged

pytestmark = pytest.mark.backend_neutral


def test_split_tagged_takes_the_tag_after_the_last_slash():
    assert split_tagged(r"Pierre/NNP 1\/2/CD ./.", "f:1") == (
        ["Pierre", r"1\/2", "."],
        ["NNP", "CD", "."],
    )
    assert split_tagged("   ", "f:1") == ([], [])


@pytest.mark.parametrize("token", ["dog", "/NN", "dog/"])
def test_split_tagged_refuses_a_token_without_word_or_tag(token):
    with pytest.raises(
        TreeError, match=f"f:7: token 2 \\('{token}'\\) is not word/TAG"
    ):
        split_tagged(f"the/DT {token}", "f:7")
