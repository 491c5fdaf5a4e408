"""Labeled bracketing scores of parsed trees against gold trees, as EVALB computes.

The rules are those of EVALB (Sekine and Collins, 1997) run with its
COLLINS.prm parameter file, the setting behind the WSJ F1 figures of the
parsing literature (the paper's Table 4 included):

Reading a tree (each of gold and test):

- The root is not scored. A tree whose label is ``""`` (the treebank's
  ``( (S ...) )``), ``TOP`` or ``ROOT`` is a wrapper: its children are the
  sentence, and the sentence's own constituent (an ``S`` over every word) is
  scored like any other. ``( (S ...) )``, ``(TOP (S ...))``,
  ``(ROOT (S ...))`` and ``(S ...)`` score the same.
- A preterminal (a node whose only child is a word) is a part-of-speech tag,
  not a bracket; tags are scored apart, as tagging accuracy.
- ``-NONE-`` preterminals (empty elements, traces) are removed with their
  "words"; a constituent left dominating nothing is removed with them
  (COLLINS.prm ``DELETE_LABEL -NONE-``).
- Labels lose their function tags and indices: ``NP-SBJ-1`` and ``NP=2`` are
  ``NP`` (everything from the first ``-`` or ``=`` goes). A label that begins
  with ``-`` (``-LRB-``, ``-NONE-``) is kept whole.
- ``PRT`` and ``ADVP`` are one label (``EQ_LABEL ADVP PRT``); `brackets`
  reports both as ``ADVP``.
- A constituent labelled ``TOP``, ``-NONE-`` or a punctuation tag below is
  not scored, its children are (``DELETE_LABEL`` on a non-terminal).
- A word directly under a phrase, beside other children (no tag of its own),
  is a word whose tag is ``""``.

Comparing a test tree with its gold tree (`score_sentence`):

- The word sequences, once ``-NONE-`` elements are removed and before
  punctuation is deleted, must be equal, else the sentence is an error
  sentence ("Length unmatch" / "Words unmatch" in EVALB): it is left out of
  every total and counted in `CorpusScore.error_sentences`.
- Punctuation is deleted before spans are counted: the words whose *gold*
  tag is one of ``,`` ``:`` ```` `` ``''`` ``.`` (COLLINS.prm's other
  ``DELETE_LABEL`` lines), and the words at the same positions of the test
  tree, whatever the test tagged them. A span is ``(start, end)``, end
  excluded, over the words that remain, so a bracket that differs from the
  gold one only by taking in or leaving out punctuation still matches.
- A constituent spanning no word once these deletions are made (one over
  traces or punctuation only) is not counted.
- Brackets match as a multiset of ``(label, start, end)``: each gold bracket
  matches at most one test bracket and the reverse, so the two ``NP`` of a
  gold unary chain ``(NP (NP ...))`` are two brackets, and one test ``NP``
  over the same span matches one of them (EVALB README, section 7.5).
- Tagging accuracy is over the words left after the deletions: a word counts
  as correct when its test tag equals its gold tag.
- A test tree of ``None`` (the parser gave no tree) is a parse with no
  brackets and no correct tags: every gold bracket is missed and every word
  mistagged, so failures lower the score (EVALB instead skips a sentence
  whose test line is empty).

Totals (`score_corpus`) are sums over the sentences counted, not means of
per-sentence figures: precision = matched / test brackets, recall =
matched / gold brackets, F1 = 2PR / (P + R), exact match = the share of
counted sentences whose matched, gold and test bracket counts are equal,
tagging accuracy = correct tags / words; all percentages, and 0.0 where a
denominator is zero. `CorpusScore.up_to_40` holds the same figures over the
sentences of at most `CUTOFF_LENGTH` words, a length that counts every gold
word but ``-NONE-`` elements, punctuation included (``CUTOFF_LEN 40`` and
``DELETE_LABEL_FOR_LENGTH -NONE-``; EVALB README, section 7.4).

Where this differs from the EVALB program, on purpose: punctuation is chosen
by the gold tags alone (EVALB deletes each tree's words by that tree's own
tags and calls the sentence a "Length unmatch" when a test tag differs from
a punctuation gold tag); a missing parse is penalised rather than skipped;
an unlabelled root and ``ROOT`` are unwrapped (COLLINS.prm deletes ``TOP``
only); labels beginning with ``-`` are not cut; there is no limit on
sentence length or error count, and crossing brackets are not reported.

Only the standard library is imported here.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from keras_transformer.parsing.tree import Tree

__all__ = [
    "CUTOFF_LENGTH",
    "CorpusScore",
    "SentenceScore",
    "brackets",
    "score_corpus",
    "score_sentence",
]

ROOT_LABELS = frozenset({"", "TOP", "ROOT"})
EMPTY_ELEMENT = "-NONE-"
PUNCTUATION_TAGS = frozenset({",", ":", "``", "''", "."})
UNSCORED_LABELS = frozenset({"TOP", EMPTY_ELEMENT}) | PUNCTUATION_TAGS
EQUAL_LABELS = {"PRT": "ADVP"}
CUTOFF_LENGTH = 40

Bracket = tuple[str, int, int]


@dataclass(frozen=True)
class SentenceScore:
    """One sentence's counts; all zero, with `error` saying why, when the
    sentence is not counted."""

    gold_brackets: int
    test_brackets: int
    matched: int
    words: int  # Gold words left after -NONE- and punctuation deletion.
    correct_tags: int
    error: str | None  # Why the sentence is not counted; None when it is.


@dataclass(frozen=True)
class CorpusScore:
    """Totals over a corpus; `up_to_40` is the same over the sentences of at
    most `CUTOFF_LENGTH` words (None inside that one)."""

    sentences: int  # Sentences counted (error sentences excluded).
    error_sentences: int
    gold_brackets: int
    test_brackets: int
    matched: int
    exact_matches: int
    words: int
    correct_tags: int
    up_to_40: CorpusScore | None = None

    @property
    def precision(self) -> float:
        """Labeled precision, percent: matched / test brackets."""
        return _percent(self.matched, self.test_brackets)

    @property
    def recall(self) -> float:
        """Labeled recall, percent: matched / gold brackets."""
        return _percent(self.matched, self.gold_brackets)

    @property
    def f1(self) -> float:
        """Labeled F1, percent: 2PR / (P + R)."""
        precision, recall = self.precision, self.recall
        if precision + recall == 0:
            return 0.0
        return 2 * precision * recall / (precision + recall)

    @property
    def exact_match(self) -> float:
        """Percent of counted sentences whose brackets all match."""
        return _percent(self.exact_matches, self.sentences)

    @property
    def tagging_accuracy(self) -> float:
        """Percent of words (punctuation excluded) tagged as in gold."""
        return _percent(self.correct_tags, self.words)

    def to_dict(self) -> dict:
        """The counts and percentages; `up_to_40` as a dict of its own."""
        counts = {
            "sentences": self.sentences,
            "error_sentences": self.error_sentences,
            "gold_brackets": self.gold_brackets,
            "test_brackets": self.test_brackets,
            "matched": self.matched,
            "exact_matches": self.exact_matches,
            "words": self.words,
            "correct_tags": self.correct_tags,
        }
        figures = {
            "precision": self.precision,
            "recall": self.recall,
            "f1": self.f1,
            "exact_match": self.exact_match,
            "tagging_accuracy": self.tagging_accuracy,
        }
        short = None if self.up_to_40 is None else self.up_to_40.to_dict()
        return {**counts, **figures, "up_to_40": short}

    def format_table(self) -> str:
        """A small report: one line for all sentences, one for length <= 40."""
        lines = [
            "Labeled bracketing (EVALB, COLLINS.prm)",
            f"{'':9} {'counted':>8} {'errors':>7} {'precision':>10} {'recall':>7}"
            f" {'F1':>7} {'exact':>7} {'tagging':>8}",
            self._table_row("all"),
        ]
        if self.up_to_40 is not None:
            lines.append(self.up_to_40._table_row(f"len<={CUTOFF_LENGTH}"))
        return "\n".join(lines)

    def _table_row(self, name: str) -> str:
        return (
            f"{name:9} {self.sentences:>8} {self.error_sentences:>7}"
            f" {self.precision:>10.2f} {self.recall:>7.2f} {self.f1:>7.2f}"
            f" {self.exact_match:>7.2f} {self.tagging_accuracy:>8.2f}"
        )


@dataclass(frozen=True)
class _Reading:
    """A tree once read: `(tag, word)` for each word left after -NONE-
    removal, and `(label, start, end)` over those words for each phrase
    (root wrapper excluded, labels as written)."""

    tagged_words: list[tuple[str, str]]
    phrases: list[Bracket]


def _percent(part: int, whole: int) -> float:
    return 100.0 * part / whole if whole else 0.0


def _read(tree: Tree) -> _Reading:
    tagged_words: list[tuple[str, str]] = []
    phrases: list[Bracket] = []

    def visit(node: Tree | str, is_root: bool) -> None:
        if isinstance(node, str):
            tagged_words.append(("", node))
        elif node.is_preterminal:
            if node.label != EMPTY_ELEMENT:
                tagged_words.append((node.label, node.children[0]))
        else:
            start = len(tagged_words)
            for child in node.children:
                visit(child, False)
            if not (is_root and node.label in ROOT_LABELS):
                phrases.append((node.label, start, len(tagged_words)))

    visit(tree, True)
    return _Reading(tagged_words, phrases)


def _scored_label(label: str) -> str:
    """`label` without function tags or indices, ADVP for PRT."""
    if not label.startswith("-"):
        for mark in "-=":
            label = label.split(mark, 1)[0]
    return EQUAL_LABELS.get(label, label)


def _punctuation(tagged_words: list[tuple[str, str]]) -> set[int]:
    return {i for i, (tag, _) in enumerate(tagged_words) if tag in PUNCTUATION_TAGS}


def _scored_brackets(reading: _Reading, deleted: set[int]) -> Counter:
    kept_before = [0]  # kept_before[i]: words kept among the first i.
    for position in range(len(reading.tagged_words)):
        kept_before.append(kept_before[-1] + (position not in deleted))
    scored: Counter = Counter()
    for label, start, end in reading.phrases:
        label = _scored_label(label)
        span = (kept_before[start], kept_before[end])
        if span[0] < span[1] and label not in UNSCORED_LABELS:
            scored[(label, *span)] += 1
    return scored


def brackets(tree: Tree, deleted: set[int] | None = None) -> Counter:
    """The multiset of `(label, start, end)` that `tree` is scored on.

    `deleted`: positions of words to delete before spans are counted, over
    the words left once -NONE- elements are removed; None deletes the
    words `tree` itself tags as punctuation (`score_sentence` passes the gold
    tree's punctuation positions for both trees).
    """
    reading = _read(tree)
    if deleted is None:
        deleted = _punctuation(reading.tagged_words)
    return _scored_brackets(reading, deleted)


def _words_error(gold: list[str], test: list[str]) -> str | None:
    """Why two word sequences cannot be scored together, or None."""
    if len(gold) != len(test):
        return f"length unmatch: {len(gold)} gold words, {len(test)} test words"
    for position, (gold_word, test_word) in enumerate(zip(gold, test)):
        if gold_word != test_word:
            return (
                f"words unmatch at word {position}: "
                f"gold {gold_word!r}, test {test_word!r}"
            )
    return None


def _correct_tags(gold: _Reading, test: _Reading, deleted: set[int]) -> int:
    pairs = zip(gold.tagged_words, test.tagged_words)
    return sum(
        gold_tag == test_tag
        for position, ((gold_tag, _), (test_tag, _)) in enumerate(pairs)
        if position not in deleted
    )


def _score(gold: Tree, test: Tree | None) -> tuple[SentenceScore, int]:
    """The sentence's score and its length for the cut-off (gold words but
    -NONE- elements, punctuation included)."""
    gold_reading = _read(gold)
    length = len(gold_reading.tagged_words)
    deleted = _punctuation(gold_reading.tagged_words)
    gold_brackets = _scored_brackets(gold_reading, deleted)
    words = length - len(deleted)
    if test is None:
        return SentenceScore(gold_brackets.total(), 0, 0, words, 0, None), length
    test_reading = _read(test)
    error = _words_error(
        [word for _, word in gold_reading.tagged_words],
        [word for _, word in test_reading.tagged_words],
    )
    if error is not None:
        return SentenceScore(0, 0, 0, 0, 0, error), length
    test_brackets = _scored_brackets(test_reading, deleted)
    score = SentenceScore(
        gold_brackets=gold_brackets.total(),
        test_brackets=test_brackets.total(),
        matched=(gold_brackets & test_brackets).total(),
        words=words,
        correct_tags=_correct_tags(gold_reading, test_reading, deleted),
        error=None,
    )
    return score, length


def score_sentence(gold: Tree, test: Tree | None) -> SentenceScore:
    """`test`'s brackets and tags against `gold`'s (None: no parse)."""
    return _score(gold, test)[0]


def _total(
    scores: Sequence[SentenceScore], up_to_40: CorpusScore | None = None
) -> CorpusScore:
    counted = [score for score in scores if score.error is None]
    return CorpusScore(
        sentences=len(counted),
        error_sentences=len(scores) - len(counted),
        gold_brackets=sum(score.gold_brackets for score in counted),
        test_brackets=sum(score.test_brackets for score in counted),
        matched=sum(score.matched for score in counted),
        exact_matches=sum(
            score.matched == score.gold_brackets == score.test_brackets
            for score in counted
        ),
        words=sum(score.words for score in counted),
        correct_tags=sum(score.correct_tags for score in counted),
        up_to_40=up_to_40,
    )


def score_corpus(gold: Sequence[Tree], test: Sequence[Tree | None]) -> CorpusScore:
    """Totals of `test[i]` against `gold[i]` over the corpus, with the
    figures for sentences of at most `CUTOFF_LENGTH` words in `up_to_40`.

    Raises:
        ValueError: `gold` and `test` differ in length.
    """
    if len(gold) != len(test):
        raise ValueError(
            f"{len(gold)} gold trees but {len(test)} test trees: "
            "score_corpus needs one test tree (or None) per gold tree."
        )
    scored = [_score(gold_tree, test_tree) for gold_tree, test_tree in zip(gold, test)]
    scores = [score for score, _ in scored]
    short = [score for score, length in scored if length <= CUTOFF_LENGTH]
    return _total(scores, up_to_40=_total(short))
