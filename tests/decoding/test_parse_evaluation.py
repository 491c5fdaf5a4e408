"""`decoding.parse_evaluation`: sentences to trees through any search, the trees as
text, the repairs counted, and labeled bracketing F1 against gold trees."""

from __future__ import annotations

import types

import pytest

from keras_transformer.data.text_files import DataError
from keras_transformer.decoding.parse_evaluation import (
    ParsingResult,
    evaluate_parser_split,
    evaluate_parses,
    linearized_f1,
    parse_sentences,
    read_parses,
    repair_counts,
    repaired,
    trees_text,
)
from keras_transformer.parsing.evalb import score_corpus
from keras_transformer.parsing.linearize import (
    Delinearized,
    delinearize,
    linearize_text,
)
from keras_transformer.parsing.tree import parse_tree

pytestmark = pytest.mark.backend_neutral

DOG_TEXT = "( (S (NP (DT The) (NN dog)) (VP (VBD barked)) (. .)) )"
DOG = parse_tree(DOG_TEXT).children[0]  # The S under the unlabelled root.
DOG_WORDS = ["The", "dog", "barked", "."]
RAN = parse_tree("(S (NP (PRP It)) (VP (VBD ran)))")
RAN_WORDS = ["It", "ran"]
# The dog sentence with a flat subject: VP and S match the gold, NP is missed.
FLAT_DOG = parse_tree("(S (DT The) (NN dog) (VP (VBD barked)) (. .))")
FLAT_DOG_TOKENS = "(S DT NN (VP VBD )VP . )S"


class FakeSearch:
    """A strings-to-strings search that records each batch it is given."""

    def __init__(self, outputs):
        self.outputs = outputs  # A dict text -> output, or a function.
        self.calls: list[list[str]] = []

    def __call__(self, texts):
        self.calls.append(list(texts))
        if callable(self.outputs):
            return [self.outputs(text) for text in texts]
        return [self.outputs[text] for text in texts]


def _gold_search():
    return FakeSearch(
        {"The dog barked .": linearize_text(DOG), "It ran": linearize_text(RAN)}
    )


# --- parse_sentences ------------------------------------------------------------


def test_parse_sentences_searches_the_non_empty_sentences_in_order():
    search = _gold_search()
    parses = parse_sentences(search, [DOG_WORDS, [], RAN_WORDS])
    assert search.calls == [["The dog barked .", "It ran"]]
    assert parses[1] is None
    assert parses[0] == Delinearized(DOG, ())
    assert parses[2] == Delinearized(RAN, ())


def test_parse_sentences_of_empty_sentences_only_sends_no_sentence():
    search = FakeSearch(lambda text: "(S NN )S")
    assert parse_sentences(search, [[], ()]) == [None, None]
    assert all(call == [] for call in search.calls)


def test_parse_sentences_accepts_tuples_of_words():
    search = _gold_search()
    parses = parse_sentences(search, [tuple(RAN_WORDS)])
    assert parses == [Delinearized(RAN, ())]


@pytest.mark.parametrize(
    "output",
    ["", ")NP )NP", "(NP NN NN NN NN NN NN )S", "<unk> ( ) (S", "(S (VP", "DT"],
)
def test_parse_sentences_keeps_the_words_whatever_the_search_returns(output):
    sentences = [["a", "b"], ["x"], ["p", "q", "r"], ["(", "-RRB-"]]
    search = FakeSearch(lambda text: output)
    parses = parse_sentences(search, sentences)
    assert len(parses) == len(sentences)
    for parse, words in zip(parses, sentences, strict=True):
        assert parse.tree.words() == words
        assert parse.repaired


# --- trees_text, repaired, repair_counts ------------------------------------------


def test_trees_text_gives_one_line_per_sentence_and_an_empty_line_for_none():
    parses = [None, Delinearized(DOG, ()), None, Delinearized(RAN, ()), None]
    text = trees_text(parses)
    assert text.split("\n") == [
        "",
        "(S (NP (DT The) (NN dog)) (VP (VBD barked)) (. .))",
        "",
        "(S (NP (PRP It)) (VP (VBD ran)))",
        "",
        "",  # After the last line's line end.
    ]
    assert trees_text([]) == ""


