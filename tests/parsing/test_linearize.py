"""`linearize` and `delinearize`: the target tokens of a tree, the round trip,
each repair of malformed tokens, a randomized check that the words always come
back, and the round trip over the Penn Treebank sample when it is present."""

from __future__ import annotations

import random

import pytest

from keras_transformer.data.treebank import read_treebank
from keras_transformer.parsing.evalb import score_corpus
from keras_transformer.parsing.linearize import (
    Delinearized,
    delinearize,
    linearize,
    linearize_text,
    target_vocabulary,
)
from keras_transformer.parsing.tree import Tree, parse_tree
from tests.helpers import PTB_SAMPLE

pytestmark = pytest.mark.backend_neutral

GOOSE = "(S (NP (DT A) (NN goose)) (VP (VBD honked) (ADVP (RB loudly))) (. .))"
CAT = "(S (NP (DT the) (NN cat)) (VP (VBD sat)))"
CAT_WORDS = ["the", "cat", "sat"]

ROUND_TRIP_SHAPES = [
    GOOSE,
    CAT,
    "(S (VP (VB go)))",
    "(FRAG (NP (NN hello)))",
    "(NP (NP (NN tea)) (-LRB- -LRB-) (NP (CD 2)) (-RRB- -RRB-))",
    "(S (NP (PRP$ her) (NN kite)) (VP (VBD flew)) (, ,) (`` ``) (: ;) (. !))",
    "(S (NP (NP (NP (NP (NP (NN a)) (PP (IN of) (NP (NN b)))))))"
    " (VP (VBZ is) (ADJP (ADJP (RB very) (JJ deep)))))",
    "(SINV (ADVP|PRT (RB up)) (VP (VBD rose)) (NP (DT the) (NN sun)))",
]


def test_linearize_drops_words_and_keeps_tags():
    tree = parse_tree(GOOSE)
    assert linearize(tree) == [
        "(S",
        "(NP",
        "DT",
        "NN",
        ")NP",
        "(VP",
        "VBD",
        "(ADVP",
        "RB",
        ")ADVP",
        ")VP",
        ".",
        ")S",
    ]
    assert linearize_text(tree) == "(S (NP DT NN )NP (VP VBD (ADVP RB )ADVP )VP . )S"


def test_linearize_reads_through_the_unlabelled_root():
    assert linearize(parse_tree(f"( {CAT} )")) == linearize(parse_tree(CAT))


@pytest.mark.parametrize(
    "tree",
    [
        Tree("NP DT", (Tree("NN", ("cat",)),)),
        Tree("(NP", (Tree("NN", ("cat",)),)),
        Tree(")NP", (Tree("NN", ("cat",)),)),
        Tree("NP", (Tree("N N", ("cat",)),)),
        Tree("NP", (Tree("<unk>", ("cat",)),)),
        Tree("NP", (Tree("", ("cat",)),)),
        Tree("", (Tree("NN", ("a",)), Tree("NN", ("b",)))),
        Tree("NP", ()),
        Tree("S", (Tree("NP", ()), Tree("NN", ("cat",)))),
        Tree("NP", ("cat", Tree("NN", ("cat",)))),
        Tree("NN", ("cat",)),
    ],
    ids=lambda tree: repr(tree.to_string()),
)
def test_linearize_refuses_what_cannot_come_back(tree):
    with pytest.raises(ValueError):
        linearize(tree)


@pytest.mark.parametrize("text", ROUND_TRIP_SHAPES)
def test_round_trip_needs_no_repair(text):
    tree = parse_tree(text)
    result = delinearize(linearize(tree), tree.words())
    assert result == Delinearized(tree=tree, repairs=())
    assert not result.repaired
    assert delinearize(linearize_text(tree), tree.words()).tree == tree


def test_target_vocabulary_is_the_sorted_set_of_tokens():
    trees = [parse_tree(CAT), parse_tree("(S (VP (VB go)))")]
    assert target_vocabulary(trees) == sorted(
        {"(S", ")S", "(NP", ")NP", "(VP", ")VP", "DT", "NN", "VBD", "VB"}
    )
    assert target_vocabulary([]) == []


