"""Subtree substitution (`parsing.augment`): what each new tree may be."""

import pytest

from keras_transformer.parsing.augment import substitute_subtrees
from keras_transformer.parsing.linearize import delinearize, linearize
from keras_transformer.parsing.tree import parse_tree

DOG = parse_tree("(S (NP (DT a) (NN dog)) (VP (VBZ runs)))")
KIM = parse_tree("(S (NP (NNP Kim)) (VP (VBZ sleeps)))")


def test_each_new_tree_swaps_one_phrase_for_one_of_the_same_label():
    # The dog tree's phrases are its NP and VP; each has one other donor.
    allowed = {
        "(S (NP (NNP Kim)) (VP (VBZ runs)))",
        "(S (NP (DT a) (NN dog)) (VP (VBZ sleeps)))",
    }
    seen = set()
    for seed in range(20):
        first, second = substitute_subtrees([DOG, KIM], 1, seed=seed)
        seen.add(first.to_string())
        assert second.to_string() in {
            "(S (NP (DT a) (NN dog)) (VP (VBZ sleeps)))",
            "(S (NP (NNP Kim)) (VP (VBZ runs)))",
        }
    assert seen == allowed  # Both places and both labels are drawn.


def test_the_draw_is_deterministic_per_seed():
    trees = [DOG, KIM] * 3
    assert substitute_subtrees(trees, 2, seed=5) == substitute_subtrees(
        trees, 2, seed=5
    )
    draws = {tuple(substitute_subtrees(trees, 2, seed=s)) for s in range(5)}
    assert len(draws) > 1


def test_no_new_tree_outgrows_the_longest_given_tree():
    # Each tree has 4 words; the long NP of one in the other's long-VP
    # tree would make 6, so that swap is never made.
    long_np = parse_tree("(S (NP (DT the) (JJ big) (NN dog)) (VP (VBZ runs)))")
    long_vp = parse_tree("(S (NP (NNP Kim)) (VP (VBZ sees) (NP (DT a) (NN cat))))")
    made = [
        tree
        for seed in range(30)
        for tree in substitute_subtrees([long_np, long_vp], 3, seed=seed)
    ]
    assert made
    assert max(len(tree.words()) for tree in made) <= 4
    assert all(tree not in (long_np, long_vp) for tree in made)


def test_new_trees_are_parser_targets_that_read_back_unchanged():
    trees = [
        DOG,
        KIM,
        parse_tree("(S (NP (PRP I)) (VP (VBD saw) (NP (NNP Kim))) (. .))"),
    ]
    for tree in substitute_subtrees(trees, 4):
        back = delinearize(linearize(tree), tree.words())
        assert back.tree == tree and not back.repaired


def test_a_tree_with_no_phrase_below_its_root_gives_no_copies():
    flat = parse_tree("(S (NN x) (VBZ y))")
    assert substitute_subtrees([flat, flat], 3) == []
    assert substitute_subtrees([DOG, KIM], 0) == []
    with pytest.raises(ValueError, match="copies must be 0 or more"):
        substitute_subtrees([DOG], -1)
