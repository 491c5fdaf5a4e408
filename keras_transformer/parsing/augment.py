"""Subtree substitution: more training trees from a small treebank.

A new tree is a training tree with one of its phrases replaced by another
phrase of the same label from any training tree: an `NP` by an `NP`, a `VP`
by a `VP` (Shi, Livescu and Gimpel 2020, "On the Role of Supervision in
Unsupervised Constituency Parsing", their data augmentation for parsing with
a few hundred trees). Every new tree is one the treebank's own rules allow
locally, over a sentence the model has not seen whole, so a model trained on
3,000 trees sees more ways to combine the constituents it knows.

The draw is deterministic: the same trees, `copies` and `seed` give the same
new trees, so a run that reads them again (resume, `prepare`) gets the same
pairs. Only the standard library is imported here.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from keras_transformer.parsing.tree import Tree

__all__ = ["substitute_subtrees"]

_TRIES = 10
"""Draws per new tree before giving up on it (a tree whose every draw
would outgrow the longest training tree)."""

Route = tuple[int, ...]
"""The child indices that lead from a tree's root to one of its nodes."""


def _phrases(tree: Tree) -> list[tuple[Route, Tree]]:
    """Every phrase below the root (not the root, not a part-of-speech
    node), with the child indices that lead to it."""
    found: list[tuple[Route, Tree]] = []
    stack: list[tuple[Route, Tree]] = [((), tree)]
    while stack:
        route, node = stack.pop()
        for index, child in enumerate(node.children):
            if isinstance(child, Tree) and not child.is_preterminal:
                found.append(((*route, index), child))
                stack.append(((*route, index), child))
    return found


def _replace(tree: Tree, route: Route, subtree: Tree) -> Tree:
    if not route:
        return subtree
    index = route[0]
    children = list(tree.children)
    children[index] = _replace(children[index], route[1:], subtree)
    return Tree(tree.label, tuple(children))


def _size(tree: Tree) -> tuple[int, int]:
    """(words, phrases): what a tree's source and target lengths grow with."""
    words = phrases = 0
    stack: list[Tree | str] = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, str):
            continue
        if node.is_preterminal:
            words += 1
        else:
            phrases += 1
            stack.extend(node.children)
    return words, phrases


def substitute_subtrees(
    trees: Sequence[Tree], copies: int, *, seed: int = 0
) -> list[Tree]:
    """`copies` new trees for each of `trees` (in order: the first tree's,
    then the second's, ...), each with one phrase replaced by a phrase of
    the same label drawn from all of `trees`.

    A new tree is never longer than the longest of `trees` in words or in
    phrases (so it fits wherever the treebank's own trees fit), and never
    equal to the tree it comes from. A tree with no phrase below its root, or
    whose draws all fail those two rules, gives fewer copies: the list can be
    shorter than `copies * len(trees)`.

    Raises:
        ValueError: `copies` is negative.
    """
    if copies < 0:
        raise ValueError(f"copies must be 0 or more. Received: {copies}")
    if copies == 0 or not trees:
        return []
    # Each phrase with its size, measured once: a phrase is drawn many times.
    donors: dict[str, list[tuple[Tree, tuple[int, int]]]] = {}
    places = [_phrases(tree) for tree in trees]
    for found in places:
        for _, phrase in found:
            donors.setdefault(phrase.label, []).append((phrase, _size(phrase)))
    sizes = [_size(tree) for tree in trees]
    max_words = max(words for words, _ in sizes)
    max_phrases = max(phrases for _, phrases in sizes)
    draw = random.Random(seed)
    new_trees: list[Tree] = []
    for tree, found, (words, phrases) in zip(trees, places, sizes):
        if not found:
            continue
        for _ in range(copies):
            for _ in range(_TRIES):
                route, old = draw.choice(found)
                new, (new_words, new_phrases) = draw.choice(donors[old.label])
                if new == old:
                    continue
                old_words, old_phrases = _size(old)
                if (
                    words - old_words + new_words <= max_words
                    and phrases - old_phrases + new_phrases <= max_phrases
                ):
                    new_trees.append(_replace(tree, route, new))
                    break
    return new_trees