def test_repaired_and_repair_counts_count_parses_most_frequent_repair_first():
    one = delinearize("(S DT )S", ["a", "b"])
    three = delinearize("(S (NP NN )VP", ["a", "b"])
    clean = delinearize("(S NN )S", ["a"])
    assert one.repairs == ("missing tags",)
    assert three.repairs == ("label mismatch", "unclosed", "missing tags")
    parses = [one, None, three, clean]
    assert repaired(parses) == 2
    counts = repair_counts(parses)
    assert counts == {"missing tags": 2, "label mismatch": 1, "unclosed": 1}
    assert next(iter(counts)) == "missing tags"


def test_no_parse_and_no_repair_count_nothing():
    parses = [None, Delinearized(RAN, ())]
    assert repaired(parses) == 0
    assert repair_counts(parses) == {}
    assert repaired([]) == 0 and repair_counts([]) == {}


# --- evaluate_parses ------------------------------------------------------------


def _half_result() -> ParsingResult:
    """The flat dog parse (repaired: its S is unclosed) and no parse for RAN."""
    flat = delinearize(FLAT_DOG_TOKENS.removesuffix(" )S"), DOG_WORDS)
    assert flat == Delinearized(FLAT_DOG, ("unclosed",))
    return evaluate_parses([flat, None], [DOG, RAN])


def test_evaluate_parses_scores_by_hand():
    # Gold DOG: NP(0,2) VP(2,3) S(0,3) ("." deleted); gold RAN: NP(0,1)
    # VP(1,2) S(0,2): 6 gold brackets. Test DOG: VP(2,3) S(0,3), both
    # matched; no parse for RAN: nothing. Precision 2/2 = 100, recall
    # 2/6 = 33.33, F1 = 2 * 100 * 33.33 / 133.33 = 50. Tags: DT NN VBD right
    # (3 of DOG's 3 words without "."), none of RAN's 2: 3/5 = 60.
    result = _half_result()
    score = result.score
    assert (score.gold_brackets, score.test_brackets, score.matched) == (6, 2, 2)
    assert score.precision == pytest.approx(100.0)
    assert score.recall == pytest.approx(100 / 3)
    assert score.f1 == pytest.approx(50.0)
    assert score.exact_match == 0.0
    assert score.tagging_accuracy == pytest.approx(60.0)
    assert (result.sentences, result.repaired) == (2, 1)
    assert result.repairs == {"unclosed": 1}


def test_evaluate_parses_of_the_gold_trees_is_100():
    result = evaluate_parses([Delinearized(DOG, ()), Delinearized(RAN, ())], [DOG, RAN])
    assert result.score.f1 == pytest.approx(100.0)
    assert result.score.exact_match == pytest.approx(100.0)
    assert (result.repaired, result.repairs) == (0, {})


def test_evaluate_parses_scores_as_score_corpus_does():
    result = _half_result()
    assert result.score == score_corpus([DOG, RAN], [FLAT_DOG, None])


# --- ParsingResult --------------------------------------------------------------


def test_parsing_result_to_dict_holds_the_scores_and_the_repairs():
    result = _half_result()
    figures = result.to_dict()
    assert set(result.score.to_dict()) <= set(figures)
    assert figures["f1"] == pytest.approx(50.0)
    assert figures["precision"] == pytest.approx(100.0)
    assert figures["parsed"] == figures["sentences"] == 2
    assert figures["repaired"] == 1
    assert figures["repairs"] == {"unclosed": 1}
    figures["repairs"]["other"] = 1  # A copy: the result is left unchanged.
    assert result.repairs == {"unclosed": 1}


def test_parsing_result_report_has_the_table_and_the_repair_line():
    result = _half_result()
    report = result.report()
    assert report.startswith(result.score.format_table())
    assert report.splitlines()[-1] == "repaired parses: 1 of 2 (unclosed 1)"
    clean = evaluate_parses([Delinearized(RAN, ())], [RAN])
    assert clean.report().splitlines()[-1] == "repaired parses: 0 of 1"


