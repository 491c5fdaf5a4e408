"""Constituency trees to the parser's target tokens and back, repairing bad output.

The target side of the parsing task (the paper's Table 4) is a tree written as
a token sequence, as in Vinyals et al. 2015, "Grammar as a foreign language",
and tensor2tensor's wsj_parsing: part-of-speech tags are kept, words are
dropped (the source sentence supplies them). A phrase ``(NP ...)`` becomes
``(NP`` ... ``)NP``; a preterminal ``(NNP Pierre)`` becomes its tag ``NNP``::

    (S (NP (NNP Pierre)) (VP (VBZ runs)) (. .))
    (S (NP NNP )NP (VP VBZ )VP . )S

`linearize` takes a cleaned tree (no ``-NONE-``, function tags stripped; a
tree labelled ``""``, the treebank's unlabelled root, with one child is read
as that child). Every label must be a whitespace-free atom without ``(`` or
``)`` and other than the junk tokens below; a phrase must have children, all
of them trees; the tree itself must be a phrase, not a preterminal. Anything
else is a `ValueError`, so that every tree `linearize` accepts comes back
from `delinearize` unchanged and unrepaired.

With ``with_words=True`` each tag is followed by its word, a copy of the
source's (``(S (NP NNP Pierre )NP (VP VBZ runs )VP . . )S``): the targets
are longer, but the decoder can find its place in the sentence by the word
it has just written instead of by counting tags, which a small model
trained briefly learns much sooner (docs/parsing-table4.md has the figures).
Reading such output, the token after a tag is its copy when it is that
word, or ``<unk>`` (the vocabulary's stand-in for a rare word); the tree
takes the input's word. Any other token after a tag means the copy is
missing ("missing word") and is read as the next token in its own right, so
one lost copy does not shift every later tag onto the wrong word. (After a
tag dropped as an "extra tag", any token but a bracket is taken as its
copy.)

`delinearize` puts the words back and always returns a tree whose words are
exactly the given words, in order, whatever the tokens (a model's output may
be anything). A string of tokens is split on whitespace. It reads the tokens
left to right:

1. ``<unk>``, ``<pad>``, ``<s>``, ``</s>``, the empty string, and any token
   that is not a well-formed atom (``(`` or ``)`` alone, whitespace, a bracket
   after the first character, ``(<unk>``) are dropped: "unknown token".
2. ``(X`` opens a phrase labelled X inside the innermost open phrase.
3. ``)X`` closes the innermost open phrase. If that phrase is not labelled X,
   it is closed anyway and keeps its own label: "label mismatch". If no phrase
   is open, the token is dropped: "close without open". A phrase closed with
   no children is removed: "empty phrase".
4. Any other token is a tag: a preterminal over the next unused word, in the
   innermost open phrase (at top level if none is open). With every word used
   the tag is dropped: "extra tag".

At the end of the tokens:

5. Phrases still open are closed, innermost first: "unclosed" (and each left
   with no children is removed: "empty phrase").
6. Words left without a tag become preterminals tagged `fallback_tag`, in
   order, appended to the end of the last top-level node if it is a phrase
   (the outermost phrase ending at the sentence end), or else added as
   top-level nodes: "missing tags".
7. One top-level phrase is the tree. Several top-level nodes are wrapped in a
   phrase labelled `root_label`: "several roots". No top-level node, or a
   single preterminal, gives a `root_label` phrase over them: "no root
   phrase". So an empty sentence gives ``Tree(root_label, ())``, written
   ``(S)``, which `parse_tree` reads back as the same tree.

`Delinearized.repairs` names each repair applied, once, in the order each was
first needed; it is empty exactly when the tokens are `linearize` of a tree
with as many tags as there are words, and that tree is then returned. Words
are placed verbatim (a word with whitespace or brackets in it is kept, though
its bracketed form would not read back).

Only the standard library is imported here.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from keras_transformer.parsing.evalb import PUNCTUATION_TAGS
from keras_transformer.parsing.tree import Tree

__all__ = [
    "Delinearized",
    "delinearize",
    "linearize",
    "linearize_text",
    "target_vocabulary",
    "token_role",
]

_JUNK_TOKENS = frozenset({"<unk>", "<pad>", "<s>", "</s>", ""})

_UNKNOWN_TOKEN = "unknown token"
_CLOSE_WITHOUT_OPEN = "close without open"
_LABEL_MISMATCH = "label mismatch"
_EXTRA_TAG = "extra tag"
_MISSING_TAGS = "missing tags"
_UNCLOSED = "unclosed"
_EMPTY_PHRASE = "empty phrase"
_SEVERAL_ROOTS = "several roots"
_NO_ROOT_PHRASE = "no root phrase"
_MISSING_WORD = "missing word"


def _is_label(text: str) -> bool:
    """True for a label the token scheme can carry and read back."""
    if text in _JUNK_TOKENS:
        return False
    return not any(char.isspace() or char in "()" for char in text)


def token_role(token: str) -> tuple[str, str | None]:
    """What `delinearize` reads `token` as (the rules of the module
    docstring): ``("open", X)`` for ``(X``, ``("close", X)`` for ``)X``,
    ``("tag", token)`` for any other well-formed atom, ``("junk", None)``
    for what it drops as an unknown token. A search that keeps to a tree
    (`decoding.tree_grammar`) classifies its vocabulary with this."""
    if token[:1] in ("(", ")") and _is_label(token[1:]):
        return ("open" if token[0] == "(" else "close"), token[1:]
    if _is_label(token):
        return "tag", token
    return "junk", None


def bracket_ids(vocabulary) -> tuple[int, ...]:
    """The ids of `vocabulary` (tokens by id) that are not tags: the phrase
    brackets, and any other token `delinearize` drops but the reserved ones
    (which the pointer skips by id). What a decoder's word pointer
    (`layers.WordPointer`) does not move at."""
    return tuple(
        token_id
        for token_id, token in enumerate(vocabulary)
        if token not in _JUNK_TOKENS and token_role(token)[0] != "tag"
    )


def _check_label(label: str) -> None:
    if not _is_label(label):
        raise ValueError(
            f"label {label!r} cannot be a target token (empty, whitespace, a "
            "bracket, or a junk token such as '<unk>')."
        )


def _unwrap_root(tree: Tree) -> Tree:
    """The tree under the treebank's unlabelled root, or `tree` itself."""
    if tree.label == "" and len(tree.children) == 1:
        child = tree.children[0]
        if isinstance(child, Tree):
            return child
    return tree


