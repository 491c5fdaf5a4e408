"""sacreBLEU scoring (`corpus_scores`) and the paper's tokenized BLEU
(`paper_bleu`: Moses tokens, compound splitting, multi-bleu)."""

from __future__ import annotations

import math

import pytest
import sacrebleu

from keras_transformer.decoding.evaluation import (
    BleuResult,
    corpus_scores,
    multi_bleu,
    paper_bleu,
    paper_tokenizer,
    split_compounds,
)

pytestmark = pytest.mark.backend_neutral

HYPOTHESES = ["The cat sat on the mat.", "There is a big dog in the garden."]
REFERENCES = ["The cat is sitting on the mat.", "A big dog is in the garden."]


def test_scores_equal_sacrebleu_computed_independently():
    result = corpus_scores(HYPOTHESES, REFERENCES)
    assert isinstance(result, BleuResult)
    assert result.bleu == sacrebleu.corpus_bleu(HYPOTHESES, [REFERENCES]).score
    assert result.chrf == sacrebleu.corpus_chrf(HYPOTHESES, [REFERENCES]).score
    assert 0.0 < result.bleu < 100.0


def test_identical_hypotheses_and_references_score_100():
    result = corpus_scores(REFERENCES, REFERENCES)
    assert result.bleu == pytest.approx(100.0)
    assert result.chrf == pytest.approx(100.0)


def test_hand_computed_partial_match():
    # 1- to 4-gram precisions 5/6, 3/5, 2/4, 1/3; equal lengths, so no
    # brevity penalty: BLEU = (5/6 * 3/5 * 2/4 * 1/3) ** (1/4) = 0.5373.
    result = corpus_scores(["the cat is on the mat"], ["the cat is on a mat"])
    assert round(result.bleu, 2) == 53.73


def test_signature_is_13a_mixed_case_and_printed():
    result = corpus_scores(HYPOTHESES, REFERENCES)
    assert "tok:13a" in result.signature
    assert "case:mixed" in result.signature
    text = str(result)
    assert text.startswith(f"sacreBLEU {result.bleu:.2f} (")
    assert result.signature in text
    assert f"chrF {result.chrf:.2f}" in text
    # Mixed case: case differences cost points.
    assert corpus_scores(["Hello World"], ["hello world"]).bleu < 100.0


def test_count_mismatch_names_both_counts():
    with pytest.raises(ValueError, match="3 hypotheses against 5 references"):
        corpus_scores(["a", "b", "c"], ["a", "b", "c", "d", "e"])


COMPOUND_HYPOTHESES = [
    "The state-of-the-art well-known long-term plan.",
    "A self-driving car-sharing service.",
]
COMPOUND_REFERENCES = [
    "The state-of-the-art well-known short-term plan.",
    "A self-driving ride-sharing service.",
]


def test_paper_bleu_splits_compounds_and_is_higher_than_sacrebleu():
    paper = paper_bleu(COMPOUND_HYPOTHESES, COMPOUND_REFERENCES)
    sacre = corpus_scores(COMPOUND_HYPOTHESES, COMPOUND_REFERENCES).bleu
    assert paper >= sacre
    assert paper > sacre + 10  # Compound splitting rewards the shared parts.
    assert paper_bleu(REFERENCES, REFERENCES) == pytest.approx(100.0)


def test_paper_bleu_count_mismatch():
    with pytest.raises(ValueError, match="2 hypotheses against 1 references"):
        paper_bleu(COMPOUND_HYPOTHESES, COMPOUND_REFERENCES[:1])


