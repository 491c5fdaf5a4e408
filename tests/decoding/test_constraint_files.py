"""`read_constraints` and `read_prefixes`: the files read line for line with
the input, and every phrase no search could meet refused naming its file,
line and phrase."""

from __future__ import annotations

import pytest

from keras_transformer.config import UNK_ID
from keras_transformer.data.text_files import DataError
from keras_transformer.data.tokenizer import WordTokenizer
from keras_transformer.decoding.constraint_files import read_constraints, read_prefixes
from tests.helpers import make_corpus


def encode(tokenizer, texts):
    return [list(map(int, ids)) for ids in tokenizer.encode(texts)]


@pytest.fixture(scope="module")
def tokenizer():
    return WordTokenizer.train(make_corpus(400, seed=1), 64)


def write(path, text):
    path.write_text(text, encoding="utf-8")
    return path


def test_constraints_and_prefixes_files_are_read(tmp_path, tokenizer):
    path = write(tmp_path / "terms.txt", "big house\ttree\n\n  garden \n")
    constraints = read_constraints(path, 3, tokenizer)
    assert constraints == [
        encode(tokenizer, ["big house", "tree"]),
        [],
        encode(tokenizer, ["garden"]),
    ]
    path = write(tmp_path / "prefixes.txt", "the dog\n\n")
    assert read_prefixes(path, 2, tokenizer) == [encode(tokenizer, ["the dog"])[0], []]


def test_a_line_count_mismatch_names_both_files_and_counts(tmp_path, tokenizer):
    path = write(tmp_path / "terms.txt", "tree\n\n")
    with pytest.raises(DataError, match=r"terms\.txt has 2 lines .* input\.en has 3"):
        read_constraints(path, 3, tokenizer, input_name="input.en")
    path = write(tmp_path / "prefixes.txt", "the\n")
    with pytest.raises(
        DataError,
        match=r"prefixes\.txt has 1 line of prefixes, but the input has 2 lines",
    ):
        read_prefixes(path, 2, tokenizer)


def test_an_empty_phrase_names_its_file_and_line(tmp_path, tokenizer):
    path = write(tmp_path / "terms.txt", "tree\n\ngarden\t\tdog\n")
    with pytest.raises(DataError, match=r"terms\.txt:3: phrase 2 is empty"):
        read_constraints(path, 3, tokenizer)


def test_an_unknown_word_names_its_file_line_and_phrase(tmp_path, tokenizer):
    path = write(tmp_path / "terms.txt", "tree\ngarden\tzebra crossing\n")
    with pytest.raises(
        DataError, match=r"terms\.txt:2: phrase 2 \('zebra crossing'\) .* unknown"
    ):
        read_constraints(path, 2, tokenizer)
    assert read_constraints(path, 2, tokenizer, allow_unk=True)[1][1][0] == UNK_ID
    path = write(tmp_path / "prefixes.txt", "\nzebra\n")
    with pytest.raises(DataError, match=r"prefixes\.txt:2: prefix \('zebra'\)"):
        read_prefixes(path, 2, tokenizer)


def test_a_phrase_of_no_piece_or_a_tabbed_prefix_is_refused(tmp_path):
    class Dropping:  # A tokenizer that drops "-" (as a normaliser might).
        unk_id = UNK_ID

        def encode(self, texts):
            return [[7 for word in text.split() if word != "-"] for text in texts]

        encode_target = encode  # Phrases are target text.

    path = write(tmp_path / "terms.txt", "tree\t-\n")
    with pytest.raises(DataError, match=r"terms\.txt:1: phrase 2 \('-'\) .* no piece"):
        read_constraints(path, 1, Dropping())
    path = write(tmp_path / "prefixes.txt", "the\tdog\n")
    with pytest.raises(DataError, match=r"prefixes\.txt:1: a prefix holds a tab"):
        read_prefixes(path, 1, Dropping())