def _check_phrase(phrase: Tree) -> None:
    if not phrase.children:
        raise ValueError(f"phrase {phrase.label!r} has no children.")
    if any(isinstance(child, str) for child in phrase.children):
        raise ValueError(
            f"phrase {phrase.label!r} has a word among its children (only a "
            "preterminal's one child may be a word)."
        )


def linearize(
    tree: Tree, *, with_words: bool = False, tag: str | None = None
) -> list[str]:
    """The target tokens of `tree`: ``(X`` / ``)X`` per phrase, a tag per word
    (followed by the word itself with `with_words`); with `tag`, every
    part-of-speech tag written as that one (Vinyals et al. 2015's ``XX``)
    but the punctuation tags, by which the scorer deletes punctuation
    (`evalb.PUNCTUATION_TAGS`): gold trees read back from such targets
    score parses as the treebank's own trees do.

    Raises:
        ValueError: A label that is not a whitespace-free, bracket-free atom,
            a phrase with no children or with a word among them, or a tree
            that is a preterminal (see the module docstring).
    """
    root = _unwrap_root(tree)
    if root.is_preterminal:
        raise ValueError(
            f"the tree is a preterminal ({root.to_string()}); the target of a "
            "sentence is a phrase."
        )
    tokens: list[str] = []
    pending: list[Tree | str] = [root]  # trees to write, and closing tokens
    while pending:
        item = pending.pop()
        if isinstance(item, str):
            tokens.append(item)
            continue
        _check_label(item.label)
        if item.is_preterminal:
            keep = tag is None or item.label in PUNCTUATION_TAGS
            tokens.append(item.label if keep else tag)
            if with_words:
                tokens.append(_word_token(item.children[0]))
        else:
            _check_phrase(item)
            tokens.append("(" + item.label)
            pending.append(")" + item.label)
            pending.extend(reversed(item.children))
    return tokens


def _word_token(word: str) -> str:
    if not word or any(char.isspace() for char in word):
        raise ValueError(f"word {word!r} cannot be a target token (whitespace).")
    return word


def linearize_text(
    tree: Tree, *, with_words: bool = False, tag: str | None = None
) -> str:
    """`linearize(tree)` joined with single spaces."""
    return " ".join(linearize(tree, with_words=with_words, tag=tag))


def target_vocabulary(trees: Iterable[Tree], *, with_words: bool = False) -> list[str]:
    """Every token `linearize` writes for `trees`, sorted."""
    vocabulary: set[str] = set()
    for tree in trees:
        vocabulary.update(linearize(tree, with_words=with_words))
    return sorted(vocabulary)


