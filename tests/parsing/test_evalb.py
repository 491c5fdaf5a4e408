"""EVALB-equivalent scoring: every figure below is counted by hand in a comment
beside its case (brackets are written (label, start, end), end excluded, over
the words left once traces and punctuation are deleted)."""

from __future__ import annotations

import tarfile
from collections import Counter

import pytest

from keras_transformer.parsing.evalb import (
    CorpusScore,
    SentenceScore,
    brackets,
    score_corpus,
    score_sentence,
)
from keras_transformer.parsing.tree import iter_trees, parse_tree
from tests.helpers import PTB_SAMPLE

pytestmark = pytest.mark.backend_neutral

# Words: Pierre Vinken , joined the board .  -> kept: Pierre(0) Vinken(1)
# joined(2) the(3) board(4). Brackets: S(0,5) NP(0,2) VP(2,5) NP(3,5).
PIERRE = (
    "( (S (NP-SBJ (NNP Pierre) (NNP Vinken)) (, ,) "
    "(VP (VBD joined) (NP (DT the) (NN board))) (. .)) )"
)
# Words: I saw a man with binoculars (6). Brackets: S(0,6) NP(0,1) VP(1,6)
# NP(2,4) PP(4,6): 5.
BINOCULARS_GOLD = (
    "(S (NP (PRP I)) (VP (VBD saw) (NP (DT a) (NN man)) "
    "(PP (IN with) (NN binoculars))))"
)
# The PP attached to the noun and labelled ADJP. Brackets: S(0,6) NP(0,1)
# VP(1,6) NP(2,6) ADJP(4,6): 5, of which S, NP(0,1), VP match gold: 3.
BINOCULARS_TEST = (
    "(S (NP (PRP I)) (VP (VBD saw) (NP (DT a) (NN man) "
    "(ADJP (IN with) (NN binoculars)))))"
)
# Words: I left (2). Brackets: S(0,2) NP(0,1) VP(1,2): 3.
I_LEFT = "(S (NP (PRP I)) (VP (VBD left)))"


def tree(text):
    return parse_tree(text)


def nouns(count, first=0):
    """`count` preterminals (NN w<i>), i from `first`."""
    return " ".join(f"(NN w{i})" for i in range(first, first + count))


def test_gold_against_itself_is_100_everywhere():
    gold = tree(PIERRE)
    assert brackets(gold) == Counter(
        {("S", 0, 5): 1, ("NP", 0, 2): 1, ("VP", 2, 5): 1, ("NP", 3, 5): 1}
    )
    # 4 brackets, all matched; 5 words (the comma and period are deleted),
    # all tags equal.
    assert score_sentence(gold, gold) == SentenceScore(4, 4, 4, 5, 5, None)
    total = score_corpus([gold], [gold])
    assert (total.sentences, total.error_sentences) == (1, 0)
    assert total.precision == total.recall == total.f1 == 100.0
    assert total.exact_match == total.tagging_accuracy == 100.0


def test_punctuation_inside_or_outside_a_bracket_still_matches():
    gold = tree(PIERRE)
    # The comma inside the subject NP, the period inside the VP, and a PRN
    # over the comma alone. After deleting the comma (word 2) and the
    # period (word 6): NP(0,2) and VP(2,5) as in gold; PRN spans no word and
    # is not counted. Test brackets: S NP VP NP = 4, all matched.
    test = tree(
        "(S (NP (NNP Pierre) (NNP Vinken) (PRN (, ,))) "
        "(VP (VBD joined) (NP (DT the) (NN board)) (. .)))"
    )
    assert brackets(test) == brackets(gold)
    assert score_sentence(gold, test) == SentenceScore(4, 4, 4, 5, 5, None)


