"""Parsing with a trained model: sentences to trees, and trees to F1.

`parse_sentences` runs a search (any strings-in, strings-out `Translator`)
on each sentence's words and turns each output into a tree over exactly
those words (`linearize.delinearize`, which repairs and names what it
repaired). An empty sentence is not searched: it has no tree, and its line
of output is empty. `evaluate_parses` scores trees against gold ones with
the EVALB-equivalent `evalb.score_corpus` and counts the repairs.

Only the standard library and `keras_transformer.parsing` are imported
here: the search comes in as an argument.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path

from keras_transformer.parsing.evalb import CorpusScore, score_corpus
from keras_transformer.parsing.linearize import Delinearized, delinearize
from keras_transformer.parsing.tree import Tree, TreeError, parse_tree, split_tagged


@dataclasses.dataclass(frozen=True)
class ParsingResult:
    """A corpus's labeled bracketing scores and how many parses were repaired.

    `sentences` counts every parse; `score.sentences` only those scored (a
    sentence whose words differ from the gold's is not).
    """

    score: CorpusScore
    sentences: int
    repaired: int
    repairs: dict[str, int]

    def __str__(self) -> str:
        score = self.score
        return (
            f"F1 {score.f1:.2f} (precision {score.precision:.2f}, recall "
            f"{score.recall:.2f}, exact match {score.exact_match:.2f}; "
            f"{self.sentences} sentences, {self.repaired} repaired)"
        )

    def to_dict(self) -> dict:
        """The scores (F1 and the rest as percentages) and the repairs."""
        return {
            **self.score.to_dict(),
            "parsed": self.sentences,
            "repaired": self.repaired,
            "repairs": dict(self.repairs),
        }

    def report(self) -> str:
        """The scorer's table and a line about repairs."""
        named = ", ".join(f"{name} {count}" for name, count in self.repairs.items())
        repairs = f"repaired parses: {self.repaired} of {self.sentences}"
        return (
            self.score.format_table()
            + "\n"
            + repairs
            + (f" ({named})" if named else "")
        )


def parse_sentences(
    translate: Callable[[list[str]], list[str]],
    sentences: Sequence[Sequence[str]],
    *,
    with_words: bool = False,
    given_tags: Sequence[Sequence[str]] | None = None,
) -> list[Delinearized | None]:
    """One parse per sentence (None for an empty one), in order; `with_words`:
    the model was trained on targets with the words (`linearize`).
    `given_tags`: a tag per word of each sentence, which the parses keep
    (the search writes them: `Translator.search`); `translate` then takes
    them as its second argument."""
    sentences = [list(words) for words in sentences]
    wanted = [index for index, words in enumerate(sentences) if words]
    texts = [" ".join(sentences[index]) for index in wanted]
    if given_tags is None:
        outputs = translate(texts)
    else:
        outputs = translate(texts, [list(given_tags[index]) for index in wanted])
    parses: list[Delinearized | None] = [None] * len(sentences)
    for index, output in zip(wanted, outputs, strict=True):
        parses[index] = delinearize(
            output.split(), sentences[index], with_words=with_words
        )
    return parses


def tagged_sentences(
    lines: Sequence[str], source: str
) -> tuple[list[list[str]], list[list[str]]]:
    """The words and the tags of tagged lines (``word/TAG``, `split_tagged`);
    an error names `source` and the line."""
    pairs = [
        split_tagged(line, f"{source}:{number}")
        for number, line in enumerate(lines, start=1)
    ]
    return [words for words, _ in pairs], [tags for _, tags in pairs]


def trees_text(parses: Sequence[Delinearized | None]) -> str:
    """One bracketed tree per line; an empty line for an empty sentence."""
    return "".join(
        ("" if parse is None else parse.tree.to_string()) + "\n" for parse in parses
    )


def repaired(parses: Sequence[Delinearized | None]) -> int:
    """How many parses needed a repair."""
    return sum(1 for parse in parses if parse is not None and parse.repaired)


def repair_counts(parses: Sequence[Delinearized | None]) -> dict[str, int]:
    """How many parses needed each kind of repair, most frequent first."""
    counts = Counter(
        name for parse in parses if parse is not None for name in parse.repairs
    )
    return dict(counts.most_common())


def evaluate_parses(
    parses: Sequence[Delinearized | None], gold: Sequence[Tree]
) -> ParsingResult:
    """Score `parses` (None: no tree, every gold bracket missed) against `gold`."""
    score = score_corpus(gold, [None if p is None else p.tree for p in parses])
    return ParsingResult(score, len(parses), repaired(parses), repair_counts(parses))


def read_parses(
    path: str | Path, gold: Sequence[Tree], *, lenient_utf8: bool = False
) -> list[Delinearized | None]:
    """The trees of a `parse` output file, one per line, line for line with
    `gold` (an empty line: no tree). A tree that does not read is an error
    naming the file and line; one over other words is scored as EVALB does.
    `lenient_utf8`: invalid UTF-8 becomes U+FFFD (`read_text_lines`)."""
    from keras_transformer.data.text_files import DataError, read_text_lines

    lines = read_text_lines(path, lenient_utf8=lenient_utf8)
    if len(lines) != len(gold):
        raise DataError(
            f"{path} has {len(lines)} lines but the gold treebank has "
            f"{len(gold)} trees: they must match one for one."
        )
    parses: list[Delinearized | None] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            parses.append(None)
            continue
        try:
            tree = parse_tree(line, str(path), number)
        except TreeError as error:
            raise DataError(str(error)) from None
        parses.append(Delinearized(tree, ()))
    return parses


def _split_trees(
    sources: Sequence[str], targets: Sequence[str], with_words: bool
) -> list[Tree]:
    """Gold trees back from (words, linearized tree) pairs: lossless."""
    return [
        delinearize(target.split(), source.split(), with_words=with_words).tree
        for source, target in zip(sources, targets)
    ]


def evaluate_parser_split(
    translate: Callable[[list[str]], list[str]],
    corpus,
    trees_path: str | Path | None = None,
    *,
    with_words: bool = False,
) -> ParsingResult:
    """Parse a whole evaluation split (a `ParallelCorpus` of words and
    linearized trees) and score it; write the trees to `trees_path`."""
    gold = _split_trees(corpus.source, corpus.target, with_words)
    parses = parse_sentences(
        translate, [tree.words() for tree in gold], with_words=with_words
    )
    if trees_path is not None:
        from keras_transformer.utils.atomic_files import atomic_write_text

        atomic_write_text(Path(trees_path), trees_text(parses))
    return evaluate_parses(parses, gold)


def linearized_f1(
    sources: Sequence[str],
    targets: Sequence[str],
    hypotheses: Sequence[str],
    *,
    with_words: bool = False,
) -> dict[str, float]:
    """Dev figures from linearized outputs: labeled F1 and repairs."""
    gold = _split_trees(sources, targets, with_words)
    parses = [
        delinearize(output.split(), tree.words(), with_words=with_words)
        if tree.words()
        else None
        for output, tree in zip(hypotheses, gold)
    ]
    result = evaluate_parses(parses, gold)
    return {"dev_f1": round(result.score.f1, 2), "dev_repaired": result.repaired}
