"""Bracketing F1 of simple parsing baselines on the Penn Treebank sample's dev
files, scored with the project's EVALB-equivalent scorer.

The split is `scripts/parsing_sample.sh`'s: train = wsj_0001-wsj_0159, dev =
wsj_0160-wsj_0179 (273 trees). Trees are read and cleaned by
`data.treebank.read_treebank` (``-NONE-`` removed, function tags stripped,
the wrapper unwrapped), the trees a parsing run is scored against, and each
baseline's trees are scored by `parsing.evalb.score_corpus`. Every baseline
keeps the gold part-of-speech tags (oracle tags):

- one S: a single ``S`` over all the words;
- right-branching: each word's tag, then a phrase over the rest of the
  sentence, every phrase labelled from its first tag (`phrase_label`); once
  with the root labelled that way too, once with an S root and $ -> NP
  (`sentence_right_branching`, which gives an earlier measurement's 30.5);
- PCFG: rule relative frequencies read off the training trees (under a TOP
  symbol, right-factored binarization with horizontal markovization; with
  and without parent annotation), each dev sentence's gold tags parsed
  with exact Viterbi CKY (numpy), unary chains through a unary closure;
  a sentence with no parse gets `sentence_right_branching`'s tree.

Unlabeled F1 scores the same trees with every phrase label made one
(`unlabeled`): the scorer has no unlabeled mode. Only the standard library
and numpy are imported (the package's ``__init__``, which starts Keras, is
skipped). The whole run takes about a minute on a 2-core CPU, nearly all of
it CKY.

    python benchmarks/parsing_baselines.py \
        --treebank ../shared/data/ptb-sample/wsj_0001-0179.mrg.tar.gz
"""

from __future__ import annotations

import argparse
import gc
import re
import sys
import time
import types
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]

# The package's __init__ imports Keras; the treebank reader and the scorer
# need only the standard library, so the package is replaced by an empty
# stand-in before they are imported (as scripts/mkdocs_hooks.py does).
if "keras_transformer" not in sys.modules:
    _package = types.ModuleType("keras_transformer")
    _package.__path__ = [str(ROOT / "keras_transformer")]
    sys.modules["keras_transformer"] = _package

from keras_transformer.data.treebank import read_treebank  # noqa: E402
from keras_transformer.parsing.evalb import (  # noqa: E402
    ROOT_LABELS,
    UNSCORED_LABELS,
    CorpusScore,
    score_corpus,
)
from keras_transformer.parsing.tree import Tree  # noqa: E402

TRAIN = (1, 159)
DEV = (160, 179)
TOP = "TOP"  # The PCFG's start symbol, over each sentence's own root.
PARENT_MARK = "^"  # NP^S: an NP whose parent is an S (parent annotation).
FACTORED_MARK = "@"  # @NP|DT: the rest of an NP after a DT (binarization).
# Siblings an intermediate symbol remembers (horizontal markovization): of
# 0, 1, 2 and 3 tried on these dev trees, 2 was best with and without parent
# annotation (0: 64.8 and 69.5 labeled F1, 1: 69.7 and 75.4, 3: 70.4 and 75.9).
HORIZONTAL = 2
_MEMBER = re.compile(r"wsj_(\d{4})\.mrg")
# Elements gathered at once in a CKY step, bounding its temporary arrays.
_CHUNK_ELEMENTS = 1 << 22


# --------------------------------------------------------------------------
# Data and scoring
# --------------------------------------------------------------------------


def read_split(treebank: Path, files: tuple[int, int]) -> list[Tree]:
    """The cleaned trees of wsj_NNNN.mrg, NNNN in `files` (inclusive), of a
    treebank archive or directory, as `scripts/parsing_sample.sh` splits it."""

    def wanted(name: str) -> bool:
        match = _MEMBER.fullmatch(name)
        return bool(match) and files[0] <= int(match.group(1)) <= files[1]

    return [sentence.tree for sentence in read_treebank(treebank, members=wanted)]