def test_punctuation_is_chosen_by_the_gold_tags():
    # Gold: the dog barks . -> the period (gold tag ".") is deleted in both
    # trees, though the test tags it NN; "barks", tagged "." by the test, is
    # kept because its gold tag is VBZ. Brackets S(0,3) NP(0,2) VP(2,3) in
    # both: 3 of 3. Tags over the 3 kept words: DT=DT, VB!=NN, .!=VBZ -> 1.
    gold = tree("(S (NP (DT the) (NN dog)) (VP (VBZ barks)) (. .))")
    test = tree("(S (NP (DT the) (VB dog)) (VP (. barks)) (NN .))")
    assert score_sentence(gold, test) == SentenceScore(3, 3, 3, 3, 1, None)
    # On its own tags the test tree deletes "barks" (word 2): VP spans
    # nothing and goes; S(0,3) counts the NN-tagged period.
    assert brackets(test) == Counter({("S", 0, 3): 1, ("NP", 0, 2): 1})


def test_traces_and_the_constituents_they_empty_are_removed():
    # EVALB README's example. Words: He reported (the period deleted; 0 and
    # *T*-1 are -NONE-). SBAR and S dominate traces only: removed.
    # Brackets: S(0,2) NP(0,1) VP(1,2).
    gold = tree(
        "(S (NP-SBJ-1 (PRP He)) (VP (VBD reported) "
        "(SBAR (-NONE- 0) (S (-NONE- *T*-1)))) (. .))"
    )
    expected = Counter({("S", 0, 2): 1, ("NP", 0, 1): 1, ("VP", 1, 2): 1})
    assert brackets(gold) == expected
    # The test has no traces; the words agree once they are removed:
    # 3 of 3 brackets, 2 words, 2 tags right.
    test = tree("(S (NP (PRP He)) (VP (VBD reported)) (. .))")
    assert score_sentence(gold, test) == SentenceScore(3, 3, 3, 2, 2, None)


def test_function_tags_and_indices_are_stripped():
    # NP-SBJ-1 -> NP, NP-TMP=2 -> NP. Words: John left yesterday.
    # Brackets: S(0,3) NP(0,1) VP(1,3) NP(2,3), 4 of 4 matched.
    gold = tree("(S (NP-SBJ-1 (NNP John)) (VP (VBD left) (NP-TMP=2 (NN yesterday))))")
    test = tree("(S (NP (NNP John)) (VP (VBD left) (NP (NN yesterday))))")
    assert brackets(gold) == Counter(
        {("S", 0, 3): 1, ("NP", 0, 1): 1, ("VP", 1, 3): 1, ("NP", 2, 3): 1}
    )
    assert score_sentence(gold, test) == SentenceScore(4, 4, 4, 3, 3, None)


def test_a_label_beginning_with_a_dash_is_kept_whole():
    # "-X-" is not cut at its first "-": brackets S(0,3) and -X-(0,2).
    phrase = tree("(S (-X- (NN a) (NN b)) (VB c))")
    assert brackets(phrase) == Counter({("S", 0, 3): 1, ("-X-", 0, 2): 1})


def test_prt_and_advp_are_one_label():
    # Words: He gave up. Brackets: S(0,3) NP(0,1) VP(1,3) PRT(2,3).
    gold = tree("(S (NP (PRP He)) (VP (VBD gave) (PRT (RP up))))")
    advp = tree("(S (NP (PRP He)) (VP (VBD gave) (ADVP (RP up))))")
    assert score_sentence(gold, advp) == SentenceScore(4, 4, 4, 3, 3, None)
    # Any other label misses: 3 of 4 -> P = R = 75.
    np = tree("(S (NP (PRP He)) (VP (VBD gave) (NP (RP up))))")
    assert score_sentence(gold, np) == SentenceScore(4, 4, 3, 3, 3, None)


