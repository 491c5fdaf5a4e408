"""Unknown-word classes of the `words` tokenizer: spelling, not one `<unk>`.

A word the vocabulary lacks is read as its shape and suffix. On a small
treebank a tenth of the test words were never seen in training (or too
rarely to keep), and with a single `<unk>` the parser had to guess their
tags from the context alone: it tagged 46% of them right against 96%
of the frequent words. Parsers trained on treebanks have long mapped such a
word to a signature of its spelling instead (the Berkeley parser's unknown-
word classes, Petrov et al. 2006; Stanford's): capitalised or not, digits,
a dash, an English suffix. Here a word outside the vocabulary becomes the
token ``<unk-SHAPE[-num][-dash][-SUFFIX]>`` when the vocabulary holds that
class (learned from the rarest training words, which are left out of the
vocabulary for it), else `<unk>`.

Brackets (a token that starts with ``(`` or ``)``) get no class: a parsing
target's rare phrase label stays `<unk>`, which a tree reader drops, rather
than becoming a token that reads as a tag.
"""

from __future__ import annotations

from collections import Counter

CLASSES_VERSION = 1
"""Part of a prepared store's key: a store of the `words` kind learned
before the classes (or with other rules) is not reused."""

CLASS_PREFIX = "<unk-"
"""How every unknown-word class token starts (`<unk>` itself does not)."""

# English suffixes that tell a part of speech, longest first so that
# "-ness" wins over "-s"; a suffix counts when at least two letters precede it.
_SUFFIXES = tuple(
    sorted(
        (
            "ing", "ed", "ly", "ion", "er", "ers", "est", "s", "es", "ies",
            "al", "ity", "ic", "ive", "ous", "able", "ible", "ment", "ness",
            "ist", "ism", "ian", "ful", "less", "ize", "ized", "ate", "ated",
            "en", "y", "ary", "ant", "ent", "ence", "ance", "ship", "ward",
        ),
        key=len,
        reverse=True,
    )
)  # fmt: skip


def unknown_word_class(word: str) -> str | None:
    """The class token of `word` (``"<unk-cap-ed>"`` for "Flanked"), or None
    for a bracket token, which has none."""
    if not word or word[0] in "()":
        return None
    letters = [char for char in word if char.isalpha()]
    if letters and all(char.isupper() for char in letters) and len(letters) > 1:
        shape = "caps"
    elif word[0].isupper():
        shape = "cap"
    elif word[0].islower():
        shape = "lower"
    elif word[0].isdigit():
        shape = "digit"
    else:
        shape = "other"
    features = [shape]
    if any(char.isdigit() for char in word):
        features.append("num")
    if "-" in word:
        features.append("dash")
    lower = word.lower()
    if lower[-1:].isalpha():
        suffix = next(
            (s for s in _SUFFIXES if lower.endswith(s) and len(lower) >= len(s) + 2),
            None,
        )
        if suffix is not None:
            features.append(suffix)
    return CLASS_PREFIX + "-".join(features) + ">"


def is_class_token(token: str) -> bool:
    """True for an unknown-word class token (``<unk-...>``)."""
    return token.startswith(CLASS_PREFIX) and token.endswith(">")


def words_and_classes(counts: dict[str, int], size: int) -> list[str]:
    """The `size` entries of a word vocabulary with unknown-word classes:
    the most frequent words, and the classes of the words left out (counted
    by the left-out words' occurrences), most frequent first; among equal
    counts, words before classes, words in the order of `counts` (first
    appearance). The classes take the places of the rarest words, so every
    word left out has its class when `size` allows.
    """
    ranked = sorted(counts, key=counts.__getitem__, reverse=True)
    kept = min(size, len(ranked))
    while True:
        classes: Counter[str] = Counter()
        for word in ranked[kept:]:
            token = unknown_word_class(word)
            if token is not None and token not in counts:
                classes[token] += counts[word]
        if kept + len(classes) <= size or kept == 0:
            break
        kept = max(0, size - len(classes))
    entries = {word: counts[word] for word in ranked[:kept]}
    entries.update(classes)
    ordered = sorted(entries, key=entries.__getitem__, reverse=True)
    return ordered[:size]
