"""The engines `keras-transformer serve` decodes with, interchangeable.

Each takes a batch of texts and one `SearchSettings` and returns every text's
hypotheses, best first, as (translation, score) pairs:

- `KerasEngine`: the run's model (or with `ensemble`, it and others as an
  `Ensemble`) through `Translator` (any backend), one `Translator` per set
  of settings asked for (a few kept, each compiled once); the only one with
  attention weights, details, sampling and constraints.
- `CTranslate2Engine`: a CTranslate2 export (given, or made at start-up).
  CTranslate2 takes its settings per call; its differences from `Translator`
  are those of the export (`export.ctranslate2.DIFFERENCES`).
- `SavedModelEngine`: an exported SavedModel (given, or made at start-up),
  whose search settings were fixed at export: a request asking for others
  is refused naming the field.
- `OnnxEngine`: an ONNX export (given, or made at start-up), searched by
  `export.onnx_translator.OnnxTranslator` with any settings: NumPy's search
  over onnxruntime, `Translator`'s translations.

A request with details, sampling or constraints is batched under a
`protocol.Decoding` key and goes to `decode`, which only the Keras engine
has: per text `Translator.generate`'s record (or the samples).

Engines are called from the batcher's worker threads only, `workers` of them
side by side where `serving.server.decode_workers` allows more than one.
"""

from __future__ import annotations

import collections
import json
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from keras_transformer.decoding import scoring
from keras_transformer.decoding.batching import real_hypotheses
from keras_transformer.decoding.compile import compile_function
from keras_transformer.decoding.opening import OpenedModel, open_model
from keras_transformer.decoding.scoring import (
    ForcedScorer,
    padded_length,
    padded_lengths,
)
from keras_transformer.decoding.settings import SearchSettings
from keras_transformer.serving.options import AllowedSettings
from keras_transformer.serving.protocol import Decoding, RequestError
from keras_transformer.utils.setting_fields import flag_name
from keras_transformer.version import __version__

Hypotheses = list[tuple[str, float]]
ENGINES = ("keras", "ctranslate2", "savedmodel", "onnx")
#: The engines that `--quantize` applies to (the others run an export as is).
QUANTIZING_ENGINES = ("keras", "ctranslate2")


class AttentionUnavailable(RuntimeError):
    """This engine cannot give attention weights."""