def test_brackets_of_a_unary_chain_are_a_multiset():
    # Gold: S(0,2) NP(0,1) NP(0,1) VP(1,2) = 4; test: S NP VP = 3, all 3
    # matched (one NP twice in gold matches one NP in test).
    chain = tree("(S (NP (NP (NNS dogs))) (VP (VBP bark)))")
    flat = tree("(S (NP (NNS dogs)) (VP (VBP bark)))")
    assert brackets(chain)[("NP", 0, 1)] == 2
    assert score_sentence(chain, flat) == SentenceScore(4, 3, 3, 2, 2, None)
    # P = 3/3 = 100, R = 3/4 = 75, F1 = 2*100*75/175 = 600/7.
    total = score_corpus([chain], [flat])
    assert (total.precision, total.recall) == (100.0, 75.0)
    assert total.f1 == pytest.approx(600 / 7)
    # The other way round: 3 gold, 4 test, 3 matched: P = 75, R = 100.
    reverse = score_corpus([flat], [chain])
    assert (reverse.precision, reverse.recall) == (75.0, 100.0)


def test_a_wrong_attachment():
    # Gold 5 brackets, test 5, 3 matched (see BINOCULARS_*):
    # P = R = 3/5 = 60, F1 = 60. Tags all right: 6 of 6. Not exact.
    gold, test = tree(BINOCULARS_GOLD), tree(BINOCULARS_TEST)
    assert score_sentence(gold, test) == SentenceScore(5, 5, 3, 6, 6, None)
    total = score_corpus([gold], [test])
    assert total.precision == pytest.approx(60.0)
    assert total.recall == pytest.approx(60.0)
    assert total.f1 == pytest.approx(60.0)
    assert total.exact_match == 0.0
    assert total.tagging_accuracy == 100.0


def test_a_sentence_whose_words_changed_is_an_error_sentence():
    gold = tree(I_LEFT)
    other_word = tree("(S (NP (PRP You)) (VP (VBD left)))")
    # A period the gold lacks: 3 words against 2, though punctuation is not
    # scored (words are compared before it is deleted).
    extra_period = tree("(S (NP (PRP I)) (VP (VBD left) (. .)))")
    changed = score_sentence(gold, other_word)
    assert changed.error == "words unmatch at word 0: gold 'I', test 'You'"
    assert "length unmatch" in score_sentence(gold, extra_period).error
    counts = (changed.gold_brackets, changed.test_brackets, changed.matched)
    assert counts + (changed.words, changed.correct_tags) == (0, 0, 0, 0, 0)
    # Counted: sentence 1 only (5 gold, 5 test, 3 matched, 6 words); the
    # other two are errors, left out of every total.
    total = score_corpus(
        [tree(BINOCULARS_GOLD), gold, gold],
        [tree(BINOCULARS_TEST), other_word, extra_period],
    )
    assert (total.sentences, total.error_sentences) == (1, 2)
    assert (total.gold_brackets, total.test_brackets, total.matched) == (5, 5, 3)
    assert total.words == 6
    assert total.f1 == pytest.approx(60.0)


def test_a_missing_parse_misses_every_gold_bracket():
    # PIERRE: 4 gold brackets, 5 words; no parse: 0 test, 0 matched, 0 tags.
    gold = tree(PIERRE)
    assert score_sentence(gold, None) == SentenceScore(4, 0, 0, 5, 0, None)
    alone = score_corpus([gold], [None])
    assert (alone.precision, alone.recall, alone.f1) == (0.0, 0.0, 0.0)
    assert (alone.exact_match, alone.tagging_accuracy) == (0.0, 0.0)
    # With PIERRE parsed right beside it: matched 4, gold 8, test 4:
    # P = 100, R = 50, F1 = 2*100*50/150 = 200/3; exact 1 of 2 = 50;
    # tags 5 of 10 = 50. The failure is counted, not an error.
    total = score_corpus([gold, gold], [gold, None])
    assert (total.sentences, total.error_sentences) == (2, 0)
    assert (total.precision, total.recall) == (100.0, 50.0)
    assert total.f1 == pytest.approx(200 / 3)
    assert (total.exact_match, total.tagging_accuracy) == (50.0, 50.0)