@pytest.mark.parametrize(
    ("tokens", "words", "expected", "repairs"),
    [
        (
            "<unk> (S (NP DT NN )NP <pad> (VP VBD )VP </s> )S <s>",
            CAT_WORDS,
            CAT,
            ("unknown token",),
        ),
        (
            ["(S", "(NP", "DT", "", "NN", ")NP", "(VP", "VBD", ")VP", ")S"],
            CAT_WORDS,
            CAT,
            ("unknown token",),
        ),
        (
            "( ) a(b (<unk> ((NP (S (NP DT NN )NP (VP VBD )VP )S",
            CAT_WORDS,
            CAT,
            ("unknown token",),
        ),
        (
            ")NP (S (NP DT NN )NP (VP VBD )VP )S )S",
            CAT_WORDS,
            CAT,
            ("close without open",),
        ),
        (
            "(S (NP DT NN )VP (VP VBD )NP )S",
            CAT_WORDS,
            CAT,
            ("label mismatch",),
        ),
        (
            "(S (NP DT NN )NP (VP VBD NN JJ )VP )S",
            CAT_WORDS,
            CAT,
            ("extra tag",),
        ),
        (
            "(S (NP DT NN )NP )S",
            CAT_WORDS,
            "(S (NP (DT the) (NN cat)) (XX sat))",
            ("missing tags",),
        ),
        (
            "(S (NP DT",
            CAT_WORDS,
            "(S (NP (DT the)) (XX cat) (XX sat))",
            ("unclosed", "missing tags"),
        ),
        (
            "(S (NP DT NN )NP (VP VBD",
            CAT_WORDS,
            CAT,
            ("unclosed",),
        ),
        (
            "(S (NP DT NN )NP (PP (NP )NP )PP (VP VBD )VP )S",
            CAT_WORDS,
            CAT,
            ("empty phrase",),
        ),
        (
            "(S (NP DT NN )NP (VP VBD )VP (SBAR (S",
            CAT_WORDS,
            CAT,
            ("unclosed", "empty phrase"),
        ),
        (
            "(NP DT NN )NP (VP VBD )VP",
            CAT_WORDS,
            CAT,
            ("several roots",),
        ),
        (
            "(NP DT )NP NN",
            CAT_WORDS,
            "(S (NP (DT the)) (NN cat) (XX sat))",
            ("missing tags", "several roots"),
        ),
        (
            "(NP DT NN )NP VBD",
            CAT_WORDS,
            "(S (NP (DT the) (NN cat)) (VBD sat))",
            ("several roots",),
        ),
        ("UH", ["hi"], "(S (UH hi))", ("no root phrase",)),
        ("", ["hi"], "(S (XX hi))", ("missing tags", "no root phrase")),
        (
            [],
            ["hi", "there"],
            "(S (XX hi) (XX there))",
            ("missing tags", "several roots"),
        ),
        (
            "</s> )S (S NN NN NN NN )NP (PP",
            CAT_WORDS,
            "(S (NN the) (NN cat) (NN sat))",
            (
                "unknown token",
                "close without open",
                "extra tag",
                "label mismatch",
                "unclosed",
                "empty phrase",
            ),
        ),
    ],
)
def test_each_repair_keeps_the_words(tokens, words, expected, repairs):
    result = delinearize(tokens, words)
    assert result.tree == parse_tree(expected)
    assert result.tree.words() == words
    assert result.repairs == repairs
    assert result.repaired


def test_fallback_tag_and_root_label():
    result = delinearize("(NP DT )NP", CAT_WORDS, fallback_tag="UNK", root_label="X")
    assert result.tree == parse_tree("(NP (DT the) (UNK cat) (UNK sat))")
    result = delinearize("DT NN VBD", CAT_WORDS, root_label="ROOT")
    assert result.tree == parse_tree("(ROOT (DT the) (NN cat) (VBD sat))")
    assert result.repairs == ("several roots",)