class Engine:
    """What the server needs of an engine (see the module docstring)."""

    name = ""
    has_attention = False
    # Takes --allowed-sampling and --allow-constraints (its own search).
    has_guided_search = False
    score = ""  # What a hypothesis' score is, for /v1/info.

    def __init__(self, tokenizer, settings: SearchSettings):
        self.tokenizer = tokenizer
        self.settings = settings  # The defaults of a request.

    def check_settings(self, settings: SearchSettings) -> None:
        """Raise `RequestError` (422, naming the field) for settings this
        engine cannot search with."""
        try:
            settings.check_vocabulary(self.tokenizer.vocab_size)
        except ValueError as error:
            message = str(error).replace("beam_size (--beam-size)", "beam_size")
            raise RequestError(422, "beam_size", message) from None

    def translate(self, texts: Sequence[str], settings: SearchSettings, abandoned=None):
        """Hypotheses per text, best first; a blank text gets [("", 0.0)].
        `abandoned`: a callable giving a bool per text, True once its
        caller has left; an engine that can stops searching those texts
        (the Keras engine, between search segments), the others ignore it."""
        raise NotImplementedError

    def run_batch(self, texts: Sequence[str], key, abandoned=None) -> list:
        """The batcher's call: `translate` for a `SearchSettings` key,
        `decode` for a `Decoding` one (details or sampling)."""
        if isinstance(key, Decoding):
            return self.decode(texts, key, abandoned)
        return self.translate(texts, key, abandoned)

    def alignment_layer(self, layer: int | None) -> int:
        """The 0-based decoder layer of a request's details (`layer` as
        asked, None: the default); `RequestError` if it has none."""
        raise RequestError(
            422,
            "details",
            "details (tokens, token scores, alignments) need --engine keras; "
            f"this server runs {self.name}. Leave details out.",
        )

    def decode(self, texts: Sequence[str], key: Decoding, abandoned=None) -> list:
        """Per text, with details `Translator.generate`'s record (with its
        n-best when searching), else the hypotheses or samples as
        `translate`'s."""
        raise NotImplementedError

    def allowed(self, asked: AllowedSettings | None) -> AllowedSettings:
        """The settings requests may use: `asked` (the flags), checked, or
        by default the server's own settings and greedy search."""
        allowed = asked or AllowedSettings.around(
            self.settings.beam_size, self.settings.alpha
        )
        allowed.require(self.settings.beam_size, self.settings.alpha)
        self._check_guided(allowed)
        for beam_size in allowed.beam_sizes:
            try:
                self.check_settings(self.settings.replace(beam_size=beam_size))
            except RequestError as error:
                raise ValueError(f"--allowed-beam-sizes: {error.message}") from None
        return allowed

    def _check_guided(self, allowed: AllowedSettings) -> None:
        if self.has_guided_search:
            return
        if allowed.sampling:
            raise ValueError(
                f"--allowed-sampling needs --engine keras; --engine {self.name} "
                "does not draw with our seeds."
            )
        if allowed.constraints:
            raise ValueError(
                f"--allow-constraints needs --engine keras; --engine {self.name} "
                "has no constrained search of ours."
            )

    def warm_up(
        self, allowed: AllowedSettings, max_tokens: int, stop=lambda: False
    ) -> int:
        """Search once with each allowed setting, for each batch size and
        source length the engine compiles a program for, sources up to
        `max_tokens` tokens; returns the batch shapes run. Called on a worker
        thread before the server says it is ready."""
        searches = 0
        for beam_size, alpha in allowed.combinations():
            settings = self.settings.replace(beam_size=beam_size, alpha=alpha)
            for rows, tokens in self.warm_up_shapes(max_tokens):
                if stop():  # Shutting down.
                    return searches
                self.translate(self._warm_up_texts(rows, tokens), settings)
                searches += 1
        return searches

    def warm_up_shapes(self, max_tokens: int) -> list[tuple[int, int]]:
        """(rows, source tokens) of the warm-up batches: one batch, lengths
        in steps of 8 (engines that pad nothing compile nothing per shape)."""
        return [(1, tokens) for tokens in range(8, max_tokens + 1, 8)]

    def warm_up_attention(self, max_tokens: int, stop=lambda: False) -> int:
        """Run `attention` once for each padded shape it can meet, sources
        and translations up to `max_tokens` tokens; returns the shapes run
        (0: this engine has no attention). Called on a worker thread
        before the server says it is ready."""
        return 0

    def warm_up_details(self, max_tokens: int, stop=lambda: False) -> int:
        """Compile the details' teacher-forced pass for every shape it can
        meet, sides up to `max_tokens` tokens; returns the shapes run (0:
        this engine has no details)."""
        return 0

    def _warm_up_texts(self, rows: int, tokens: int) -> list[str]:
        """`rows` texts of about `tokens` subword tokens each (words from
        the vocabulary: any text the tokenizer takes would do)."""
        pieces = map(self.tokenizer.id_to_piece, range(self.tokenizer.vocab_size))
        words = [word for word in (p.lstrip("\u2581") for p in pieces) if _word(word)]
        words = words[:64] or ["warm"]
        text = " ".join(words[i % len(words)] for i in range(tokens))
        while len(self.tokenizer.encode([text])[0]) > tokens and " " in text:
            text = text.rsplit(" ", 1)[0]
        return [text] * rows

    def attention(self, source: str, translation: str) -> dict[str, Any]:
        raise AttentionUnavailable(
            f"Attention weights need --engine keras; this server runs {self.name}."
        )

    def info(self) -> dict[str, Any]:
        return {
            "engine": self.name,
            "attention": self.has_attention,
            "score": self.score,
            "tokenizer": {
                "kind": self.tokenizer.kind,
                "vocab_size": self.tokenizer.vocab_size,
            },
            "version": __version__,
        }

    def close(self) -> None:
        """Release what the engine holds (nothing, unless it says so)."""


