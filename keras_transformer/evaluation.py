"""sacreBLEU scoring (detokenized, 13a, cased) with its signature."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence


@dataclasses.dataclass(frozen=True)
class BleuResult:
    bleu: float
    signature: str
    chrf: float

    def __str__(self) -> str:
        return f"sacreBLEU {self.bleu:.2f} ({self.signature}); chrF {self.chrf:.2f}"


def corpus_scores(hypotheses: Sequence[str], references: Sequence[str]) -> BleuResult:
    """Corpus sacreBLEU and chrF of detokenized hypotheses vs references.

    Raises ValueError when the counts differ: scoring misaligned lines would
    silently give a meaningless number.
    """
    import sacrebleu

    if len(hypotheses) != len(references):
        raise ValueError(
            f"Cannot score {len(hypotheses)} hypotheses against "
            f"{len(references)} references: the line counts must match."
        )
    bleu = sacrebleu.metrics.BLEU(tokenize="13a")
    chrf = sacrebleu.metrics.CHRF()
    hypotheses, refs = list(hypotheses), [list(references)]
    bleu_score = bleu.corpus_score(hypotheses, refs)
    chrf_score = chrf.corpus_score(hypotheses, refs)
    return BleuResult(
        bleu=bleu_score.score,
        signature=str(bleu.get_signature()),
        chrf=chrf_score.score,
    )
