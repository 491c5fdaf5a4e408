"""sacreBLEU scoring (detokenized, 13a, cased) with its signature."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from pathlib import Path


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


def paper_bleu(hypotheses: Sequence[str], references: Sequence[str]) -> float:
    """Tokenized BLEU with compound splitting, the paper's convention.

    tensor2tensor's get_ende_bleu.sh tokenizes, then splits hyphenated
    compounds ("a-b" -> "a ##AT##-##AT## b") before multi-bleu. We tokenize
    with sacreBLEU's 13a tokenizer, split compounds the same way and score
    the tokens as they are. The result is NOT sacreBLEU and is higher than
    it; report it only next to the sacreBLEU score.
    """
    import re

    import sacrebleu
    from sacrebleu.tokenizers.tokenizer_13a import Tokenizer13a

    if len(hypotheses) != len(references):
        raise ValueError(
            f"Cannot score {len(hypotheses)} hypotheses against "
            f"{len(references)} references: the line counts must match."
        )
    tokenize = Tokenizer13a()

    def split(text: str) -> str:
        return re.sub(r"(\S)-(\S)", r"\1 ##AT##-##AT## \2", tokenize(text))

    bleu = sacrebleu.metrics.BLEU(tokenize="none", force=True)
    return bleu.corpus_score(
        [split(h) for h in hypotheses], [[split(r) for r in references]]
    ).score


def evaluate_split(
    translator, corpus, hypotheses_path: str | os.PathLike | None = None
) -> BleuResult:
    """Translate a whole evaluation split (nothing dropped) and score it.

    Args:
        translator: a `Translator` (strings in, strings out).
        corpus: a `ParallelCorpus` (`source`, `target` lists of strings).
        hypotheses_path: where to write the hypotheses, one per line.
    """
    hypotheses = translator(corpus.source)
    if hypotheses_path is not None:
        from keras_transformer.atomic_files import atomic_write_text

        text = "".join(f"{line}\n" for line in hypotheses)
        atomic_write_text(Path(hypotheses_path), text)
    return corpus_scores(hypotheses, corpus.target)
