"""`CTranslate2Engine`: a CTranslate2 export, its settings taken per call.

Its differences from `Translator` are the export's
(`export.ctranslate2.DIFFERENCES`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from keras_transformer.decoding.batching import real_hypotheses
from keras_transformer.decoding.settings import SearchSettings
from keras_transformer.export.reading import (
    read_export_info,
    read_export_tokenizer,
    translate_batch_options,
)
from keras_transformer.serving.engines.base import Engine, Hypotheses


class CTranslate2Engine(Engine):
    """A CTranslate2 export directory (`export --format ctranslate2`)."""

    name = "ctranslate2"
    score = (
        "CTranslate2's: log-probability / length ** alpha (beam search; "
        "its length penalty), total log-probability (greedy)"
    )

    def __init__(
        self,
        directory: Path,
        settings: SearchSettings,
        threads: int,
        workers: int = 1,
        quantize: str | None = None,
    ):
        from keras_transformer.utils.optional_imports import require

        ctranslate2 = require("ctranslate2", "serve", "--engine ctranslate2")
        self.export_info = read_export_info(directory, self.name, "--export-dir")
        tokenizer = read_export_tokenizer(directory, self.export_info, self.name)
        super().__init__(tokenizer, settings)
        self.directory = directory
        # inter_threads: batches translated at once, one per calling thread.
        # --quantize int8: CTranslate2 converts the weights as it loads them.
        self.translator = ctranslate2.Translator(
            str(directory),
            device="cpu",
            compute_type=quantize or "default",
            inter_threads=workers,
            intra_threads=threads,
        )
        self.quantize = quantize
        vocab = range(self.tokenizer.vocab_size)
        self._ids = {self.tokenizer.id_to_piece(i): i for i in vocab}
        self.check_settings(settings)

    def translate(self, texts: Sequence[str], settings: SearchSettings, abandoned=None):
        encoded = self.tokenizer.encode(list(texts))
        rows = [i for i, ids in enumerate(encoded) if ids and texts[i].strip()]
        results: list[Hypotheses] = [[("", 0.0)] for _ in texts]
        limits = {i: len(encoded[i]) + settings.max_extra_length for i in rows}
        found = self._search([encoded[i] for i in rows], settings)
        # CTranslate2 has one length limit per batch, the longest source's:
        # a sentence that ran past its own is searched again alone with it.
        again = [i for i, ids in zip(rows, found) if _longest(ids) > limits[i]]
        for index in again:
            found[rows.index(index)] = self._search([encoded[index]], settings)[0]
        for index, hypotheses in zip(rows, found):
            results[index] = self._hypotheses(hypotheses)
        return results

    def _search(self, sources: list[list[int]], settings: SearchSettings):
        """[(ids per hypothesis, scores)] per source, EOS included."""
        if not sources:
            return []
        pieces = [[self.tokenizer.id_to_piece(i) for i in ids] for ids in sources]
        results = self.translator.translate_batch(
            pieces,
            **translate_batch_options(self.tokenizer, settings),
            num_hypotheses=settings.beam_size,
            return_scores=True,
            return_end_token=True,
            max_decoding_length=max(map(len, pieces)) + settings.max_extra_length,
        )
        return [
            ([[self._ids[p] for p in h] for h in r.hypotheses], list(r.scores))
            for r in results
        ]

    def _hypotheses(self, found) -> Hypotheses:
        ids, scores = found
        width = max(1, _longest(found))
        padded = np.zeros((len(ids), width), np.int32)
        for row, hypothesis in enumerate(ids):
            padded[row, : len(hypothesis)] = hypothesis
        strings = self.tokenizer.detokenize(padded)
        return real_hypotheses(list(zip(strings, map(float, scores))))

    def info(self) -> dict[str, Any]:
        model = {
            "export": self.directory.name,
            "file": self.export_info.get("model"),
            "quantization": self.quantize or self.export_info.get("quantization"),
        }
        return {**super().info(), "model": model}


def _longest(found) -> int:
    return max((len(h) for h in found[0]), default=0)
