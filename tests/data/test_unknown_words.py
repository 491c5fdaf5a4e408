"""Unknown-word classes: a word's shape and suffix, and the vocabulary that
makes room for the classes of the words it leaves out."""

from __future__ import annotations

import pytest

from keras_transformer.data.unknown_words import (
    is_class_token,
    unknown_word_class,
    words_and_classes,
)

pytestmark = pytest.mark.backend_neutral


@pytest.mark.parametrize(
    "word, token",
    [
        ("Flanked", "<unk-cap-ed>"),
        ("running", "<unk-lower-ing>"),
        ("happiness", "<unk-lower-ness>"),  # the longest suffix, not "-s"
        ("nations", "<unk-lower-s>"),
        ("IBM", "<unk-caps>"),
        ("U.S.", "<unk-caps>"),
        ("A", "<unk-cap>"),  # one capital is not all capitals
        ("3.8", "<unk-digit-num>"),
        ("1980s", "<unk-digit-num-s>"),  # a plural of digits: still "-s"
        ("year-earlier", "<unk-lower-dash-er>"),
        ("mid-1990", "<unk-lower-num-dash>"),
        ("is", "<unk-lower>"),  # too short for "-s": two letters must precede it
        ("$", "<unk-other>"),
        ("--", "<unk-other-dash>"),
    ],
)
def test_unknown_word_class(word, token):
    assert unknown_word_class(word) == token
    assert is_class_token(token)


@pytest.mark.parametrize("word", ["(NP", ")NP", "(", ")", ""])
def test_brackets_and_the_empty_word_have_no_class(word):
    assert unknown_word_class(word) is None


def test_reserved_unk_is_not_a_class_token():
    assert not is_class_token("<unk>")
    assert not is_class_token("<unk-lower")


def test_words_and_classes_counts_the_left_out_words_occurrences():
    counts = {"the": 9, "Ran": 1, "dogs": 3, "cats": 1, "Bob": 2, "(NP": 1}
    # Room for four: two classes are needed, so two words stay; "<unk-cap>"
    # counts Bob's and Ran's occurrences (3), "<unk-lower-s>" cats' (1); the
    # bracket gets none (it stays <unk>).
    vocabulary = words_and_classes(counts, 4)
    assert vocabulary == ["the", "dogs", "<unk-cap>", "<unk-lower-s>"]
    assert len(words_and_classes(counts, 100)) == len(counts)  # nothing left out


def test_words_and_classes_with_room_only_for_classes():
    counts = {"Apple": 1, "Bob": 1, "cats": 1}
    assert words_and_classes(counts, 1) == ["<unk-cap>"]