def test_parsing_result_str_gives_f1():
    text = str(_half_result())
    assert "F1 50.00" in text
    assert "precision 100.00" in text and "recall 33.33" in text
    assert "2 sentences, 1 repaired" in text


# --- read_parses ----------------------------------------------------------------


def test_read_parses_reads_a_tree_per_line_and_none_for_an_empty_line(tmp_path):
    path = tmp_path / "parses.txt"
    path.write_text(f"{DOG_TEXT}\n\n{RAN}\n", encoding="utf-8")
    parses = read_parses(path, [DOG, RAN, RAN])
    assert parses == [
        Delinearized(parse_tree(DOG_TEXT), ()),
        None,
        Delinearized(RAN, ()),
    ]


def test_read_parses_reads_back_trees_text(tmp_path):
    parses = [None, Delinearized(DOG, ()), None]  # An empty last line too.
    path = tmp_path / "parses.txt"
    path.write_text(trees_text(parses), encoding="utf-8")
    assert read_parses(path, [RAN, DOG, RAN]) == parses


@pytest.mark.parametrize(
    "line", ["The dog barked .", "(S (NN a)", "(S (NN a)) (S (NN b))", "(S (NN a)))"]
)
def test_read_parses_names_the_file_and_line_of_a_line_that_is_not_a_tree(
    tmp_path, line
):
    path = tmp_path / "parses.txt"
    path.write_text(f"{RAN}\n{line}\n{RAN}\n", encoding="utf-8")
    with pytest.raises(DataError, match=f"{path}:2"):
        read_parses(path, [RAN, RAN, RAN])


@pytest.mark.parametrize("lines", [1, 3])
def test_read_parses_refuses_a_file_of_another_length_naming_both(tmp_path, lines):
    path = tmp_path / "parses.txt"
    path.write_text(f"{RAN}\n" * lines, encoding="utf-8")
    with pytest.raises(DataError) as info:
        read_parses(path, [RAN, RAN])
    message = str(info.value)
    assert str(path) in message
    assert f"{lines} lines" in message and "2 trees" in message


# --- evaluate_parser_split and linearized_f1 ---------------------------------------


def _split():
    return types.SimpleNamespace(
        source=["The dog barked .", "It ran"],
        target=[linearize_text(DOG), linearize_text(RAN)],
    )


def test_evaluate_parser_split_of_gold_outputs_is_100_and_writes_the_trees(tmp_path):
    search = _gold_search()
    path = tmp_path / "test_trees.txt"
    result = evaluate_parser_split(search, _split(), path)
    assert search.calls == [["The dog barked .", "It ran"]]
    assert result.score.f1 == pytest.approx(100.0)
    assert (result.sentences, result.repaired) == (2, 0)
    assert path.read_text(encoding="utf-8") == f"{DOG}\n{RAN}\n"


def test_evaluate_parser_split_without_a_path_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = evaluate_parser_split(FakeSearch(lambda text: ""), _split())
    assert list(tmp_path.iterdir()) == []
    assert result.repaired == 2
    # Each "" gives a flat S over XX tags: S matches, 1 of 3 gold brackets
    # per sentence: precision 2/2 = 100, recall 2/6, F1 50.
    assert result.score.f1 == pytest.approx(50.0)


def test_linearized_f1_of_the_targets_is_100():
    split = _split()
    figures = linearized_f1(split.source, split.target, split.target)
    assert figures == {"dev_f1": 100.0, "dev_repaired": 0}


def test_linearized_f1_by_hand():
    # DOG: the flat parse, unclosed (repaired): VP and S of 3 gold matched,
    # 2 test brackets. RAN: "" gives (S (XX It) (XX ran)) (repaired): S of
    # 3 gold matched, 1 test bracket. Precision 3/3 = 100, recall 3/6 = 50,
    # F1 = 2 * 100 * 50 / 150 = 66.67.
    split = _split()
    hypotheses = [FLAT_DOG_TOKENS.removesuffix(" )S"), ""]
    figures = linearized_f1(split.source, split.target, hypotheses)
    assert figures == {"dev_f1": 66.67, "dev_repaired": 2}
