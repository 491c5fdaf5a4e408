"""`Translator`: strings in, strings out."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from keras import ops

from keras_transformer.config import PAD_ID
from keras_transformer.decoding.batching import length_order, unsearched
from keras_transformer.decoding.generator import SequenceGenerator, smaller_batch_size
from keras_transformer.decoding.search import NEG_INF
from keras_transformer.decoding.settings import SearchSettings, search_settings


def real_hypotheses(hypotheses: list[tuple[str, float]]) -> list[tuple[str, float]]:
    """The best, then the others that are real: a search that finished
    fewer than k hypotheses fills the rest of its pool with about NEG_INF."""
    return hypotheses[:1] + [h for h in hypotheses[1:] if h[1] > NEG_INF / 2]


class Translator:
    """Tokenize, decode (greedy or beam search), detokenize, in batches.

    Sentences are sorted by length and padded to multiples of 8, and every
    batch has `batch_size` rows, or for a short last batch `batch_size`
    divided by a power of 4 (completed with empty rows), so the compiled
    search sees a small fixed set of shapes.

    Args:
        model: a `Transformer`.
        tokenizer: the run's `SubwordTokenizer`.
        settings: the `SearchSettings`. Defaults to the paper's: beam 4,
            alpha 0.6, source + 50 (§6.1); UNK (shown as the tokenizer's
            unknown piece) suppressed; PAD and BOS are never generated.
        batch_size: sentences per decoding batch. Defaults to 64.
        jit: compile the search. Defaults to True.
        drop_finished: sentences that are done leave the batch as the search
            goes (see `SequenceGenerator`); the translations are the same.
            Defaults to True.
        **changes: `SearchSettings` fields to change (`beam_size=1`).

    Example:
        >>> translator = Translator(model, tokenizer, beam_size=1)
        >>> translator(["The dog sleeps."])
        ['Der Hund schläft.']
    """

    def __init__(
        self,
        model,
        tokenizer,
        settings: SearchSettings | None = None,
        *,
        batch_size: int = 64,
        jit: bool = True,
        drop_finished: bool = True,
        **changes,
    ):
        if not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(
                f"batch_size must be an int >= 1. Received: {batch_size!r}"
            )
        self.model = model
        self.tokenizer = tokenizer
        self.batch_size = batch_size
        self.generator = SequenceGenerator(
            model,
            search_settings(settings, **changes),
            jit=jit,
            drop_finished=drop_finished,
        )

    @property
    def settings(self) -> SearchSettings:
        return self.generator.settings

    def __call__(self, texts: Sequence[str]) -> list[str]:
        return self.translate(texts)

    def search(
        self, texts: Sequence[str], abandoned=None
    ) -> list[tuple[np.ndarray, np.ndarray]]:
        """Every hypothesis of the search per text, in input order: (ids
        (k, L) int32, up to and including EOS then PAD; scores (k,)
        float32), best first. A blank text gets (k, 0) ids and zero
        scores: it is not searched. `abandoned`: a callable giving a bool
        per text, read as the search goes: a text it marks True stops
        being searched (see `SequenceGenerator`), its result unfinished."""
        texts = list(texts)
        encoded = self.tokenizer.encode(texts)
        results = unsearched(len(texts), self.settings.beam_size)
        order = length_order(texts, encoded)
        for start in range(0, len(order), self.batch_size):
            chunk = order[start : start + self.batch_size]
            rows = [encoded[i] for i in chunk]
            # A short last batch is completed to a size the search also
            # shrinks to, so no extra shape compiles (and a lone sentence
            # is not searched as a full batch).
            size = smaller_batch_size(self.batch_size, len(rows))
            rows += [[]] * (size - len(rows))
            gone = None if abandoned is None else _rows_of(abandoned, chunk, size)
            sequences, scores = self.generator(pad_batch(rows), gone)
            for row, index in enumerate(chunk):
                results[index] = (sequences[row], scores[row])
        return results

    def translate_ids(self, texts: Sequence[str]) -> list[np.ndarray]:
        """Best output ids per text (up to and including EOS)."""
        return [_strip_pad(ids[0]) for ids, _ in self.search(texts)]

    def translate(self, texts: Sequence[str]) -> list[str]:
        """One translation per input, in input order; "" for a blank input."""
        return self._detokenize(self.translate_ids(texts))

    def nbest(
        self, texts: Sequence[str], abandoned=None
    ) -> list[list[tuple[str, float]]]:
        """The k hypotheses of the search per text, best first, as
        (translation, score) pairs; the score is what the search ranks by
        (length-normalised log-probability in beam search, total
        log-probability in greedy search). A blank text gets [("", 0.0)];
        a sentence that finished fewer than k hypotheses lists only those."""
        results = self.search(texts, abandoned)
        flat = [_strip_pad(row) for ids, _ in results for row in ids]
        strings = iter(self._detokenize(flat))
        nbest = []
        for ids, scores in results:
            hypotheses = [(next(strings), float(score)) for score in scores]
            blank = not ids.shape[1]
            nbest.append(hypotheses[:1] if blank else real_hypotheses(hypotheses))
        return nbest

    def _detokenize(self, outputs: list[np.ndarray]) -> list[str]:
        """Output ids -> strings; "" for an empty output."""
        width = max((len(o) for o in outputs), default=0)
        padded = np.zeros((len(outputs), max(width, 1)), np.int32)
        for row, ids in enumerate(outputs):
            padded[row, : len(ids)] = ids
        texts = self.tokenizer.detokenize(padded) if len(outputs) else []
        return [text if len(ids) else "" for text, ids in zip(texts, outputs)]

    def attention_weights(self, source: str, target: str | None = None):
        """Attention weights of every layer and head, for plots.

        Translates `source` unless `target` is given, then runs the model
        once with teacher forcing. Returns a dict with "source_tokens",
        "target_tokens" (the pieces as strings) and "encoder_self_attention",
        "decoder_self_attention", "cross_attention": lists (one per layer)
        of (H, query, key) float32 arrays.
        """
        if target is None:
            target = self.translate([source])[0]
        source_ids = np.asarray([self.tokenizer.encode([source])[0]], np.int32)
        target_ids = self.tokenizer.encode([target])[0]
        decoder_input = np.asarray([[self.tokenizer.bos_id, *target_ids]], np.int32)
        weights = self.model.attention_weights(source_ids, decoder_input)
        pieces = self.tokenizer.id_to_piece
        weights = {
            name: [ops.convert_to_numpy(w)[0] for w in layers]
            for name, layers in weights.items()
        }
        weights["source_tokens"] = [pieces(i) for i in source_ids[0]]
        weights["target_tokens"] = ["<s>"] + [pieces(i) for i in target_ids]
        return weights


def _rows_of(abandoned, chunk: list[int], size: int):
    """`abandoned` (a bool per text) for the `size` rows of a batch holding
    the texts `chunk` (the padding rows: False)."""

    def gone() -> np.ndarray:
        flags = np.zeros(size, bool)
        flags[: len(chunk)] = np.asarray(abandoned(), bool)[chunk]
        return flags

    return gone


def _strip_pad(ids: np.ndarray) -> np.ndarray:
    return ids[ids != PAD_ID]


def pad_batch(sequences: Sequence[Sequence[int]], length: int | None = None):
    """Right-pad ragged ids to (B, length) int32 (length: the longest, rounded
    up to a multiple of 8 to limit the number of compiled shapes)."""
    longest = max((len(s) for s in sequences), default=0)
    if length is None:
        length = max(8, int(math.ceil(longest / 8)) * 8)
    if longest > length:
        raise ValueError(f"A sequence of {longest} tokens exceeds length={length}.")
    batch = np.full((len(sequences), length), PAD_ID, np.int32)
    for row, ids in enumerate(sequences):
        batch[row, : len(ids)] = ids
    return batch
