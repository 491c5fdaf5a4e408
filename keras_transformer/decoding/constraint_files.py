"""Constraint and prefix files, and the check of a phrase no search could meet.

`read_constraints` (phrases separated by tabs, one line per input line) and
`read_prefixes` (one prefix per line) encode with the run's tokenizer and
refuse, naming file and line, what the search could never meet
(`unmeetable`, which the server applies to its requests too). The search
they feed is `decoding.constraints`'.
"""

from __future__ import annotations

import os

from keras_transformer.config import UNK_ID
from keras_transformer.data.text_files import DataError, read_text_lines


def read_constraints(
    path: str | os.PathLike[str],
    expected_lines: int,
    tokenizer,
    *,
    allow_unk: bool = False,
    input_name: str | os.PathLike[str] | None = None,
    lenient_utf8: bool = False,
) -> list[list[list[int]]]:
    """The constraint phrases of each input line, as token ids.

    One line per input line; phrases separated by tabs; an empty line means
    none. Each phrase is encoded alone, without EOS, after its surrounding
    spaces are stripped (a space at its edge would become a piece of its
    own, which a word inside the output never matches).

    Raises:
        DataError: naming the file and line, for a file that is not
            `expected_lines` lines long, an empty phrase, a phrase that
            encodes to no piece, or one holding the unknown piece (which the
            search never generates unless `allow_unk`).
    """
    lines = _lines(path, expected_lines, input_name, "constraints", lenient_utf8)
    places, phrases = [], []
    for number, line in enumerate(lines, start=1):
        if not line:
            continue
        for index, phrase in enumerate(line.split("\t"), start=1):
            if not phrase.strip():
                raise DataError(
                    f"{path}:{number}: phrase {index} is empty. Separate phrases "
                    "with one tab, with none at the start or end of the line "
                    "(an empty line means no constraint)."
                )
            places.append((number, index))
            phrases.append(phrase.strip())
    encoded = _encode(path, places, phrases, tokenizer, allow_unk)
    result: list[list[list[int]]] = [[] for _ in lines]
    for (number, _), ids in zip(places, encoded):
        result[number - 1].append(ids)
    return result


def read_prefixes(
    path: str | os.PathLike[str],
    expected_lines: int,
    tokenizer,
    *,
    allow_unk: bool = False,
    input_name: str | os.PathLike[str] | None = None,
    lenient_utf8: bool = False,
) -> list[list[int]]:
    """The forced target prefix of each input line, as token ids (an empty
    line: none). Errors as `read_constraints`'s; a tab is refused (a prefix
    is one piece of text; tabs separate constraint phrases)."""
    lines = _lines(path, expected_lines, input_name, "prefixes", lenient_utf8)
    places, texts = [], []
    for number, line in enumerate(lines, start=1):
        if "\t" in line:
            raise DataError(
                f"{path}:{number}: a prefix holds a tab; give one prefix per line "
                "(tabs separate the phrases of a constraints file)."
            )
        if line.strip():
            places.append((number, 1))
            texts.append(line.strip())
    encoded = _encode(path, places, texts, tokenizer, allow_unk, what="prefix")
    result: list[list[int]] = [[] for _ in lines]
    for (number, _), ids in zip(places, encoded):
        result[number - 1] = ids
    return result


def unmeetable(ids, tokenizer, allow_unk: bool) -> str | None:
    """Why a phrase or prefix encoded as `ids` could never be met, or None:
    no piece at all, or the unknown piece, which the search never generates
    unless `allow_unk` (the files here and a server's requests)."""
    if not len(ids):
        return "encodes to no piece"
    if getattr(tokenizer, "unk_id", UNK_ID) in ids and not allow_unk:
        return (
            "holds a piece the tokenizer does not know (it encodes to the "
            "unknown id), and the search never generates the unknown token: "
            "it could never be met"
        )
    return None


def _lines(path, expected: int, input_name, what: str, lenient_utf8: bool):
    lines = read_text_lines(path, lenient_utf8=lenient_utf8)
    if len(lines) != expected:
        source = "the input" if input_name is None else str(input_name)
        raise DataError(
            f"{path} has {_lines_count(len(lines))} of {what}, but {source} has "
            f"{_lines_count(expected)}: give one line per input line (an empty "
            f"line for no {what})."
        )
    return lines


def _lines_count(count: int) -> str:
    return f"{count} line" if count == 1 else f"{count} lines"


def _encode(
    path, places, texts, tokenizer, allow_unk: bool, what: str = "phrase"
) -> list[list[int]]:
    """Encode every text at once; refuse one that could never be met
    (`unmeetable`)."""
    encoded = tokenizer.encode_target(texts) if texts else []
    for (number, index), text, ids in zip(places, texts, encoded):
        name = f"phrase {index}" if what == "phrase" else what
        problem = unmeetable(ids, tokenizer, allow_unk)
        if problem:
            advice = " Respell it, or allow the unknown token (--allow-unk)."
            advice = advice if len(ids) else ""
            raise DataError(f"{path}:{number}: {name} ({text!r}) {problem}.{advice}")
    return [list(map(int, ids)) for ids in encoded]