def test_empty_sentence_gives_an_empty_root_phrase():
    for tokens in ([], "", "(S NN )S", "<unk> )S"):
        result = delinearize(tokens, [])
        assert result.tree == Tree("S", ())
        assert result.tree.words() == []
        assert result.repaired
    assert Tree("S", ()).to_string() == "(S)"
    assert parse_tree("(S)") == Tree("S", ())
    assert delinearize([], []).repairs == ("no root phrase",)
    assert delinearize("(S NN )S", []).repairs == (
        "extra tag",
        "empty phrase",
        "no root phrase",
    )


def test_bad_arguments():
    with pytest.raises(TypeError):
        delinearize("(S NN )S", "cat")
    with pytest.raises(ValueError):
        delinearize("(S NN )S", ["cat"], fallback_tag="X X")
    with pytest.raises(ValueError):
        delinearize("(S NN )S", ["cat"], root_label="(S")


RANDOM_VOCABULARY = [
    "(S",
    ")S",
    "(NP",
    ")NP",
    "(VP",
    ")VP",
    "(-LRB-",
    "NN",
    "DT",
    "VB",
    "-LRB-",
    "PRP$",
    ",",
    "<unk>",
    "</s>",
    "<pad>",
    "",
    "(",
    ")",
    "a(b",
    "two words",
]
RANDOM_WORDS = ["the", "cat", "sat", "-LRB-", "$", "'s", ",", "1.5"]


def test_random_tokens_always_give_back_the_words():
    rng = random.Random(20150609)
    repaired = 0
    for _ in range(500):
        tokens = rng.choices(RANDOM_VOCABULARY, k=rng.randint(0, 20))
        words = rng.choices(RANDOM_WORDS, k=rng.randint(0, 12))
        result = delinearize(tokens, words)
        assert result.tree.words() == words
        assert parse_tree(result.tree.to_string()) == result.tree
        assert delinearize(tokens, words) == result
        # Unrepaired exactly when the tokens are the tree's own linearization.
        well_formed = bool(words) and linearize(result.tree) == tokens
        assert result.repaired != well_formed
        repaired += result.repaired
    assert repaired > 400


def _random_tree(rng: random.Random, depth: int) -> Tree:
    if depth == 0 or rng.random() < 0.3:
        return Tree(rng.choice(["NN", "DT", "-LRB-", "PRP$", "."]), ("w",))
    children = [_random_tree(rng, depth - 1) for _ in range(rng.randint(1, 3))]
    return Tree(rng.choice(["S", "NP", "VP", "PP", "SBAR"]), tuple(children))


def test_random_trees_round_trip():
    rng = random.Random(3)
    for _ in range(300):
        tree = Tree("S", (_random_tree(rng, 6),))
        result = delinearize(linearize(tree), tree.words())
        assert result == Delinearized(tree=tree, repairs=())
        rest = delinearize(linearize(tree)[:-1], tree.words())
        assert rest.tree == tree and rest.repairs == ("unclosed",)


@pytest.mark.skipif(not PTB_SAMPLE.is_file(), reason=f"{PTB_SAMPLE} is absent")
def test_treebank_sample_round_trips():
    trees = [sentence.tree for sentence in read_treebank(PTB_SAMPLE)]
    assert len(trees) == 3669
    for tree in trees:
        assert tree is not None and not tree.is_preterminal
        result = delinearize(linearize(tree), tree.words())
        assert result.tree == tree, tree.to_string()
        assert result.repairs == ()


# --------------------------------------------------------------------------
# with_words: each tag followed by its word
# --------------------------------------------------------------------------


def test_with_words_writes_each_word_after_its_tag():
    tree = parse_tree(GOOSE)
    assert linearize(tree, with_words=True) == [
        "(S", "(NP", "DT", "A", "NN", "goose", ")NP",
        "(VP", "VBD", "honked", "(ADVP", "RB", "loudly", ")ADVP", ")VP",
        ".", ".", ")S",
    ]  # fmt: skip
    back = delinearize(linearize(tree, with_words=True), tree.words(), with_words=True)
    assert back == Delinearized(tree=tree, repairs=())