def unlabeled(tree: Tree) -> Tree:
    """`tree` with every scored phrase label made ``X``; tags, the root
    wrapper and the labels the scorer skips are kept, so the same brackets
    count, whatever their labels."""
    if tree.is_preterminal:
        return tree
    keep = tree.label in UNSCORED_LABELS or tree.label in ROOT_LABELS
    children = tuple(
        child if isinstance(child, str) else unlabeled(child) for child in tree.children
    )
    return Tree(tree.label if keep else "X", children)


@dataclass(frozen=True)
class Row:
    """One baseline's scores, time and notes."""

    name: str
    labeled: CorpusScore
    unlabeled: CorpusScore
    seconds: str
    notes: str


def score_row(
    name: str, gold: Sequence[Tree], test: Sequence[Tree], seconds: str, notes: str
) -> Row:
    """`test` scored against `gold`, labeled and unlabeled."""
    return Row(
        name,
        score_corpus(gold, test),
        score_corpus([unlabeled(t) for t in gold], [unlabeled(t) for t in test]),
        seconds,
        notes,
    )


def table(rows: Sequence[Row]) -> str:
    """The markdown table of `rows`."""
    lines = [
        "| baseline (gold tags) | labeled F1 | unlabeled F1 | labeled precision"
        " | labeled recall | time | notes |",
        "| --- | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for row in rows:
        lines.append(
            f"| {row.name} | {row.labeled.f1:.2f} | {row.unlabeled.f1:.2f}"
            f" | {row.labeled.precision:.2f} | {row.labeled.recall:.2f}"
            f" | {row.seconds} | {row.notes} |"
        )
    return "\n".join(lines)


# --------------------------------------------------------------------------
# Baselines without a grammar
# --------------------------------------------------------------------------


def preterminals(tree: Tree) -> list[Tree]:
    """The gold `(TAG word)` nodes of `tree`, left to right."""
    return [Tree(tag, (word,)) for tag, word in tree.tagged_words()]


def one_s(tree: Tree) -> Tree:
    """A single S over `tree`'s tagged words."""
    return Tree("S", tuple(preterminals(tree)))


def phrase_label(tag: str) -> str:
    """The phrase a tag most often begins: VB*/MD/TO -> VP, IN -> PP,
    NN*/JJ*/DT/PRP*/CD -> NP, RB* -> ADVP, W* -> SBAR, else S."""
    if tag.startswith("VB") or tag in ("MD", "TO"):
        return "VP"
    if tag == "IN":
        return "PP"
    if tag.startswith(("NN", "JJ", "PRP")) or tag in ("DT", "CD"):
        return "NP"
    if tag.startswith("RB"):
        return "ADVP"
    if tag.startswith("W"):
        return "SBAR"
    return "S"


def phrase_label_dollar(tag: str) -> str:
    """`phrase_label`, and $ -> NP: a sum of money, (NP ($ $) (CD 35.2) ...),
    is the treebank's usual phrase after a $."""
    return "NP" if tag == "$" else phrase_label(tag)


def right_branching(
    tree: Tree,
    root: str | None = None,
    label: Callable[[str], str] = phrase_label,
) -> Tree:
    """Each word's tag, then a phrase over the rest: (X t0 (Y t1 (... tn)));
    each phrase labelled `label` of its first tag, the root `root` if given."""
    nodes = preterminals(tree)
    if len(nodes) == 1:
        built = Tree(label(nodes[0].label), tuple(nodes))
    else:
        built = Tree(label(nodes[-2].label), tuple(nodes[-2:]))
        for node in reversed(nodes[:-2]):
            built = Tree(label(node.label), (node, built))
    return built if root is None else Tree(root, built.children)


def sentence_right_branching(tree: Tree) -> Tree:
    """`right_branching` with an S root and $ -> NP: the variant that gives
    the earlier measurement's 30.5 labeled F1 (the root is an S in 251 of
    the 273 dev trees)."""
    return right_branching(tree, root="S", label=phrase_label_dollar)


# --------------------------------------------------------------------------
# PCFG: trees to rules and back
# --------------------------------------------------------------------------


def annotate_parents(tree: Tree, parent: str | None = None) -> Tree:
    """`tree` with each phrase label (not the root's, not tags) followed by
    its parent's: (S (NP ...)) -> (S (NP^S ...)). Tags stay as they are:
    they are given, so they need no splitting."""
    if tree.is_preterminal:
        return tree
    label = tree.label if parent is None else f"{tree.label}{PARENT_MARK}{parent}"
    children = tuple(
        child if isinstance(child, str) else annotate_parents(child, tree.label)
        for child in tree.children
    )
    return Tree(label, children)


def binarize(tree: Tree, horizontal: int = HORIZONTAL) -> Tree:
    """`tree` right-factored into nodes of at most two children: A -> B C D
    is A -> B @A|B, @A|B -> C D; an intermediate symbol names the last
    `horizontal` siblings before it (fewer symbols, more shared counts)."""
    if tree.is_preterminal:
        return tree
    children = [binarize(child, horizontal) for child in tree.children]
    return Tree(tree.label, _factored(tree.label, children, [], horizontal))


def _factored(
    label: str, children: list[Tree], seen: list[str], horizontal: int
) -> tuple[Tree, ...]:
    if len(children) <= 2:
        return tuple(children)
    seen = [*seen, children[0].label]
    context = " ".join(seen[max(0, len(seen) - horizontal) :])
    rest = _factored(label, children[1:], seen, horizontal)
    return (children[0], Tree(f"{FACTORED_MARK}{label}|{context}", rest))


def debinarize(tree: Tree) -> Tree:
    """`binarize` and `annotate_parents` undone: intermediate nodes spliced
    into their parents, parent marks dropped."""
    if tree.is_preterminal:
        return tree
    return Tree(tree.label.split(PARENT_MARK, 1)[0], tuple(_spliced(tree)))


def _spliced(tree: Tree) -> list[Tree]:
    children: list[Tree] = []
    for child in tree.children:
        if child.label.startswith(FACTORED_MARK) and not child.is_preterminal:
            children += _spliced(child)
        else:
            children.append(debinarize(child))
    return children


def grammar_tree(tree: Tree, parents: bool, horizontal: int = HORIZONTAL) -> Tree:
    """The tree the grammar's counts are read from: under TOP, parent
    annotated if `parents`, binarized (`horizontal`: see `binarize`)."""
    rooted = Tree(TOP, (tree,))
    return binarize(annotate_parents(rooted) if parents else rooted, horizontal)


def count_rules(trees: Sequence[Tree]) -> Counter:
    """`(parent, *children labels)` -> count, over every phrase node."""
    counts: Counter = Counter()
    stack = list(trees)
    while stack:
        node = stack.pop()
        if node.is_preterminal:
            continue
        counts[(node.label, *(child.label for child in node.children))] += 1
        stack += node.children
    return counts


# --------------------------------------------------------------------------
# PCFG: the grammar as arrays
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class Grammar:
    """A binarized PCFG by relative frequency, as arrays for CKY.

    Binary rules are sorted by parent: `binary_parent[r] -> binary_left[r]
    binary_right[r]` with log-probability `binary_logp[r]`. `closure[a, b]`
    is the log-probability of the best unary chain (one rule or more) from
    `unary[a]` down to `unary[b]`, `-inf` where there is none; `next_hop[a,
    b]` is the chain's symbol after `unary[a]` (an index into `unary`).
    """

    symbols: list[str]
    index: dict[str, int]
    binary_parent: np.ndarray
    binary_left: np.ndarray
    binary_right: np.ndarray
    binary_logp: np.ndarray
    unary: np.ndarray  # Symbol indices of the closure's rows and columns.
    closure: np.ndarray
    next_hop: np.ndarray
    unary_rules: int


def read_grammar(
    trees: Sequence[Tree], parents: bool, horizontal: int = HORIZONTAL
) -> Grammar:
    """The PCFG of `trees` (cleaned treebank trees), parent annotated (vertical
    markovization 2) if `parents`, `horizontal` siblings in its intermediate
    symbols."""
    counts = count_rules([grammar_tree(t, parents, horizontal) for t in trees])
    totals: Counter = Counter()
    for rule, count in counts.items():
        totals[rule[0]] += count
    symbols = sorted({label for rule in counts for label in rule})
    index = {symbol: i for i, symbol in enumerate(symbols)}
    binary = sorted(
        (index[rule[0]], index[rule[1]], index[rule[2]], count / totals[rule[0]])
        for rule, count in counts.items()
        if len(rule) == 3
    )
    parent, left, right, probability = (np.array(column) for column in zip(*binary))
    unary = {
        rule: count / totals[rule[0]]
        for rule, count in counts.items()
        if len(rule) == 2
    }
    chain_symbols, closure, next_hop = unary_closure(unary, index)
    return Grammar(
        symbols,
        index,
        parent.astype(np.int64),
        left.astype(np.int64),
        right.astype(np.int64),
        np.log(probability).astype(np.float32),
        chain_symbols,
        closure,
        next_hop,
        len(unary),
    )


def unary_closure(
    rules: dict[tuple[str, str], float], index: dict[str, int]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The unary symbols, the best chain's log-probability between each two
    (Floyd-Warshall in max-plus) and each chain's next symbol."""
    names = sorted({name for rule in rules for name in rule})
    local = {name: i for i, name in enumerate(names)}
    size = len(names)
    closure = np.full((size, size), -np.inf)
    next_hop = np.tile(np.arange(size), (size, 1))
    for (above, below), probability in rules.items():
        closure[local[above], local[below]] = np.log(probability)
    for middle in range(size):
        through = closure[:, middle : middle + 1] + closure[middle : middle + 1, :]
        better = through > closure
        closure = np.where(better, through, closure)
        next_hop = np.where(better, next_hop[:, middle : middle + 1], next_hop)
    # A cycle never helps (log-probabilities are negative): no chain from a
    # symbol to itself, so the closure's diagonal means "no unary".
    np.fill_diagonal(closure, -np.inf)
    symbols = np.array([index[name] for name in names], dtype=np.int64)
    return symbols, closure.astype(np.float32), next_hop


# --------------------------------------------------------------------------
# PCFG: Viterbi CKY over the gold tags
# --------------------------------------------------------------------------


@dataclass
class Chart:
    """Best log-probabilities per span and symbol: `binary[i, j]` before the
    unary closure (a tag's 0 on one-word spans), `best[i, j]` after."""

    binary: np.ndarray
    best: np.ndarray


def cky(grammar: Grammar, tags: Sequence[str]) -> Chart:
    """The Viterbi chart of `tags` (all spans, all symbols); exact, with the
    rules that cannot apply (a child dead in every cell) skipped."""
    n, size = len(tags), len(grammar.symbols)
    chart = Chart(
        np.full((n + 1, n + 1, size), -np.inf, np.float32),
        np.full((n + 1, n + 1, size), -np.inf, np.float32),
    )
    for i, tag in enumerate(tags):
        if tag in grammar.index:  # A tag the training trees lack: no parse.
            chart.binary[i, i + 1, grammar.index[tag]] = 0.0
    _close(grammar, chart, 1, n)
    for length in range(2, n + 1):
        starts = np.arange(n - length + 1)
        for chunk in np.array_split(starts, _chunks(grammar, len(starts), length)):
            _binary_step(grammar, chart, chunk, length)
        _close(grammar, chart, length, n)
    return chart


def _chunks(grammar: Grammar, starts: int, length: int) -> int:
    elements = starts * (length - 1) * len(grammar.binary_parent)
    return max(1, min(starts, -(-elements // _CHUNK_ELEMENTS)))


def _binary_step(
    grammar: Grammar, chart: Chart, starts: np.ndarray, length: int
) -> None:
    """`chart.binary` of the spans of `length` from `starts`: for each rule,
    its best split, then the best rule of each parent."""
    splits = np.arange(1, length)
    middles = starts[:, None] + splits[None, :]
    left = chart.best[starts[:, None], middles]  # (starts, splits, symbols)
    right = chart.best[middles, (starts + length)[:, None]]
    live = (
        np.isfinite(left).any(axis=(0, 1))[grammar.binary_left]
        & np.isfinite(right).any(axis=(0, 1))[grammar.binary_right]
    )
    if not live.any():
        return
    rules = np.flatnonzero(live)
    scores = (
        left[:, :, grammar.binary_left[rules]]
        + right[:, :, grammar.binary_right[rules]]
    )
    scores = scores.max(axis=1) + grammar.binary_logp[rules]
    parents = grammar.binary_parent[rules]
    # Rules are sorted by parent: each parent's rules are one segment.
    first = np.flatnonzero(np.r_[True, parents[1:] != parents[:-1]])
    best = np.maximum.reduceat(scores, first, axis=1)
    chart.binary[starts[:, None], (starts + length)[:, None], parents[first]] = best


def _close(grammar: Grammar, chart: Chart, length: int, n: int) -> None:
    """`chart.best` of every span of `length`: `chart.binary` or a unary
    chain over a symbol of it, whichever is better."""
    starts = np.arange(n - length + 1)
    ends = starts + length
    binary = chart.binary[starts, ends]  # (spans, symbols)
    below = binary[:, grammar.unary]
    live = np.flatnonzero(np.isfinite(below).any(axis=0))
    best = binary.copy()
    if len(live):
        chains = below[:, None, live] + grammar.closure[None, :, live]
        above = grammar.unary
        best[:, above] = np.maximum(best[:, above], chains.max(axis=2))
    chart.best[starts, ends] = best


def viterbi_tree(
    grammar: Grammar, tags: Sequence[str], words: Sequence[str]
) -> Tree | None:
    """The best tree of `tags` over `words` (grammar symbols, binarized), or
    None when the grammar derives no TOP over them."""
    chart = cky(grammar, tags)
    n, top = len(tags), grammar.index[TOP]
    if not np.isfinite(chart.best[0, n, top]):
        return None
    return _best(grammar, chart, words, 0, n, top)


def _best(grammar: Grammar, chart: Chart, words, i: int, j: int, symbol: int) -> Tree:
    """The Viterbi subtree of `symbol` over `i..j`, after the unary closure:
    a chain down to a symbol of `chart.binary`, then its rule."""
    rows = np.flatnonzero(grammar.unary == symbol)
    if len(rows):
        row = rows[0]
        chains = grammar.closure[row] + chart.binary[i, j, grammar.unary]
        column = int(np.argmax(chains))
        if chains[column] > chart.binary[i, j, symbol]:
            return _chain(grammar, chart, words, i, j, row, column)
    return _binary_best(grammar, chart, words, i, j, symbol)


def _chain(grammar: Grammar, chart: Chart, words, i, j, row, column) -> Tree:
    """The unary chain from `unary[row]` to `unary[column]`, then the
    latter's binary subtree."""
    labels = [row]
    while labels[-1] != column:
        labels.append(int(grammar.next_hop[labels[-1], column]))
    node = _binary_best(grammar, chart, words, i, j, int(grammar.unary[column]))
    for local in reversed(labels[:-1]):
        node = Tree(grammar.symbols[grammar.unary[local]], (node,))
    return node


def _binary_best(grammar: Grammar, chart: Chart, words, i, j, symbol) -> Tree:
    """`symbol` over `i..j` by its best binary rule and split (a tag over
    its word on one-word spans)."""
    if j - i == 1:
        return Tree(grammar.symbols[symbol], (words[i],))
    rules = np.flatnonzero(grammar.binary_parent == symbol)
    middles = np.arange(i + 1, j)
    left = chart.best[i, middles][:, grammar.binary_left[rules]]
    right = chart.best[middles, j][:, grammar.binary_right[rules]]
    scores = left + right + grammar.binary_logp[rules]
    split, rule = np.unravel_index(int(np.argmax(scores)), scores.shape)
    middle, rule = int(middles[split]), int(rules[rule])
    return Tree(
        grammar.symbols[symbol],
        (
            _best(grammar, chart, words, i, middle, int(grammar.binary_left[rule])),
            _best(grammar, chart, words, middle, j, int(grammar.binary_right[rule])),
        ),
    )


def pcfg_parse(grammar: Grammar, tree: Tree) -> Tree | None:
    """The PCFG's Viterbi tree over `tree`'s gold tags and words, debinarized,
    or None when there is no parse."""
    tagged = tree.tagged_words()
    found = viterbi_tree(grammar, [t for t, _ in tagged], [w for _, w in tagged])
    if found is None:
        return None
    return debinarize(found.children[0])  # Below TOP: the sentence's root.


# --------------------------------------------------------------------------
# Running the baselines
# --------------------------------------------------------------------------


def simple_row(
    name: str, build: Callable[[Tree], Tree], gold: list[Tree], notes: str = ""
) -> Row:
    """A baseline that builds each tree from its gold tree's tagged words."""
    start = time.perf_counter()
    test = [build(tree) for tree in gold]
    return score_row(name, gold, test, _seconds(start), notes)


def pcfg_row(
    name: str,
    train: list[Tree],
    gold: list[Tree],
    parents: bool,
    args: argparse.Namespace,
) -> Row:
    """Read the grammar, parse each dev sentence of at most `args.max_length`
    words (`sentence_right_branching` for the rest and for any without a
    parse), score."""
    start, max_length = time.perf_counter(), args.max_length
    grammar = read_grammar(train, parents, args.horizontal)
    read = time.perf_counter() - start
    test, too_long, failed = [], 0, 0
    for tree in gold:
        parsed = None
        if len(tree.tagged_words()) <= max_length:
            parsed = pcfg_parse(grammar, tree)
            failed += parsed is None
        else:
            too_long += 1
        test.append(parsed or sentence_right_branching(tree))
    seconds = f"{read:.1f} s + {time.perf_counter() - start - read:.1f} s"
    notes = (
        f"h={args.horizontal}; {len(grammar.symbols)} symbols,"
        f" {len(grammar.binary_parent)} binary + {grammar.unary_rules} unary"
        f" rules; right-branching for {failed} without a parse,"
        f" {too_long} over {max_length} words"
    )
    return score_row(name, gold, test, seconds, notes)


def _seconds(start: float) -> str:
    return f"{time.perf_counter() - start:.2f} s"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--treebank",
        type=Path,
        required=True,
        help="the sample's .tar.gz, or a directory holding wsj_NNNN.mrg files",
    )
    parser.add_argument(
        "--max-length",
        type=int,
        default=100,
        help="PCFG: longer dev sentences get the right-branching tree",
    )
    parser.add_argument(
        "--horizontal",
        type=int,
        default=HORIZONTAL,
        help="PCFG: siblings remembered in binarization (markovization)",
    )
    args = parser.parse_args()
    start = time.perf_counter()
    train, gold = read_split(args.treebank, TRAIN), read_split(args.treebank, DEV)
    # The trees live to the end: without this the cycle collector walks
    # them again and again, a quarter of a second that lands in whichever
    # baseline's timing happens to trigger it.
    gc.freeze()
    rows = [
        simple_row("one S over all words", one_s, gold),
        simple_row(
            "right-branching, every phrase labelled from its first tag",
            right_branching,
            gold,
            "the rule as stated, the root included",
        ),
        simple_row(
            "right-branching, root S, the rest from the first tag ($ -> NP)",
            sentence_right_branching,
            gold,
            "the PCFG rows' fallback",
        ),
        pcfg_row("PCFG, Viterbi CKY", train, gold, False, args),
        pcfg_row("PCFG + parent annotation, Viterbi CKY", train, gold, True, args),
    ]
    print(table(rows))
    print(
        f"\n{len(gold)} dev sentences (wsj_0160-0179, {rows[0].labeled.sentences}"
        f" scored); PCFG grammars read off {len(train)} training trees"
        " (wsj_0001-0159). Oracle part-of-speech tags in every row; times:"
        " building the trees (PCFG: reading the grammar + parsing), not scoring;"
        f" {time.perf_counter() - start:.0f} s in all."
    )


if __name__ == "__main__":
    main()
