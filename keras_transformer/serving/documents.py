"""Documents: cut a pasted text into sentences, and put translations back.

The model translates one sentence at a time (it was trained on sentence
pairs, and a long input leaves its training distribution), but a person
pastes paragraphs. With ``split_sentences`` the server cuts each text into
sentences with `split_document`, translates them as one batch, and
`Document.join` puts the translations back between the text's own
whitespace: spaces, tabs, line breaks and the blank lines between
paragraphs come back exactly as they were sent.

The segmenter is sentencex (Wikimedia, MIT licence): abbreviation lists and
rules for about 30 languages and a fallback table covering about 300
language codes, written in Rust (a compiled wheel that imports in about a
millisecond and downloads nothing at run time). It is non-destructive: its
pieces concatenate to the input, so the whitespace between sentences can be
recovered. A hand-written regex splits "Dr. Smith arrived at 5 p.m." or
"z. B." in the middle; nltk's punkt downloads its models at run time. Like
every rule-based segmenter it prefers leaving two sentences together to
cutting one in half ("... in the U.S. They ..." stays one sentence).

Line breaks are hard boundaries: a text is cut into lines first (keeping
their breaks, as `str.splitlines` sees them) and only each line's content
goes to the segmenter, so a heading or a list item without final punctuation
never runs into the next line.
"""

from __future__ import annotations

import dataclasses
import logging
import re
from collections.abc import Callable, Iterator, Sequence

from keras_transformer.utils.optional_imports import require

_log = logging.getLogger(__name__)

Segment = Callable[[str, str], Sequence[str]]
Span = tuple[int, int]  # [start, end) of a sentence in the text.

# The non-ASCII characters str.isspace() accepts. sentencex 1.0.32 panics on
# some of them next to a period ("Plan A\u00a0. Then" slices a UTF-8 string
# inside the no-break space), so the segmenter sees an ASCII space in their
# place: one character for one, so its pieces map back onto the original.
_ASCII_SPACES = str.maketrans(
    dict.fromkeys(
        "\x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008"
        "\u2009\u200a\u2028\u2029\u202f\u205f\u3000",
        " ",
    )
)
# An ISO 639 code (two or three letters), then optional BCP 47 subtags for a
# region, a script or a variant ("pt-BR", "zh-Hant", "de-CH-1996").
_LANGUAGE_CODE = re.compile(r"(?P<language>[a-z]{2,3})(?:-[a-z0-9]{1,8})*")


@dataclasses.dataclass(frozen=True)
class Document:
    """A text as its sentences and the whitespace around them.

    ``separators`` has one more item than ``sentences``: the text before the
    first sentence, between each two, and after the last (a blank text is
    all separator). ``document.join(document.sentences)`` is the text.
    """

    sentences: tuple[str, ...]
    separators: tuple[str, ...]

    def __post_init__(self) -> None:
        if len(self.separators) != len(self.sentences) + 1:
            raise ValueError(
                f"A document with {len(self.sentences)} sentences needs "
                f"{len(self.sentences) + 1} separators, not {len(self.separators)}."
            )

    def join(self, translations: Sequence[str]) -> str:
        """The text with `translations` in place of its sentences, in order,
        and its own whitespace and line breaks between them."""
        if isinstance(translations, str):  # A str is a sequence of characters.
            raise TypeError("join takes a sequence of translations, not one str.")
        if len(translations) != len(self.sentences):
            raise ValueError(
                f"{len(translations)} translations for {len(self.sentences)} "
                "sentences: join needs exactly one per sentence."
            )
        parts = [self.separators[0]]
        for translation, separator in zip(translations, self.separators[1:]):
            parts += [translation, separator]
        return "".join(parts)