def _word(piece: str) -> bool:
    return len(piece) > 2 and piece.isalpha()


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
    score = (
        "beam search: log-probability / ((5 + length) / 6) ** alpha; greedy: "
        "total log-probability"
    )
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

    def warm_up(
        self, allowed: AllowedSettings, max_tokens: int, stop=lambda: False
    ) -> int:
        """Every program of every allowed search: for each batch size the
        `Translator` pads to and each source length up to `max_tokens`
        (padded to multiples of 8), `SequenceGenerator.warm_up` compiles the
        start, each cache length and each batch size the search shrinks to.
        Returns the batch shapes warmed per setting times the settings."""
        searches = [
            (self.settings.replace(beam_size=beam_size, alpha=alpha), None)
            for beam_size, alpha in allowed.combinations()
        ]
        greedy = self.settings.replace(beam_size=1)
        searches += [(greedy, sampling) for sampling in allowed.sampling]
        # Every allowed setting keeps its compiled search: none is evicted.
        self.kept_translators = max(self.kept_translators, len(searches))
        shapes = self.warm_up_shapes(max_tokens)
        token = min(self.tokenizer.vocab_size - 1, 8)  # A word, not a special id.
        generators = []
        for settings, sampling in searches:
            translator = self._translator(settings, sampling)
            generators.append(translator.generator)
            if allowed.constraints and sampling is None:
                generators.append(translator.constrained_generator())
        for generator in generators:
            for rows, tokens in shapes:
                if stop():  # Shutting down: SIGTERM need not wait for it.
                    return 0
                generator.warm_up(np.full((rows, tokens), token, np.int32))
        return len(shapes) * len(generators)

    def warm_up_shapes(self, max_tokens: int) -> list[tuple[int, int]]:
        """Every batch size `Translator` pads a batch to, by every source
        length up to `max_tokens` (padded to multiples of 8)."""
        from keras_transformer.decoding.generator import smaller_batch_size

        sizes = {
            smaller_batch_size(self.batch_size, n)
            for n in range(1, self.batch_size + 1)
        }
        lengths = range(8, max_tokens + 1, 8)
        return [
            (rows, length) for rows in sorted(sizes, reverse=True) for length in lengths
        ]

    def _translator(self, settings: SearchSettings, sampling=None):
        """The `Translator` of `settings` and `sampling` (one of the allowed,
        with a request's seed and samples), kept: one compiled search each."""
        from keras_transformer.decoding.translator import Translator

        if settings.is_greedy:  # No length penalty: one search for any alpha.
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

    def warm_up_details(self, max_tokens: int, stop=lambda: False) -> int:
        """Every program of the details' pass (`ForcedScorer.warm_up`): the
        batch sizes the search runs at by `padded_lengths(max_tokens)`."""
        return self.scorer.warm_up(max_tokens, stop)

    def warm_up_attention(self, max_tokens: int, stop=lambda: False) -> int:
        """Compile `attention`'s program for each length it pads to, sources
        and translations of up to `max_tokens` tokens (the decoder's input
        is one longer: BOS): `scoring.padded_lengths`, 7 programs for 256."""
        # A word, not a special id: the masks treat id 0 as padding.
        token = min(self.tokenizer.vocab_size - 1, 8)
        self.attention_limit = max_tokens + 1
        lengths = padded_lengths(self.attention_limit)
        for count, length in enumerate(lengths):
            if stop():  # Shutting down.
                return count
            ids = np.full((1, length), token, np.int32)
            _float64(self._attention_weights(ids, ids)[0])  # Run to the end.
        return len(lengths)

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
        source_ids, target_ids = tokenizer.encode([source, translation])
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
        from keras_transformer.data.tokenizer import load_tokenizer
        from keras_transformer.utils.optional_imports import require

        ctranslate2 = require("ctranslate2", "serve", "--engine ctranslate2")
        self.export_info = _export_info(directory, "ctranslate2")
        super().__init__(load_tokenizer(directory / "tokenizer"), settings)
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
        from keras_transformer.export.ctranslate2 import translate_batch_options

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


class SavedModelEngine(Engine):
    """An exported SavedModel; its search settings were fixed at export."""

    name = "savedmodel"
    score = KerasEngine.score

    def __init__(self, directory: Path, settings: SearchSettings):
        from keras_transformer.data.tokenizer import load_tokenizer
        from keras_transformer.export.savedmodel import SavedModelTranslator

        self.model = SavedModelTranslator(directory)
        tokenizer = load_tokenizer(directory / "assets" / "tokenizer")
        super().__init__(tokenizer, self.model.settings)
        self.directory = directory
        _check_flags(settings, self.model.settings, directory)

    def check_settings(self, settings: SearchSettings) -> None:
        fixed = self.model.settings
        for name, value in settings.to_dict().items():
            if value != getattr(fixed, name):
                raise RequestError(
                    422,
                    name,
                    f"{name}: this server's SavedModel was exported with {name}="
                    f"{getattr(fixed, name)!r} and cannot search with {value!r} "
                    "(its settings are fixed at export). Leave it out, or serve "
                    "with --engine keras or ctranslate2.",
                )

    def allowed(self, asked: AllowedSettings | None) -> AllowedSettings:
        if asked is not None:
            self._check_guided(asked)
        fixed = self.model.settings
        only = AllowedSettings((fixed.beam_size,), (fixed.alpha,))
        if asked is not None and asked != only:
            raise ValueError(
                f"--allowed-beam-sizes/--allowed-alphas: the SavedModel in "
                f"{self.directory.name} searches with beam_size={fixed.beam_size} "
                f"and alpha={fixed.alpha} only (fixed at export). Leave them out, "
                "or serve with --engine keras or ctranslate2."
            )
        return only

    def translate(self, texts: Sequence[str], settings: SearchSettings, abandoned=None):
        found = self.model.nbest(list(texts))
        return [
            real_hypotheses(h) if text.strip() else [("", 0.0)]
            for text, h in zip(texts, found)
        ]

    def info(self) -> dict[str, Any]:
        model = {
            "export": self.directory.name,
            "file": self.model.info["model"],
            "quantization": self.model.info.get("quantization"),
        }
        return {**super().info(), "model": model}


