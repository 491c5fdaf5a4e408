"""Scores of translations: sacreBLEU and chrF, and the paper's tokenized BLEU.

sacreBLEU is detokenized, 13a, cased, with its signature; the paper's BLEU
is computed on Moses tokens with compound splitting, as multi-bleu does.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
from collections import Counter
from collections.abc import Callable, Sequence
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

    _check_counts(hypotheses, references)
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


def paper_bleu(
    hypotheses: Sequence[str], references: Sequence[str], language: str = "de"
) -> float:
    """Tokenized, compound-split, cased BLEU: the paper's convention.

    tensor2tensor's get_ende_bleu.sh, which produced the paper's numbers,
    tokenizes with the Moses tokenizer (`-l de`), splits hyphenated
    compounds ("a-b" -> "a ##AT##-##AT## b") and scores with multi-bleu.perl
    (cased). We do the same with sacremoses (Moses' tokenizer in Python) on
    both sides, since our references are untokenized text. The result is NOT
    sacreBLEU and is usually higher; report it only next to sacreBLEU.

    Args:
        hypotheses: detokenized translations, one per sentence.
        references: detokenized references, as many as `hypotheses`.
        language: the target language, for the tokenizer's rules
            (abbreviations, apostrophes). Defaults to "de", the paper's.
    """
    _check_counts(hypotheses, references)
    tokenize = paper_tokenizer(language)
    return multi_bleu(
        [tokenize(line) for line in hypotheses], [tokenize(line) for line in references]
    )


def paper_tokenizer(language: str = "de") -> Callable[[str], str]:
    """A function from text to its paper-BLEU tokens (space-separated).

    Moses tokenization as tokenizer.perl does it by default (special
    characters escaped, as "&amp;"), then tensor2tensor's compound split.
    """
    from sacremoses import MosesTokenizer

    tokenizer = MosesTokenizer(lang=language)

    def tokenize(text: str) -> str:
        tokens = tokenizer.tokenize(text, return_str=True, escape=True)
        return split_compounds(tokens)

    return tokenize


# get_ende_bleu.sh's `perl -ple 's{(\S)-(\S)}{$1 ##AT##-##AT## $2}g'`. Perl
# reads bytes there, so only ASCII whitespace counts as space: re.ASCII.
_COMPOUND_HYPHEN = re.compile(r"(\S)-(\S)", re.ASCII)


def split_compounds(text: str) -> str:
    """Split hyphenated compounds: "rich-text" -> "rich ##AT##-##AT## text".

    Matches do not overlap, so "a-b-c" -> "a ##AT##-##AT## b-c", as in Perl.
    """
    return _COMPOUND_HYPHEN.sub(r"\1 ##AT##-##AT## \2", text)


# multi-bleu.perl splits bytes on Perl's \s: ASCII whitespace only (a
# no-break space stays inside a token).
_WHITESPACE = re.compile(r"\s+", re.ASCII)
MAX_ORDER = 4


def multi_bleu(hypotheses: Sequence[str], references: Sequence[str]) -> float:
    """Corpus BLEU (0-100) of tokenized text, as multi-bleu.perl computes it.

    One reference per sentence; cased; clipped n-gram precisions of orders 1
    to 4 summed over the corpus; geometric mean without smoothing (any order
    with no match gives 0); brevity penalty exp(1 - r / c) when the corpus's
    hypothesis length c is below its reference length r. multi-bleu prints
    the score to two decimals; this returns it unrounded.
    """
    _check_counts(hypotheses, references)
    matches, totals = [0] * MAX_ORDER, [0] * MAX_ORDER
    hypothesis_length = reference_length = 0
    for hypothesis, reference in zip(hypotheses, references):
        hypothesis_tokens, reference_tokens = _tokens(hypothesis), _tokens(reference)
        hypothesis_length += len(hypothesis_tokens)
        reference_length += len(reference_tokens)
        for order in range(1, MAX_ORDER + 1):
            found = _ngram_counts(hypothesis_tokens, order)
            allowed = _ngram_counts(reference_tokens, order)
            totals[order - 1] += sum(found.values())
            matches[order - 1] += sum(
                min(count, allowed[ngram]) for ngram, count in found.items()
            )
    if reference_length == 0 or 0 in matches:
        # multi-bleu takes log(0) as -9999999999, so the score is exp(that):
        # 0. (It stops without a score when the references are empty.)
        return 0.0
    log_precision = sum(math.log(m / t) for m, t in zip(matches, totals))
    brevity_penalty = 1.0
    if hypothesis_length < reference_length:
        brevity_penalty = math.exp(1 - reference_length / hypothesis_length)
    return 100 * brevity_penalty * math.exp(log_precision / MAX_ORDER)


def _tokens(line: str) -> list[str]:
    return [token for token in _WHITESPACE.split(line) if token]


def _ngram_counts(tokens: list[str], order: int) -> Counter:
    return Counter(
        tuple(tokens[start : start + order]) for start in range(len(tokens) - order + 1)
    )


def _check_counts(hypotheses: Sequence[str], references: Sequence[str]) -> None:
    # Scoring misaligned lines would silently give a meaningless number.
    if len(hypotheses) != len(references):
        raise ValueError(
            f"Cannot score {len(hypotheses)} hypotheses against "
            f"{len(references)} references: the line counts must match."
        )


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
        from keras_transformer.data.text_files import lines_text
        from keras_transformer.utils.atomic_files import atomic_write_text

        path = Path(hypotheses_path)
        atomic_write_text(path, lines_text(hypotheses, str(path)))
    return corpus_scores(hypotheses, corpus.target)