def check_language(language: str) -> str:
    """The segmenter's code for `language` (``--source-language``), or a
    ValueError saying what is expected.

    Case, surrounding spaces and ``_`` for ``-`` are forgiven, and region or
    script subtags are dropped ("de-DE" -> "de", "pt_BR" -> "pt"): the
    segmenter's rules are per language, and it looks the whole code up, so
    "de-de", which its table lacks, would get English rules.

    A well-formed code without rules of its own follows sentencex's fallback
    table to a related language that has them ("bar", Bavarian, -> German;
    "gl" -> Portuguese) and ends at English rules when the table has nothing
    ("xx", and three-letter codes of languages that have a two-letter one:
    "deu" is English rules, "de" German). English rules still end sentences
    at the terminators of other scripts (。！？ and the like), so an unknown
    code degrades to plain punctuation rules, never to no splitting.
    """
    code = language.strip().lower().replace("_", "-")
    match = _LANGUAGE_CODE.fullmatch(code)
    if match is None:
        raise ValueError(
            f"--source-language {language!r} is not a language code: expected "
            "an ISO 639 code such as en, de, fr (a region or script may follow: "
            "pt-BR, zh-Hant)."
        )
    return match["language"]


def split_document(text: str, language: str) -> Document:
    """`text` cut into sentences, and the whitespace around them.

    Args:
        text: any text; line breaks (``\\n``, ``\\r\\n``, ...) always end a
            sentence.
        language: a code from `check_language`, e.g. ``"en"``.

    Returns:
        A Document whose sentences have no surrounding whitespace and whose
        ``join(sentences)`` is `text`; a blank text has no sentences.

    Raises:
        MissingExtraError: sentencex is not installed.
    """
    segment = _segmenter()
    spans = [
        span
        for offset, line in _lines(text)
        for span in _line_spans(segment, language, offset, line)
    ]
    return _document(text, spans)


def _segmenter() -> Segment:
    # Imported on first use: only split_sentences needs it.
    sentencex = require("sentencex", "serve", "Splitting texts into sentences")
    return sentencex.segment


def _lines(text: str) -> Iterator[tuple[int, str]]:
    """Each line's offset in `text` and its content, without its break."""
    offset = 0
    for line in text.splitlines(keepends=True):
        yield offset, line.splitlines()[0]
        offset += len(line)


def _line_spans(segment: Segment, language: str, offset: int, line: str) -> list[Span]:
    """The spans in the text of the sentences of `line`, which starts at
    `offset`: the segmenter's pieces without their surrounding whitespace."""
    spans, start = [], offset
    for piece in _pieces(segment, language, line):
        content = piece.strip()
        if content:
            lead = len(piece) - len(piece.lstrip())
            spans.append((start + lead, start + lead + len(content)))
        start += len(piece)
    return spans


def _pieces(segment: Segment, language: str, line: str) -> list[str]:
    """`line` cut where the segmenter ends its sentences; the pieces
    concatenate to `line` (the whole line is one piece when it cannot)."""
    if not line.strip():  # Nothing to split; spare the segmenter the call.
        return [line]
    readable = line.translate(_ASCII_SPACES)
    try:
        pieces = list(segment(language, readable))
    except BaseException as error:  # A Rust panic is a BaseException.
        if not _is_rust_panic(error):
            raise
        # A segmenter bug must not fail the request: a long sentence
        # translates worse, an error not at all.
        _log.warning("sentencex failed on a line (%s); kept it whole", error)
        return [line]
    if "".join(pieces) != readable:  # Never seen; the layout depends on it.
        return [line]
    return _cut(line, [len(piece) for piece in pieces])


def _is_rust_panic(error: BaseException) -> bool:
    # pyo3_runtime.PanicException: each extension has its own class and none
    # is importable, so it is told by its name.
    return type(error).__name__ == "PanicException"


def _cut(line: str, lengths: Sequence[int]) -> list[str]:
    """`line` cut into consecutive pieces of these lengths."""
    pieces, start = [], 0
    for length in lengths:
        pieces.append(line[start : start + length])
        start += length
    return pieces


def _document(text: str, spans: Sequence[Span]) -> Document:
    """The Document of `text` whose sentences are these spans."""
    cuts = [0, *(bound for span in spans for bound in span), len(text)]
    return Document(
        sentences=tuple(text[start:end] for start, end in spans),
        separators=tuple(text[cuts[i] : cuts[i + 1]] for i in range(0, len(cuts), 2)),
    )
