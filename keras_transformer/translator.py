"""`Translator`: strings in, strings out."""

from __future__ import annotations

from collections.abc import Sequence

from keras_transformer.data.pipeline import pad_batch
from keras_transformer.decoding import greedy_decode


class Translator:
    """Tokenize, decode, detokenize, in batches sorted by length.

    Args:
        model: a `Transformer`.
        tokenizer: the run's `SubwordTokenizer`.
        batch_size: sentences per decoding batch. Defaults to 64.
        max_extra_length: output may be this much longer than the source.
            Defaults to 50 (§6.1).

    Example:
        >>> translator = Translator(model, tokenizer)
        >>> translator(["The dog sleeps."])
        ['Der Hund schläft.']
    """

    def __init__(
        self,
        model,
        tokenizer,
        *,
        batch_size: int = 64,
        max_extra_length: int = 50,
    ):
        self.model = model
        self.tokenizer = tokenizer
        self.batch_size = batch_size
        self.max_extra_length = max_extra_length

    def __call__(self, texts: Sequence[str]) -> list[str]:
        return self.translate(texts)

    def translate(self, texts: Sequence[str]) -> list[str]:
        """One translation per input, in input order; "" for a blank input."""
        texts = list(texts)
        encoded = self.tokenizer.encode(texts)
        results = [""] * len(texts)
        # Similar lengths together: less padding, fewer distinct shapes.
        order = sorted(
            (i for i, ids in enumerate(encoded) if ids and texts[i].strip()),
            key=lambda i: len(encoded[i]),
        )
        for start in range(0, len(order), self.batch_size):
            chunk = order[start : start + self.batch_size]
            source = pad_batch([encoded[i] for i in chunk])
            output = greedy_decode(
                self.model, source, max_extra_length=self.max_extra_length
            )
            for index, text in zip(chunk, self.tokenizer.detokenize(output)):
                results[index] = text
        return results