# The expected numbers and tokens below come from Moses itself, run once by
# hand (mosesdecoder's scripts, perl 5): both sides through
#   tokenizer.perl -l de -q | perl -ple 's{(\S)-(\S)}{$1 ##AT##-##AT## $2}g'
# (tensor2tensor's get_ende_bleu.sh), then `multi-bleu.perl REF < HYP`, whose
# printed "BLEU = x" is the number here. No Moses code is part of this repo.
MOSES_SETS = {
    "german": (
        [
            "Der Rhein-Main-Gebiet ist z.B. für 3,5 Mio. Menschen ein Zuhause.",
            "Er sagte: „Das ist gut & schön!“",
            "Die E-Mail-Adresse lautet info@example.com, nicht mehr.",
            "Wir haben's geschafft (endlich) - oder?",
        ],
        [
            "Das Rhein-Main-Gebiet ist z.B. für 3,5 Mio. Menschen die Heimat.",
            "Er sagte: „Das ist gut & schön.“",
            "Die E-Mail-Adresse ist info@example.com und nicht mehr.",
            "Wir haben's endlich geschafft - oder nicht?",
        ],
    ),
    "english_compounds": (COMPOUND_HYPOTHESES, COMPOUND_REFERENCES),
    # Hypotheses shorter than the references: brevity penalty 0.807.
    "short_hypotheses": (
        ["Ein großer Hund läuft über die Wiese.", "Zwei junge Männer spielen Fußball."],
        [
            "Ein großer brauner Hund läuft über die Wiese.",
            "Zwei junge Männer spielen im Park Fußball.",
        ],
    ),
    # Cased: "Liest Ein" does not match "liest ein".
    "case": (
        [
            "Ein Mann fährt Fahrrad auf der Straße in der Stadt.",
            "Eine Frau Liest Ein Buch.",
        ],
        [
            "Ein Mann fährt Fahrrad auf der Straße in der Stadt.",
            "Eine Frau liest ein Buch.",
        ],
    ),
    # Unigrams all match, no bigram does: multi-bleu does not smooth.
    "no_four_gram": (["Katze Hund Maus Vogel"], ["Hund Katze Vogel Maus"]),
}
MULTI_BLEU_PERL = {
    "german": 61.52,  # 84.3/66.0/55.8/46.2 (BP=1.000, hyp_len=51, ref_len=50)
    "english_compounds": 74.87,  # 92.0/82.6/71.4/57.9 (BP=1.000)
    "short_hypotheses": 57.07,  # 100.0/83.3/60.0/50.0 (BP=0.807, 14 vs 17)
    "case": 77.21,  # 88.2/80.0/69.2/72.7 (BP=1.000)
    "no_four_gram": 0.00,  # 100.0/0.0/0.0/0.0
}
# tokenizer.perl -l de (escaping on, its default), then the compound split.
MOSES_TOKENS = [
    "Der Rhein ##AT##-##AT## Main ##AT##-##AT## Gebiet ist z.B. für 3,5 Mio. "
    "Menschen ein Zuhause .",
    "Er sagte : „ Das ist gut &amp; schön ! “",
    "Die E ##AT##-##AT## Mail ##AT##-##AT## Adresse lautet info @ example.com , "
    "nicht mehr .",
    "Wir haben &apos; s geschafft ( endlich ) - oder ?",
]


@pytest.mark.parametrize("name", sorted(MOSES_SETS))
def test_paper_bleu_equals_multi_bleu_perl(name):
    hypotheses, references = MOSES_SETS[name]
    assert round(paper_bleu(hypotheses, references), 2) == MULTI_BLEU_PERL[name]


def test_paper_tokenizer_equals_moses_tokenizer_perl_then_compound_split():
    tokenize = paper_tokenizer("de")
    assert [tokenize(line) for line in MOSES_SETS["german"][0]] == MOSES_TOKENS


def test_split_compounds_as_perl_substitution():
    assert split_compounds("rich-text format") == "rich ##AT##-##AT## text format"
    # Non-overlapping matches: the "b" of "a-b" is consumed, "-c" stays.
    assert split_compounds("a-b-c") == "a ##AT##-##AT## b-c"
    assert split_compounds("- a -b c-") == "- a -b c-"  # Needs a non-space each side.


def test_multi_bleu_hand_computed_brevity_penalty():
    # Every n-gram matches; c = 4 < r = 5: BP = exp(1 - 5/4) = 0.7788.
    assert multi_bleu(["a b c d"], ["a b c d e"]) == pytest.approx(
        100 * math.exp(-0.25)
    )
    # Longer hypotheses get no penalty (and no bonus): 1-4-gram precisions
    # 4/5, 3/4, 2/3, 1/2 -> (4/5 * 3/4 * 2/3 * 1/2) ** (1/4) = 0.6687.
    assert round(multi_bleu(["a b c d x"], ["a b c d"]), 2) == 66.87


def test_multi_bleu_is_cased_and_splits_on_ascii_whitespace_only():
    assert multi_bleu(["A b c d"], ["a b c d"]) == 0.0
    assert multi_bleu(["a  b\tc d "], ["a b c d"]) == pytest.approx(100.0)
    # A no-break space is inside a token for Perl's byte-wise split.
    assert multi_bleu(["a\u00a0b c d e"], ["a b c d e"]) == 0.0


def test_multi_bleu_empty_references_or_hypotheses_score_zero():
    assert multi_bleu([""], [""]) == 0.0
    assert multi_bleu([""], ["a b c d"]) == 0.0


def test_multi_bleu_count_mismatch():
    with pytest.raises(ValueError, match="1 hypotheses against 2 references"):
        multi_bleu(["a"], ["a", "b"])
