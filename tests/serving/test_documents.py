"""Splitting documents into sentences (sentencex) and rejoining their
translations with the documents' own whitespace."""

from __future__ import annotations

import random
import sys

import pytest

from keras_transformer.serving import documents
from keras_transformer.serving.documents import Document, check_language, split_document
from keras_transformer.utils.optional_imports import MissingExtraError

pytestmark = pytest.mark.backend_neutral

# (language, text, the sentences expected).
CASES = [
    (
        "en",
        "Dr. Smith arrived at 5 p.m. He left.",
        ["Dr. Smith arrived at 5 p.m.", "He left."],
    ),
    (
        "en",
        "The price is 3.14 dollars. It rose by 2.5%! Really? Yes.",
        ["The price is 3.14 dollars.", "It rose by 2.5%!", "Really?", "Yes."],
    ),
    (
        "en",
        '"Are you coming?" she asked. "No!" he said. Then he left.',
        ['"Are you coming?" she asked.', '"No!" he said.', "Then he left."],
    ),
    (
        "en",
        "He said \u201cHello.\u201d Then he left.",
        ["He said \u201cHello.\u201d", "Then he left."],
    ),
    (
        "en",
        "Mrs. Brown paid $3.50 for tea. Is that a lot? Yes!",
        ["Mrs. Brown paid $3.50 for tea.", "Is that a lot?", "Yes!"],
    ),
    (
        "de",
        "Das ist z. B. ein Satz. Und noch einer.",
        ["Das ist z. B. ein Satz.", "Und noch einer."],
    ),
    (
        "de",
        "Das geschah am 3. Oktober. Dr. Müller kam um 5 Uhr.",
        ["Das geschah am 3. Oktober.", "Dr. Müller kam um 5 Uhr."],
    ),
    (
        "en",
        "a single sentence without final punctuation",
        ["a single sentence without final punctuation"],
    ),
    ("en", "I love it 😀. So do you 🎉!", ["I love it 😀.", "So do you 🎉!"]),
    ("ja", "日本語の文です。次の文です。", ["日本語の文です。", "次の文です。"]),
    (
        "en",
        "Tabs\tinside a sentence. Stay\t\tinside.",
        ["Tabs\tinside a sentence.", "Stay\t\tinside."],
    ),
]
# Line breaks and blank lines between sentences, as pasted.
SEPARATORS = [" ", "  ", "\t", "\n", "\r\n", "\n\n", "\r\n\r\n", " \n \n\t", "\u00a0"]


def sentences_of(text: str, language: str = "en") -> list[str]:
    return list(split_document(text, language).sentences)


def assert_well_formed(document: Document, text: str) -> None:
    """The invariants every split keeps."""
    assert document.join(document.sentences) == text
    assert len(document.separators) == len(document.sentences) + 1
    for sentence in document.sentences:
        assert sentence and sentence == sentence.strip()
        assert len(sentence.splitlines()) == 1  # Line breaks end sentences.
    for separator in document.separators:
        assert separator.strip() == ""


@pytest.mark.parametrize("language, text, expected", CASES)
def test_sentences_of_a_paragraph(language, text, expected):
    document = split_document(text, language)
    assert list(document.sentences) == expected
    assert_well_formed(document, text)


def test_five_sentences_in_one_paragraph_are_five():
    text = (
        "The train was late. We waited for an hour! Why was it late? "
        "Nobody knew. It finally came at 6 p.m. on Monday."
    )
    assert sentences_of(text) == [
        "The train was late.",
        "We waited for an hour!",
        "Why was it late?",
        "Nobody knew.",
        "It finally came at 6 p.m. on Monday.",
    ]


def test_paragraphs_keep_their_blank_lines_and_line_endings():
    text = (
        "First paragraph. It has two sentences.\r\n\r\n"
        "Second paragraph\n\n\n"
        "Third one? Yes!\n"
    )
    document = split_document(text, "en")
    assert document.sentences == (
        "First paragraph.",
        "It has two sentences.",
        "Second paragraph",
        "Third one?",
        "Yes!",
    )
    assert document.separators == ("", " ", "\r\n\r\n", "\n\n\n", " ", "\n")
    assert_well_formed(document, text)


def test_a_line_break_ends_a_sentence_without_punctuation():
    text = "A heading\nThe first line of the body\r\n- a list item\n- another"
    assert sentences_of(text) == [
        "A heading",
        "The first line of the body",
        "- a list item",
        "- another",
    ]


def test_leading_and_trailing_whitespace_go_to_the_separators():
    text = "  \t Hello there.  How are you?  \n"
    document = split_document(text, "en")
    assert document.sentences == ("Hello there.", "How are you?")
    assert document.separators == ("  \t ", "  ", "  \n")


@pytest.mark.parametrize("text", ["", " ", "  \n\t \r\n\n", "\u00a0\u3000"])
def test_a_blank_text_has_no_sentences(text):
    document = split_document(text, "en")
    assert document.sentences == ()
    assert document.separators == (text,)
    assert document.join([]) == text


