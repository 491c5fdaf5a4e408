"""`KerasEngine`: the model `open_model` opened, through `Translator`, on any backend.

One `Translator` per set of settings asked for (a few kept, each compiled
once); the only engine with attention weights, details, sampling and
constraints (`decode`).
"""

from __future__ import annotations

import collections
import functools
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from keras_transformer.decoding import scoring
from keras_transformer.decoding.compile import compile_function
from keras_transformer.decoding.opening import OpenedModel
from keras_transformer.decoding.scoring import (
    ForcedScorer,
    padded_length,
    padded_lengths,
)
from keras_transformer.decoding.settings import SearchSettings
from keras_transformer.serving.engines.base import SEARCH_SCORE, Engine, Step
from keras_transformer.serving.jobs import Decoding
from keras_transformer.serving.options import AllowedSettings
from keras_transformer.serving.schema import RequestError


def _model_info(opened: OpenedModel) -> dict[str, Any]:
    config = opened.config
    return {
        "run": opened.name,  # No absolute paths to a client.
        "file": opened.path.name,
        "layers": [config.num_encoder_layers, config.num_decoder_layers],
        "d_model": config.d_model,
        "heads": config.num_heads,
        "vocab_size": config.vocab_size,
    }


class KerasEngine(Engine):
    """The model `decoding.opening.open_model` opened (a run's, a preset's,
    quantized, an ensemble), on the Keras backend this process runs."""

    name = "keras"
    has_attention = True
    has_guided_search = True
    score = SEARCH_SCORE
    kept_translators = 4  # Settings asked for recently, each compiled once.

    def __init__(
        self,
        opened: OpenedModel,
        batch_size: int,
        quantize: str | None = None,
        ensemble: Sequence[str] = (),
    ):
        super().__init__(opened.tokenizer, opened.settings)
        self.quantize = quantize  # Applied by `open_model`: reported here.
        self.opened = opened
        self.ensemble = tuple(ensemble)
        # The model, or it and the --ensemble members as one.
        self.model = opened.model
        self.batch_size = batch_size
        self._translators: collections.OrderedDict = collections.OrderedDict()
        self._translators_lock = threading.Lock()  # Workers share the cache.
        # Shared by every Translator: its programs depend on the model alone.
        self.scorer = ForcedScorer(self.model, batch_size)
        self._translator(self.settings)  # Refuses bad defaults before serving.
        # The longest side /v1/attention pads to (warm_up_attention sets it):
        # a request of up to this many tokens a side compiles nothing new.
        self.attention_limit: int | None = None
        model = self.model
        self._attention_weights = compile_function(
            lambda s, t: model.attention_weights(s, t)["cross_attention"], model
        )

    def warm_up_steps(self, allowed: AllowedSettings, max_tokens: int) -> list[Step]:
        """Every program of every allowed search: for each batch size the
        `Translator` pads to and each source length up to `max_tokens`
        (`batching.ladder_lengths`), `SequenceGenerator.warm_up` compiles the
        start, each cache length and each batch size the search shrinks to.
        One step per batch shape and search."""
        searches = [
            (self.settings.replace(beam_size=beam_size, alpha=alpha), None)
            for beam_size, alpha in allowed.combinations()
        ]
        greedy = self.settings.replace(beam_size=1)
        searches += [(greedy, sampling) for sampling in allowed.sampling]
        # Every allowed setting keeps its compiled search: none is evicted.
        self.kept_translators = max(self.kept_translators, len(searches))
        token = min(self.tokenizer.vocab_size - 1, 8)  # A word, not a special id.
        generators = {}  # By identity: the alphas of a search share one.
        for settings, sampling in searches:
            translator = self._translator(settings, sampling)
            generators[id(translator.generator)] = translator.generator
            if allowed.constraints and sampling is None:
                constrained = translator.constrained_generator()
                generators[id(constrained)] = constrained
        return [
            functools.partial(
                generator.warm_up, np.full((rows, tokens), token, np.int32)
            )
            for generator in generators.values()
            for rows, tokens in self.warm_up_shapes(max_tokens)
        ]

    def warm_up_shapes(self, max_tokens: int) -> list[tuple[int, int]]:
        """Every batch size `Translator` pads a batch to, by every source
        length it pads to up to `max_tokens` (`batching.ladder_lengths`)."""
        from keras_transformer.decoding.batching import ladder_lengths
        from keras_transformer.decoding.generator import padded_batch_size

        sizes = {
            padded_batch_size(self.batch_size, n) for n in range(1, self.batch_size + 1)
        }
        lengths = ladder_lengths(max_tokens)
        return [
            (rows, length) for rows in sorted(sizes, reverse=True) for length in lengths
        ]

    def _translator(self, settings: SearchSettings, sampling=None):
        """The `Translator` of `settings` and `sampling` (one of the allowed,
        with a request's seed and samples), kept: one compiled search each."""
        from keras_transformer.decoding.translator import Translator

        # One compiled search for every alpha (a value it takes, not a
        # program each: `Translator.with_alpha`).
        alpha = settings.alpha
        settings = settings.replace(alpha=self.settings.alpha)
        draws = (
            None if sampling is None else sampling.replace(seed=None, num_samples=None)
        )
        key = (settings, draws)
        with self._translators_lock:
            translator = self._translators.pop(key, None)
            if translator is None:
                translator = Translator(
                    self.model,
                    self.tokenizer,
                    settings,
                    batch_size=self.batch_size,
                    sampling=draws,
                )
                translator.scorer = self.scorer
            self._translators[key] = translator
            while len(self._translators) > self.kept_translators:
                self._translators.popitem(last=False)
            if not settings.is_greedy:  # Greedy search has no length penalty.
                translator = translator.with_alpha(alpha)
        if sampling is None:
            return translator
        return translator.resampled(sampling.seed, sampling.num_samples)

    def translate(self, texts: Sequence[str], settings: SearchSettings, abandoned=None):
        return self._translator(settings).nbest(texts, abandoned)

    def alignment_layer(self, layer: int | None) -> int:
        try:
            layers = self.model.config.num_decoder_layers
            return scoring.alignment_layer(layers, layer)
        except ValueError as error:
            raise RequestError(422, "alignment_layer", str(error)) from None

    def decode(self, texts: Sequence, key: Decoding, abandoned=None) -> list:
        translator = self._translator(key.settings, key.sampling)
        guides = {}
        if key.guided:  # (text, phrases' ids, prefix ids) each.
            texts, constraints, prefixes = map(list, zip(*texts))
            guides = {"constraints": constraints, "prefixes": prefixes}
        elif not key.details:
            return translator.nbest(texts, abandoned)
        return translator.generate(
            texts,
            n_best=key.sampling is None,
            alignment_layer=key.alignment_layer,
            abandoned=abandoned,
            **guides,
        )

    def details_warm_up_steps(self, max_tokens: int) -> list[Step]:
        """Every program of the details' pass (`ForcedScorer.warm_up_steps`):
        the batch sizes the search runs at by `padded_lengths(max_tokens)`."""
        return self.scorer.warm_up_steps(max_tokens)

    def attention_warm_up_steps(self, max_tokens: int) -> list[Step]:
        """`attention`'s program for each length it pads to, sources and
        translations of up to `max_tokens` tokens (the decoder's input is
        one longer: BOS): `scoring.padded_lengths`, 7 programs for 256."""
        # A word, not a special id: the masks treat id 0 as padding.
        token = min(self.tokenizer.vocab_size - 1, 8)
        self.attention_limit = max_tokens + 1

        def step(length: int) -> None:
            ids = np.full((1, length), token, np.int32)
            _float64(self._attention_weights(ids, ids)[0])  # Run to the end.

        return [
            functools.partial(step, length)
            for length in padded_lengths(self.attention_limit)
        ]

    def attention(self, source: str, translation: str) -> dict[str, Any]:
        """Cross-attention of every layer and head, teacher-forced on the
        tokens of `translation`: row i is the step that produced target
        token i (the last row, the end token).

        Both sides are padded to one length, `scoring.padded_length`'s (8, 16,
        32, ... up to the server's limit), and the model runs compiled
        (eager JAX compiles every op of every new shape: 20 s and more): a
        handful of programs, all compiled at warm-up, where a program per
        pair of lengths in steps of 8 would be a thousand. The masks give
        padding no weight, and it is cut off again."""
        from keras_transformer.decoding.batching import pad_batch

        tokenizer = self.tokenizer
        (source_ids,) = tokenizer.encode([source])
        (target_ids,) = tokenizer.encode_target([translation])
        decoder_input = [tokenizer.bos_id, *target_ids]
        longest = max(len(source_ids), len(decoder_input))
        length = padded_length(longest, self.attention_limit)
        layers = self._attention_weights(
            pad_batch([source_ids], length), pad_batch([decoder_input], length)
        )
        rows, columns = len(decoder_input), len(source_ids)
        piece = tokenizer.id_to_piece
        return {
            "source_tokens": [piece(i) for i in source_ids],
            "target_tokens": [piece(i) for i in [*target_ids, tokenizer.eos_id]],
            "cross_attention": [
                # float64 first: rounded float32 prints as 0.1234000027...
                np.round(_float64(w)[0, :, :rows, :columns], 4).tolist()
                for w in layers
            ],
        }

    def info(self) -> dict[str, Any]:
        model = {**_model_info(self.opened), "quantization": self.quantize}
        if self.ensemble:  # Names, not paths (as the run's).
            model["ensemble"] = [Path(spec).name for spec in self.ensemble]
        return {**super().info(), "model": model}


def _float64(tensor) -> np.ndarray:
    from keras import ops

    return np.asarray(ops.convert_to_numpy(tensor), np.float64)
