"""What every engine `serve` decodes with shares: the interface, names, warm-up."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

from keras_transformer.decoding.settings import SearchSettings
from keras_transformer.serving.jobs import Decoding
from keras_transformer.serving.options import AllowedSettings
from keras_transformer.serving.schema import RequestError
from keras_transformer.utils.setting_fields import flag_name
from keras_transformer.utils.version import __version__

Hypotheses = list[tuple[str, float]]
Step = Callable[[], object]  # One part of a warm-up: a batch shape run.


# What the score of `Translator`'s search (and of the exports that search
# as it does) is, for /v1/info.
SEARCH_SCORE = (
    "beam search: log-probability / ((5 + length) / 6) ** alpha; greedy: "
    "total log-probability"
)


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

    # The warm-up, planned as steps (one batch shape each) that the server
    # runs on a worker thread before it says it is ready, counting them
    # (`Serving.warm_up`); `warm_up*` run one part's steps.

    def warm_up_steps(self, allowed: AllowedSettings, max_tokens: int) -> list[Step]:
        """A search with each allowed setting, for each batch size and source
        length the engine compiles a program for, sources up to `max_tokens`
        tokens."""
        steps = []
        for beam_size, alpha in allowed.combinations():
            settings = self.settings.replace(beam_size=beam_size, alpha=alpha)
            for rows, tokens in self.warm_up_shapes(max_tokens):
                texts = self._warm_up_texts(rows, tokens)
                steps.append(functools.partial(self.translate, texts, settings))
        return steps

    def warm_up_shapes(self, max_tokens: int) -> list[tuple[int, int]]:
        """(rows, source tokens) of the warm-up batches: one batch, lengths
        in steps of 8 (engines that pad nothing compile nothing per shape)."""
        return [(1, tokens) for tokens in range(8, max_tokens + 1, 8)]

    def attention_warm_up_steps(self, max_tokens: int) -> list[Step]:
        """`attention` once for each padded shape it can meet, sources and
        translations up to `max_tokens` tokens (none: no attention here)."""
        return []

    def details_warm_up_steps(self, max_tokens: int) -> list[Step]:
        """The details' teacher-forced pass for every shape it can meet,
        sides up to `max_tokens` tokens (none: no details here)."""
        return []

    def warm_up(
        self, allowed: AllowedSettings, max_tokens: int, stop=lambda: False
    ) -> int:
        """Run `warm_up_steps` until `stop()`; returns the steps run."""
        return run_steps(self.warm_up_steps(allowed, max_tokens), stop)

    def warm_up_attention(self, max_tokens: int, stop=lambda: False) -> int:
        """Run `attention_warm_up_steps` until `stop()`; the steps run."""
        return run_steps(self.attention_warm_up_steps(max_tokens), stop)

    def warm_up_details(self, max_tokens: int, stop=lambda: False) -> int:
        """Run `details_warm_up_steps` until `stop()`; the steps run."""
        return run_steps(self.details_warm_up_steps(max_tokens), stop)

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


def run_steps(steps: Sequence[Step], stop=lambda: False) -> int:
    """Run `steps` in order until `stop()` turns True; returns those run."""
    for count, step in enumerate(steps):
        if stop():  # Shutting down: SIGTERM need not wait for the rest.
            return count
        step()
    return len(steps)