class OnnxEngine(Engine):
    """An ONNX export directory (`export --format onnx`): any settings."""

    name = "onnx"
    score = KerasEngine.score

    def __init__(
        self, directory: Path, settings: SearchSettings, threads: int, batch_size: int
    ):
        from keras_transformer.export.onnx_translator import OnnxTranslator

        self.model = OnnxTranslator(directory, threads=threads, batch_size=batch_size)
        super().__init__(self.model.tokenizer, settings)
        self.directory = directory
        self.check_settings(settings)

    def translate(self, texts: Sequence[str], settings: SearchSettings, abandoned=None):
        return self.model.nbest(list(texts), settings)

    def info(self) -> dict[str, Any]:
        model = {
            "export": self.directory.name,
            "file": self.model.info.get("model"),
            "quantization": None,
        }
        return {**super().info(), "model": model}


def _check_flags(flags: SearchSettings, fixed: SearchSettings, directory) -> None:
    """Search flags left at their defaults take the export's settings; one
    given with another value than the export's cannot be honoured."""
    default = SearchSettings()
    for name, value in flags.to_dict().items():
        if value not in (getattr(default, name), getattr(fixed, name)):
            raise ValueError(
                f"{flag_name(name)} {value}: the SavedModel in {directory} was "
                f"exported with {name}={getattr(fixed, name)!r}, fixed at export. "
                f"Leave {flag_name(name)} out, or serve with --engine keras or "
                "ctranslate2."
            )


def _export_info(directory: Path, expected: str) -> dict[str, Any]:
    path = directory / "export.json"
    if not path.is_file():
        raise FileNotFoundError(
            f"{path} not found: --export-dir {directory} is not an export of "
            "keras-transformer export."
        )
    info = json.loads(path.read_text(encoding="utf-8"))
    if info.get("format") != expected:
        raise ValueError(
            f"--export-dir {directory} holds a {info.get('format')!r} export; "
            f"--engine {expected} needs --format {expected}."
        )
    return info


def open_engine(
    name: str,
    run_dir: str | os.PathLike,
    settings: SearchSettings,
    *,
    model: str | os.PathLike | None = None,
    export_dir: str | os.PathLike | None = None,
    scratch: Path,
    batch_size: int,
    threads: int,
    workers: int = 1,
    quantize: str | None = None,
    ensemble: Sequence[str] = (),
) -> Engine:
    """The engine `name` for the run in `run_dir`.

    CTranslate2 and SavedModel read `export_dir` when given, else export
    the run (with `model`, with `settings`) into `scratch` first. `quantize`
    ("int8"): Keras's int8 weights (keras) or CTranslate2's (ctranslate2).
    `ensemble`: models decoding with the run's (`decoding.ensemble`), Keras
    engine only.
    """
    from keras_transformer.quantization import check_quantize_mode

    if name not in ENGINES:
        raise ValueError(f"--engine must be one of {', '.join(ENGINES)}: {name!r}")
    check_quantize_mode(quantize)
    if quantize is not None and name not in QUANTIZING_ENGINES:
        raise ValueError(
            f"--quantize applies to --engine {' or '.join(QUANTIZING_ENGINES)}; "
            f"--engine {name} runs the weights its export holds."
        )
    if ensemble and name != "keras":
        raise ValueError(
            f"--ensemble needs --engine keras; --engine {name} runs one export."
        )
    if name == "keras":
        if export_dir is not None:
            raise ValueError(
                "--export-dir is for --engine ctranslate2, savedmodel or onnx."
            )
        opened = open_model(
            run_dir,
            model=model,
            settings=settings,
            quantize=quantize,
            ensemble=ensemble,
        )
        return KerasEngine(opened, batch_size, quantize, ensemble)
    if export_dir is None:
        export_dir = _export(name, run_dir, settings, model, scratch / name)
    elif model is not None:
        raise ValueError("--model and --export-dir both name the weights: pass one.")
    if name == "ctranslate2":
        return CTranslate2Engine(Path(export_dir), settings, threads, workers, quantize)
    if name == "onnx":
        return OnnxEngine(Path(export_dir), settings, threads, batch_size)
    return SavedModelEngine(Path(export_dir), settings)


def _export(name: str, run_dir, settings, model, out: Path) -> Path:
    from keras_transformer import export

    if name == "ctranslate2":
        return export.export_ctranslate2(run_dir, out, settings, model=model)
    if name == "onnx":
        return export.export_onnx(run_dir, out, settings, model=model)
    return export.export_translator(run_dir, out, settings, model=model)