@dataclass(frozen=True)
class Delinearized:
    """A tree read from target tokens, and the repairs that reading needed."""

    tree: Tree
    repairs: tuple[str, ...]

    @property
    def repaired(self) -> bool:
        """True when the tokens were not a well-formed linearization."""
        return bool(self.repairs)


class _Reader:
    """The state of `delinearize` while it reads tokens left to right."""

    def __init__(self, words: Sequence[str], with_words: bool = False) -> None:
        self.with_words = with_words
        self.expect_word = False  # with_words: the last token was a tag
        self.copy_of: str | None = None  # the word that tag took, if any
        self.words = list(words)
        self.used = 0  # words given a tag so far
        self.open: list[tuple[str, list[Tree]]] = []  # innermost last
        self.top: list[Tree] = []
        self.repairs: list[str] = []

    def repair(self, name: str) -> None:
        if name not in self.repairs:
            self.repairs.append(name)

    def add(self, node: Tree) -> None:
        """Put `node` in the innermost open phrase, or at top level."""
        (self.open[-1][1] if self.open else self.top).append(node)

    def read(self, token: str) -> None:
        role, label = token_role(token)
        if self.expect_word:
            self.expect_word = False
            if self.is_copy(token, role in ("open", "close")):
                return  # The tag's copy of its word: the input's is used.
            self.repair(_MISSING_WORD)
        if role == "open":
            self.open.append((label, []))
        elif role == "close":
            self.close(label)
        elif role == "tag":
            self.tag(token)
        else:
            self.repair(_UNKNOWN_TOKEN)

    def is_copy(self, token: str, bracket: bool) -> bool:
        """Whether `token`, right after a tag, is that tag's word."""
        if self.copy_of is None:  # The tag took no word (an extra tag).
            return not bracket
        return token in (self.copy_of, "<unk>")

    def close(self, label: str) -> None:
        if not self.open:
            self.repair(_CLOSE_WITHOUT_OPEN)
            return
        if self.open[-1][0] != label:
            self.repair(_LABEL_MISMATCH)
        self.close_innermost()

    def close_innermost(self) -> None:
        label, children = self.open.pop()
        if children:
            self.add(Tree(label, tuple(children)))
        else:
            self.repair(_EMPTY_PHRASE)

    def tag(self, tag: str) -> None:
        self.expect_word = self.with_words
        self.copy_of = None
        if self.used == len(self.words):
            self.repair(_EXTRA_TAG)
            return
        self.add(Tree(tag, (self.words[self.used],)))
        self.copy_of = self.words[self.used]
        self.used += 1

    def close_all(self) -> None:
        if self.expect_word:
            self.repair(_MISSING_WORD)
        if self.open:
            self.repair(_UNCLOSED)
        while self.open:
            self.close_innermost()

    def tag_the_rest(self, fallback_tag: str) -> None:
        rest = [Tree(fallback_tag, (word,)) for word in self.words[self.used :]]
        if not rest:
            return
        self.repair(_MISSING_TAGS)
        self.used = len(self.words)
        last = self.top[-1] if self.top else None
        if last is not None and not last.is_preterminal:
            self.top[-1] = Tree(last.label, last.children + tuple(rest))
        else:
            self.top.extend(rest)

    def root(self, root_label: str) -> Tree:
        if len(self.top) == 1 and not self.top[0].is_preterminal:
            return self.top[0]
        self.repair(_SEVERAL_ROOTS if len(self.top) > 1 else _NO_ROOT_PHRASE)
        return Tree(root_label, tuple(self.top))


def delinearize(
    tokens: Sequence[str] | str,
    words: Sequence[str],
    *,
    fallback_tag: str = "XX",
    root_label: str = "S",
    with_words: bool = False,
) -> Delinearized:
    """The tree that `tokens` describe over `words`, repaired where needed.

    The tree's words are always exactly `words`; the module docstring gives
    the repair rules. A string of tokens is split on whitespace.
    `with_words`: the tokens are `linearize(..., with_words=True)`'s.

    Raises:
        TypeError: `words` is one string (split it into words first).
        ValueError: `fallback_tag` or `root_label` is not a valid label.
    """
    if isinstance(words, str):
        raise TypeError("words must be a sequence of words, not one string.")
    _check_label(fallback_tag)
    _check_label(root_label)
    if isinstance(tokens, str):
        tokens = tokens.split()
    reader = _Reader(words, with_words)
    for token in tokens:
        reader.read(token)
    reader.close_all()
    reader.tag_the_rest(fallback_tag)
    tree = reader.root(root_label)
    return Delinearized(tree=tree, repairs=tuple(reader.repairs))