@pytest.mark.parametrize(
    "text",
    [
        # sentencex 1.0.32 panics on a no-break space between a capital and
        # a period; the segmenter sees a plain space there instead.
        "Plan A\u00a0. Then plan B.",
        "Vitamin C\u2009. Then zinc.",
        "Le prix\u00a0: 5\u202f€. Il part\u00a0!",
    ],
)
def test_unicode_spaces_neither_crash_nor_change_the_text(text):
    document = split_document(text, "en")
    assert len(document.sentences) == 2
    assert_well_formed(document, text)


def test_every_unicode_space_round_trips():
    spaces = [chr(c) for c in range(sys.maxunicode + 1) if chr(c).isspace()]
    for space in spaces:
        text = f"Plan A{space}. Then plan B{space}. Or C{space}!{space}"
        assert_well_formed(split_document(text, "en"), text)


def test_random_mixes_of_the_cases_round_trip():
    rng = random.Random(1234)
    for _ in range(200):
        chosen = rng.choices(CASES, k=rng.randint(1, 6))
        parts = [rng.choice(["", *SEPARATORS])]
        for _, text, _ in chosen:
            parts += [text, rng.choice(SEPARATORS)]
        text = "".join(parts)
        language = rng.choice(["en", "de", "ja"])
        assert_well_formed(split_document(text, language), text)


def test_join_puts_translations_of_any_length_between_the_separators():
    document = split_document("  Dr. Smith arrived at 5 p.m. He left.\n\nBye!\n", "en")
    assert document.sentences == ("Dr. Smith arrived at 5 p.m.", "He left.", "Bye!")
    translated = document.join(
        ["Dr. Smith kam um 17 Uhr an und blieb nicht lange.", "", "Tschüss!"]
    )
    assert (
        translated
        == "  Dr. Smith kam um 17 Uhr an und blieb nicht lange. \n\nTschüss!\n"
    )


def test_join_with_the_wrong_count_raises_naming_both():
    document = split_document("One sentence. Two sentences.", "en")
    with pytest.raises(ValueError, match=r"1 translations for 2 sentences"):
        document.join(["Ein Satz."])
    with pytest.raises(ValueError, match=r"3 translations for 2 sentences"):
        document.join(["a", "b", "c"])
    with pytest.raises(TypeError, match="not one str"):
        document.join("ab")


def test_a_document_needs_one_separator_more_than_sentences():
    with pytest.raises(ValueError, match="needs 2 separators"):
        Document(sentences=("A.",), separators=("",))


@pytest.mark.parametrize(
    "given, code",
    [
        ("en", "en"),
        (" DE ", "de"),
        ("de-DE", "de"),
        ("pt_BR", "pt"),
        ("zh-Hant", "zh"),
        ("bar", "bar"),
        ("xx", "xx"),
    ],
)
def test_check_language_normalises(given, code):
    assert check_language(given) == code


def test_a_regional_code_gets_the_languages_rules():
    # sentencex looks "de-de" up whole and would use English rules, which
    # end a sentence at a German ordinal ("am 3. Oktober").
    text = "Das geschah am 3. Oktober. Dann kam der Winter."
    assert len(sentences_of(text, check_language("de-DE"))) == 2


@pytest.mark.parametrize(
    "given", ["", "  ", "english", "e", "de--at", "12", "en us", "de-"]
)
def test_check_language_rejects_what_is_no_code(given):
    with pytest.raises(ValueError) as caught:
        check_language(given)
    message = str(caught.value)
    assert "--source-language" in message and repr(given) in message
    assert "ISO 639" in message and "en, de, fr" in message


class PanicException(BaseException):
    """Named as pyo3's panic, which derives from BaseException."""


def test_a_segmenter_panic_keeps_the_line_whole(monkeypatch):
    def panicking(language, text):
        raise PanicException("byte index 3 is not a char boundary")

    monkeypatch.setattr(documents, "_segmenter", lambda: panicking)
    text = "One. Two.\n\nThree. Four."
    document = split_document(text, "en")
    assert document.sentences == ("One. Two.", "Three. Four.")
    assert document.join(document.sentences) == text


def test_other_base_exceptions_are_not_swallowed(monkeypatch):
    def interrupted(language, text):
        raise KeyboardInterrupt

    monkeypatch.setattr(documents, "_segmenter", lambda: interrupted)
    with pytest.raises(KeyboardInterrupt):
        split_document("One. Two.", "en")


def test_pieces_that_change_the_text_keep_the_line_whole(monkeypatch):
    monkeypatch.setattr(
        documents, "_segmenter", lambda: lambda language, text: ["One.", "Two."]
    )
    text = "One.  Two."
    assert split_document(text, "en").sentences == (text,)


def test_missing_sentencex_names_the_serve_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "sentencex", None)  # Its import fails.
    with pytest.raises(MissingExtraError, match=r"sentencex.*'\.\[serve\]'"):
        split_document("One. Two.", "en")