def test_corpus_figures_are_totals_over_brackets_not_means():
    # Sentence 1: 5 gold, 5 test, 3 matched (F1 60). Sentence 2: I_LEFT
    # against itself, 3/3/3 (F1 100). Totals: 6 matched of 8 and 8:
    # P = R = F1 = 75, while the mean of the sentences' F1 is 80.
    total = score_corpus(
        [tree(BINOCULARS_GOLD), tree(I_LEFT)], [tree(BINOCULARS_TEST), tree(I_LEFT)]
    )
    assert (total.gold_brackets, total.test_brackets, total.matched) == (8, 8, 6)
    assert total.f1 == pytest.approx(75.0)
    assert total.f1 != pytest.approx((60.0 + 100.0) / 2)
    assert total.exact_matches == 1
    assert total.exact_match == 50.0  # 1 of 2.


def test_figures_for_sentences_of_at_most_40_words():
    # Long: 41 words, S(0,41) NP(0,20) VP(20,41) NP(21,41) = 4 gold; the
    # test drops the VP: 3 test, 3 matched. Short: BINOCULARS, 5/5/3.
    long_gold = tree(f"(S (NP {nouns(20)}) (VP (VBD w20) (NP {nouns(20, first=21)})))")
    long_test = tree(f"(S (NP {nouns(20)}) (VBD w20) (NP {nouns(20, first=21)}))")
    total = score_corpus(
        [long_gold, tree(BINOCULARS_GOLD)], [long_test, tree(BINOCULARS_TEST)]
    )
    # All: matched 6, gold 9, test 8: P = 75, R = 200/3, F1 = 12/17 * 100.
    assert (total.gold_brackets, total.test_brackets, total.matched) == (9, 8, 6)
    assert total.precision == 75.0
    assert total.recall == pytest.approx(200 / 3)
    assert total.f1 == pytest.approx(1200 / 17)
    # <= 40: the short sentence alone, P = R = F1 = 60.
    short = total.up_to_40
    assert isinstance(short, CorpusScore) and short.up_to_40 is None
    assert (short.sentences, short.gold_brackets, short.matched) == (1, 5, 3)
    assert short.f1 == pytest.approx(60.0)


def test_the_length_cut_counts_punctuation_but_not_traces():
    # EVALB README 7.4: DELETE_LABEL_FOR_LENGTH -NONE- is all that is left
    # out of the length; punctuation deleted for scoring still counts.
    # 40 nouns and a period: length 41 (punctuation counts): not <= 40.
    with_period = tree(f"(S (NP {nouns(40)}) (. .))")
    # 40 nouns and a trace: length 40 (-NONE- does not count): <= 40.
    with_trace = tree(f"(S (NP {nouns(40)}) (NP (-NONE- *)))")
    total = score_corpus([with_period, with_trace], [with_period, with_trace])
    # Both sentences: S(0,40) NP(0,40) = 2 brackets each, 4 in all.
    assert (total.sentences, total.gold_brackets) == (2, 4)
    assert (total.up_to_40.sentences, total.up_to_40.gold_brackets) == (1, 2)
    assert total.up_to_40.words == 40


def test_error_sentences_are_counted_in_the_short_figures_too():
    # I_LEFT is 2 words long: its error is counted in both lines.
    total = score_corpus([tree(I_LEFT)], [tree("(S (NP (PRP We)) (VP (VBD left)))")])
    assert (total.sentences, total.error_sentences) == (0, 1)
    assert (total.up_to_40.sentences, total.up_to_40.error_sentences) == (0, 1)