def test_with_words_takes_unk_as_a_copy():
    tree = parse_tree(GOOSE)
    tokens = linearize(tree, with_words=True)
    tokens[5] = "<unk>"  # "goose" was rare: its copy in the targets is <unk>.
    assert delinearize(tokens, tree.words(), with_words=True) == Delinearized(
        tree=tree, repairs=()
    )


def test_with_words_a_lost_copy_does_not_shift_the_later_tags():
    words = ["A", "goose", "honked"]
    # NN lost its copy: "VBD" is read as the next tag, not as NN's word.
    result = delinearize(
        "(S (NP DT A NN )NP (VP VBD honked )VP )S", words, with_words=True
    )
    assert result.tree == parse_tree("(S (NP (DT A) (NN goose)) (VP (VBD honked)))")
    shifted = delinearize("(S (NP DT A NN VBD honked )NP )S", words, with_words=True)
    assert shifted.tree == parse_tree("(S (NP (DT A) (NN goose) (VBD honked)))")
    assert shifted.repairs == ("missing word",)


def test_with_words_a_tag_without_its_copy_is_a_missing_word():
    words = ["A", "goose", "honked"]
    result = delinearize("(S (NP DT A NN )NP (VP VBD )VP )S", words, with_words=True)
    # NN is followed by a bracket, VBD by a bracket: both copies are missing,
    # the tree is still the tags' tree over the input's words.
    assert result.tree == parse_tree("(S (NP (DT A) (NN goose)) (VP (VBD honked)))")
    assert result.repairs == ("missing word",)
    ends_on_a_tag = delinearize(
        ["(S", "DT", "A", "NN"], ["A", "goose"], with_words=True
    )
    assert ends_on_a_tag.repairs == ("missing word", "unclosed")


@pytest.mark.skipif(not PTB_SAMPLE.is_file(), reason=f"{PTB_SAMPLE} is absent")
def test_treebank_sample_round_trips_with_words():
    for sentence in read_treebank(PTB_SAMPLE):
        tree = sentence.tree
        tokens = linearize(tree, with_words=True)
        assert delinearize(tokens, tree.words(), with_words=True) == Delinearized(
            tree=tree, repairs=()
        )


# --------------------------------------------------------------------------
# tag="XX": every tag written XX (Vinyals et al. 2015), punctuation's kept
# --------------------------------------------------------------------------


def test_xx_writes_every_tag_but_punctuations_as_xx():
    tree = parse_tree(GOOSE)
    assert linearize(tree, tag="XX") == [
        "(S", "(NP", "XX", "XX", ")NP", "(VP", "XX", "(ADVP", "XX", ")ADVP", ")VP",
        ".", ")S",
    ]  # fmt: skip
    back = delinearize(linearize(tree, tag="XX"), tree.words())
    assert back.repairs == () and back.tree.words() == tree.words()


def _right_branching(words: list[str]) -> Tree:
    """A wrong parse with XX tags: each word opens an S over the rest."""
    node = Tree("S", (Tree("XX", (words[-1],)),))
    for word in reversed(words[:-1]):
        node = Tree("S", (Tree("XX", (word,)), node))
    return node


@pytest.mark.skipif(not PTB_SAMPLE.is_file(), reason=f"{PTB_SAMPLE} is absent")
def test_xx_gold_trees_score_parses_as_the_treebanks_own_do():
    """The scorer deletes punctuation by the gold tags: kept in the targets,
    a gold tree read back from them gives every parse the same labeled
    F1 as the treebank's tree (tags aside, which XX does not predict)."""
    gold = [sentence.tree for sentence in read_treebank(PTB_SAMPLE)][:400]
    read_back = [delinearize(linearize(t, tag="XX"), t.words()).tree for t in gold]
    for parses in (read_back, [_right_branching(t.words()) for t in gold]):
        treebank, xx = score_corpus(gold, parses), score_corpus(read_back, parses)
        assert (treebank.precision, treebank.recall) == (xx.precision, xx.recall)
    assert score_corpus(gold, read_back).f1 == 100.0
