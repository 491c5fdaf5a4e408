"""A constituency tree and its one-line bracketed form.

`Tree` is immutable: a label and a tuple of children, each a `Tree` or a word
(`str`). A preterminal is a tree whose only child is a word; its label is the
part-of-speech tag. The bracketed form is the Penn Treebank's:
``(S (NP (NNP Pierre)) (VP (VBZ runs)) (. .))``; the treebank's unlabelled
root, ``( (S ...) )``, is a tree whose label is the empty string.

Only the standard library is imported here.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

__all__ = ["Tree", "TreeError", "parse_tree", "iter_trees", "split_tagged"]


class TreeError(ValueError):
    """Malformed bracketed text; the message names the source and line."""


@dataclass(frozen=True)
class Tree:
    """A constituent: `label` over `children` (trees or words), in order."""

    label: str
    children: tuple[Tree | str, ...]

    @property
    def is_preterminal(self) -> bool:
        """True for a part-of-speech node: one child, and it is a word."""
        return len(self.children) == 1 and isinstance(self.children[0], str)

    def words(self) -> list[str]:
        """The words at the leaves, left to right."""
        return [word for _, word in self.tagged_words()]

    def tags(self) -> list[str]:
        """The part-of-speech tag of each word, left to right."""
        return [tag for tag, _ in self.tagged_words()]

    def tagged_words(self) -> list[tuple[str, str]]:
        """`(tag, word)` for each word, left to right."""
        pairs: list[tuple[str, str]] = []
        stack: list[Tree | str] = [self]
        while stack:
            node = stack.pop()
            if isinstance(node, str):
                continue  # A word directly under a phrase: no tag of its own.
            if node.is_preterminal:
                pairs.append((node.label, node.children[0]))
            else:
                stack.extend(reversed(node.children))
        return pairs

    def to_string(self) -> str:
        """The one-line bracketed form (`parse_tree` reads it back)."""
        parts: list[str] = []
        self._write(parts)
        return "".join(parts)

    def _write(self, parts: list[str]) -> None:
        parts.append("(" + self.label)
        for child in self.children:
            parts.append(" ")
            if isinstance(child, str):
                parts.append(child)
            else:
                child._write(parts)
        parts.append(")")

    def __str__(self) -> str:
        return self.to_string()


def _tokens(text: str, source: str, first_line: int) -> Iterator[tuple[str, int]]:
    """`(`, `)` and atoms of `text`, each with its 1-based line number."""
    line = first_line
    atom: list[str] = []
    for char in text:
        if char in "() \t\r\n\f\v":
            if atom:
                yield "".join(atom), line
                atom = []
            if char in "()":
                yield char, line
            elif char == "\n":
                line += 1
        else:
            if char == "\x00" or (ord(char) < 32 and char not in "\t"):
                raise TreeError(
                    f"{source}:{line}: control character {char!r} in a tree "
                    "(binary data?)."
                )
            atom.append(char)
    if atom:
        yield "".join(atom), line


def iter_trees(
    text: str, source: str = "<string>", first_line: int = 1
) -> Iterator[tuple[Tree, int]]:
    """Every top-level tree in `text`, with the line its `(` is on.

    Raises:
        TreeError: Unbalanced brackets, an atom outside any tree, a tree with
            no label and no children, or a control character; the message
            names `source` and the line.
    """
    stack: list[tuple[list, int]] = []  # [label, children], opening line
    expect_label = False
    for token, line in _tokens(text, source, first_line):
        if token == "(":
            stack.append(([None, []], line))
            expect_label = True
        elif token == ")":
            if not stack:
                raise TreeError(f"{source}:{line}: ')' closes no open bracket.")
            (label, children), opened = stack.pop()
            if label is None and not children:
                raise TreeError(f"{source}:{line}: empty brackets '()'.")
            tree = Tree(label or "", tuple(children))
            if stack:
                stack[-1][0][1].append(tree)
            else:
                yield tree, opened
            expect_label = False
        else:
            if not stack:
                raise TreeError(
                    f"{source}:{line}: {token!r} outside any tree (expected '(')."
                )
            node = stack[-1][0]
            if expect_label:
                node[0] = token
            else:
                node[1].append(token)
            expect_label = False
    if stack:
        opened = stack[-1][1]
        raise TreeError(
            f"{source}:{opened}: the tree opened here is not closed "
            f"({len(stack)} bracket(s) left open at the end of the text)."
        )


def parse_tree(text: str, source: str = "<string>", first_line: int = 1) -> Tree:
    """The one tree in `text` (a `TreeError` if there are none or several)."""
    trees = list(iter_trees(text, source, first_line))
    if len(trees) != 1:
        raise TreeError(
            f"{source}:{first_line}: expected one tree, found {len(trees)}."
        )
    return trees[0][0]


def split_tagged(line: str, where: str) -> tuple[list[str], list[str]]:
    """The words and tags of a tagged sentence, ``word/TAG`` tokens separated
    by spaces (a tagger's usual output; a word may hold a slash, the tag is
    after the last one: ``1\\/2/CD``). `where` (``"FILE:LINE"``) is named
    in the error for a token without a word or a tag."""
    words, tags = [], []
    for number, token in enumerate(line.split(), start=1):
        word, slash, tag = token.rpartition("/")
        if not slash or not word or not tag:
            raise TreeError(
                f"{where}: token {number} ({token!r}) is not word/TAG: a tagged "
                "sentence gives each word its part-of-speech tag after a slash."
            )
        words.append(word)
        tags.append(tag)
    return words, tags
