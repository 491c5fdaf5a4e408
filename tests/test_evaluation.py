"""sacreBLEU scoring (`corpus_scores`) and the paper's tokenized BLEU."""

from __future__ import annotations

import pytest
import sacrebleu

from keras_transformer.evaluation import BleuResult, corpus_scores, paper_bleu

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