def test_tagging_accuracy():
    # Gold: the(DT) dog(NN) barks(VBZ) .(.) -> 3 words scored (the period's
    # gold tag deletes it). Test: DT VB VBZ and ":" for the period: 2 of 3.
    # Corpus with BINOCULARS (6 of 6): 8 of 9 = 88.89.
    gold = tree("(S (NP (DT the) (NN dog)) (VP (VBZ barks)) (. .))")
    test = tree("(S (NP (DT the) (VB dog)) (VP (VBZ barks)) (: .))")
    assert score_sentence(gold, test) == SentenceScore(3, 3, 3, 3, 2, None)
    total = score_corpus([gold, tree(BINOCULARS_GOLD)], [test, tree(BINOCULARS_TEST)])
    assert (total.words, total.correct_tags) == (9, 8)
    assert total.tagging_accuracy == pytest.approx(800 / 9)


@pytest.mark.parametrize(
    "text",
    [
        "( (S (NP (PRP I)) (VP (VBD left))) )",
        "(TOP (S (NP (PRP I)) (VP (VBD left))))",
        "(ROOT (S (NP (PRP I)) (VP (VBD left))))",
        I_LEFT,
    ],
)
def test_root_wrappers_are_not_scored(text):
    # Every form: S(0,2) NP(0,1) VP(1,2); the wrapper is no bracket.
    wrapped = tree(text)
    assert brackets(wrapped) == Counter(
        {("S", 0, 2): 1, ("NP", 0, 1): 1, ("VP", 1, 2): 1}
    )
    assert score_sentence(tree(I_LEFT), wrapped) == SentenceScore(3, 3, 3, 2, 2, None)
    assert score_sentence(wrapped, tree(I_LEFT)) == SentenceScore(3, 3, 3, 2, 2, None)


def test_mismatched_corpus_lengths_raise():
    with pytest.raises(ValueError, match="2 gold trees but 1 test trees"):
        score_corpus([tree(I_LEFT), tree(I_LEFT)], [tree(I_LEFT)])


def test_an_empty_corpus_scores_zero_without_dividing_by_zero():
    total = score_corpus([], [])
    assert total == CorpusScore(0, 0, 0, 0, 0, 0, 0, 0, up_to_40=total.up_to_40)
    assert (total.precision, total.recall, total.f1) == (0.0, 0.0, 0.0)
    assert (total.exact_match, total.tagging_accuracy) == (0.0, 0.0)
    assert total.up_to_40.f1 == 0.0


def test_report_and_dict():
    # BINOCULARS: 60.00 precision, recall and F1, 0.00 exact, 100.00 tags.
    total = score_corpus([tree(BINOCULARS_GOLD)], [tree(BINOCULARS_TEST)])
    table = total.format_table()
    all_line, short_line = table.splitlines()[-2:]
    assert all_line.split() == ["all", "1", "0", "60.00", "60.00", "60.00"] + [
        "0.00",
        "100.00",
    ]
    assert short_line.split()[0] == "len<=40"
    assert short_line.split()[1:] == all_line.split()[1:]
    figures = total.to_dict()
    assert figures["matched"] == 3 and figures["gold_brackets"] == 5
    assert figures["f1"] == pytest.approx(60.0)
    assert figures["up_to_40"]["sentences"] == 1
    assert figures["up_to_40"]["up_to_40"] is None


def _ptb_sample_trees():
    trees = []
    with tarfile.open(PTB_SAMPLE) as archive:
        for member in archive.getmembers():
            if member.isfile() and member.name.endswith(".mrg"):
                text = archive.extractfile(member).read().decode("utf-8")
                trees.extend(parsed for parsed, _ in iter_trees(text, member.name))
    return trees


@pytest.mark.skipif(
    not PTB_SAMPLE.is_file(), reason=f"no Penn Treebank sample at {PTB_SAMPLE}"
)
def test_the_treebank_sample_against_itself():
    trees = _ptb_sample_trees()
    assert trees
    total = score_corpus(trees, trees)
    assert (total.sentences, total.error_sentences) == (len(trees), 0)
    assert total.f1 == 100.0 and total.exact_match == 100.0
    assert total.tagging_accuracy == 100.0
    assert total.up_to_40.f1 == 100.0
