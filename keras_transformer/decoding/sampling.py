"""Sampling translations at random instead of searching: top-k and top-p.

Back-translation, the usual way to use monolingual target text, translates
it into the source language by *sampling* rather than by beam search:
sampled sources are more varied and train a better forward model (Edunov et
al., 2018, "Understanding Back-Translation at Scale"). `SamplingSettings`
says how; `draw_tokens` draws one token per row inside the compiled search
loop (`search.greedy_advance(draw=...)`).

Reproducible by construction: the uniform numbers a sentence draws with
come from NumPy's generator seeded with (seed, the sentence's index in the
input, the sample's index), drawn on the host and passed into the compiled
loop as a tensor. So a seed gives the same samples on every run, whatever
the batch a sentence falls in, and a new seed or a new sentence compiles
nothing. The draw itself is inverse-CDF sampling over the tokens sorted by
probability: the same on every backend up to float rounding.

Light to import: the command line reads it before Keras starts.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from keras_transformer.utils.setting_fields import check_setting, flag_name, setting

SAMPLING_METHODS = ("greedy", "top-k", "top-p")
# What a method uses when its own flag is not given (fairseq's and Hugging
# Face's usual values).
DEFAULT_TOP_K = 10
DEFAULT_TOP_P = 0.9
DEFAULT_SEED = 0
# What each numeric setting means when it is not given (for --help).
UNSET_MEANS = {
    "top_k": str(DEFAULT_TOP_K),
    "top_p": str(DEFAULT_TOP_P),
    "temperature": "1",
    "seed": str(DEFAULT_SEED),
    "num_samples": "1",
}


#: The most samples one input may ask for (`num_samples`).
MAX_SAMPLES = 1000


@dataclasses.dataclass(frozen=True)
class SamplingSettings:
    """How to draw translations: "greedy" (the default) draws nothing, the
    search runs as `SearchSettings` says; "top-k" draws each token among the
    k most probable; "top-p" (nucleus sampling, Holtzman et al., 2020) among
    the fewest most probable tokens whose probabilities sum to at least p.

    The numeric settings default to None, "not given": a value given for a
    method that does not use it is refused rather than ignored. Raises
    ValueError naming the setting and its flag.
    """

    sampling: str = setting(
        "greedy",
        "draw each token at random among the top-k or top-p tokens instead of "
        "searching (greedy: no sampling, the search of --beam-size runs)",
        choices=SAMPLING_METHODS,
    )
    top_k: int | None = setting(None, "top-k: how many tokens to draw among", minimum=1)
    top_p: float | None = setting(
        None,
        "top-p: draw among the most probable tokens whose probabilities sum to "
        "at least this, in (0, 1]",
        minimum=0.0,
        strict=True,
        maximum=1,
    )
    temperature: float | None = setting(
        None,
        "divide the log-probabilities by this before drawing: below 1 sharper, "
        "above 1 flatter; must be > 0 (its limit 0 is --sampling greedy)",
        minimum=0.0,
        strict=True,
    )
    seed: int | None = setting(
        None,
        "seed of the draws: the same seed gives the same samples",
        minimum=0,
        maximum=2**32 - 1,
    )
    # Each sample is a row of the search: a million ran for minutes before
    # its first output. More than 1,000 per input is refused, named.
    num_samples: int | None = setting(
        None, "samples drawn per input", minimum=1, maximum=MAX_SAMPLES
    )

    def __post_init__(self) -> None:
        if self.temperature == 0:
            raise ValueError(
                f"temperature ({flag_name('temperature')}) must be > 0: at 0 "
                "every draw would be the most probable token, which is greedy "
                f"decoding ({flag_name('sampling')} greedy {flag_name('beam_size')}"
                " 1)."
            )
        for field in dataclasses.fields(self):
            check_setting(field, getattr(self, field.name))
        own = {"top-k": "top_k", "top-p": "top_p"}
        for name in ("top_k", "top_p"):
            if getattr(self, name) is not None and own.get(self.sampling) != name:
                method = "top-k" if name == "top_k" else "top-p"
                raise ValueError(
                    f"{flag_name(name)} applies to {flag_name('sampling')} "
                    f"{method}; the method is {self.sampling}."
                )
        if not self.is_sampling:
            given = [
                flag_name(name)
                for name in ("temperature", "seed", "num_samples")
                if getattr(self, name) is not None
            ]
            if given:
                raise ValueError(
                    f"{', '.join(given)} applies to sampling only: add "
                    f"{flag_name('sampling')} top-k or top-p."
                )

    @property
    def is_sampling(self) -> bool:
        return self.sampling != "greedy"

    @property
    def k(self) -> int | None:
        """Tokens drawn among with top-k; None for top-p."""
        if self.sampling != "top-k":
            return None
        return DEFAULT_TOP_K if self.top_k is None else self.top_k

    @property
    def p(self) -> float:
        """The top-p mass; 1.0 (every token) for top-k."""
        if self.sampling != "top-p":
            return 1.0
        return DEFAULT_TOP_P if self.top_p is None else float(self.top_p)

    @property
    def draw_temperature(self) -> float:
        return 1.0 if self.temperature is None else float(self.temperature)

    @property
    def draw_seed(self) -> int:
        return DEFAULT_SEED if self.seed is None else self.seed

    @property
    def samples(self) -> int:
        return 1 if self.num_samples is None else self.num_samples

    def replace(self, **changes: Any) -> SamplingSettings:
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def uniform_numbers(
    seed: int, sentences: list[int], samples: list[int], length: int
) -> np.ndarray:
    """(N, length) float32 in [0, 1): row n for sample `samples[n]` of the
    input sentence `sentences[n]` (-1: a filler row, zeros). A row depends
    on (seed, sentence, sample) only, and its first m numbers are the same
    for any length >= m, so a sentence draws the same tokens whatever the
    batch and its padding."""
    rows = np.zeros((len(sentences), length), np.float32)
    for row, (sentence, sample) in enumerate(zip(sentences, samples)):
        if sentence >= 0:
            generator = np.random.default_rng([seed, sentence, sample])
            rows[row] = generator.random(length, dtype=np.float32)
    return rows


def draw_tokens(log_probs, uniform, *, top_k: int | None, top_p: float, temperature):
    """One token per row drawn from `log_probs` (N, V) with `uniform` (N,)
    numbers in [0, 1): among the `top_k` most probable tokens (all, if
    None), and of those the fewest whose probabilities sum to at least
    `top_p`, after dividing the log-probabilities by `temperature`.
    Returns (N,) int32. Suppressed ids (log-prob about -4e9) have
    probability 0 and are never drawn.

    With top_k=1 it is the argmax: greedy decoding.
    """
    from keras import ops

    log_probs = ops.convert_to_tensor(log_probs, "float32")
    uniform = ops.convert_to_tensor(uniform, "float32")
    scores = log_probs / temperature
    vocab_size = ops.shape(log_probs)[-1]
    if top_k is None and top_p < 1.0 and vocab_size > NUCLEUS_HEAD:
        return _nucleus(scores, uniform, top_p)
    kept = vocab_size if top_k is None else min(top_k, vocab_size)
    sorted_scores, sorted_ids = ops.top_k(scores, kept)
    if kept == 1:  # The argmax (and no softmax over one entry, which warns).
        return ops.cast(sorted_ids[:, 0], "int32")
    probs = ops.softmax(sorted_scores, axis=-1)
    return _inverse_cdf(probs, sorted_ids, uniform, top_p)


# Top-p looks among this many most probable tokens first: sorting the whole
# vocabulary at every step made top-p 0.08x as fast as greedy decoding, and
# a trained model's nucleus is usually far smaller.
NUCLEUS_HEAD = 256


def _nucleus(scores, uniform, top_p: float):
    """Top-p over the whole vocabulary without sorting all of it when the
    `NUCLEUS_HEAD` most probable tokens of every row hold the mass `top_p`
    (then the nucleus lies among them, and the draw is the same as over the
    sorted vocabulary, up to float rounding); else over all of it."""
    from keras import ops

    total = ops.logsumexp(scores, axis=-1, keepdims=True)
    head_scores, head_ids = ops.top_k(scores, NUCLEUS_HEAD)
    head_mass = ops.sum(ops.exp(head_scores - total), axis=-1)

    def draw(sorted_scores, sorted_ids):
        probs = ops.exp(sorted_scores - total)  # Of the whole vocabulary.
        return _inverse_cdf(probs, sorted_ids, uniform, top_p)

    return ops.cond(
        ops.all(head_mass >= top_p),
        lambda: draw(head_scores, head_ids),
        lambda: draw(*ops.top_k(scores, ops.shape(scores)[-1])),
    )


def _inverse_cdf(probs, sorted_ids, uniform, top_p: float):
    """The token of each row whose cumulative probability first passes
    `uniform` times the kept mass; `probs` (N, K) sorted descending."""
    from keras import ops

    if top_p < 1.0:
        # A token is kept while the mass before it is short of top_p: the
        # most probable one always is.
        before = ops.cumsum(probs, axis=-1) - probs
        probs = ops.where(before < top_p, probs, 0.0)
    cdf = ops.cumsum(probs, axis=-1)
    threshold = uniform[:, None] * cdf[:, -1:]
    # The first token whose cdf passes the threshold: a token of probability
    # 0 never does (its cdf equals the one before it).
    index = ops.sum(ops.cast(cdf <= threshold, "int32"), axis=-1)
    index = ops.minimum(index, ops.shape(probs)[-1] - 1)
    token = ops.take_along_axis(sorted_ids, index[:, None], axis=-1)[:, 0]
    return ops.cast(token, "int32")
