"""From a valid request to the job an engine runs: its texts, limits and settings.

Too many texts or a text too long is a 413 naming the limit; an empty batch
or a setting out of range a 422. The search settings of a request are the
server's `SearchSettings` with the request's changes, validated by
`SearchSettings` itself; sampling and constraints only where the server
allows them. The request bodies are `serving.schema`'s.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from keras_transformer.decoding.sampling import SamplingSettings
from keras_transformer.decoding.settings import SearchSettings
from keras_transformer.serving.options import (
    AllowedSettings,
    ServeOptions,
    sampling_spec,
)
from keras_transformer.serving.schema import RequestError, TranslateRequest
from keras_transformer.utils.setting_fields import flag_name


@dataclasses.dataclass(frozen=True)
class TranslateJob:
    """A valid translate request: its texts, settings and n-best size, and
    with details the alignment layer asked for (None: the default)."""

    texts: list[str]
    settings: SearchSettings
    n_best: int
    details: bool = False
    alignment_layer: int | None = None
    sampling: SamplingSettings | None = None  # One of the allowed, resampled.
    # Per text (with --allow-constraints): its phrases, and its prefix ("").
    constraints: list[list[str]] | None = None
    prefixes: list[str] | None = None

    @property
    def guided(self) -> bool:
        return self.constraints is not None or self.prefixes is not None


@dataclasses.dataclass(frozen=True)
class Decoding:
    """What texts asked for with details or sampling are batched by, so
    that one batch runs one of each: the search, the sampling (seed and
    samples included) and with details the alignment layer (0-based)."""

    settings: SearchSettings
    sampling: SamplingSettings | None = None
    alignment_layer: int | None = None  # None: no details.
    # Each text comes as (text, phrases' ids, prefix ids): the constrained
    # search's batches run their texts' own constraints.
    guided: bool = False

    @property
    def details(self) -> bool:
        return self.alignment_layer is not None


def check_token_counts(
    fields: Sequence[str], counts: Sequence[int], limits: ServeOptions
) -> None:
    """413 for the first text whose subword tokens exceed the limit."""
    for field, count in zip(fields, counts):
        if count > limits.max_text_tokens:
            raise RequestError(
                413,
                field,
                f"{field} is {count} subword tokens long; the limit is "
                f"{limits.max_text_tokens} (--max-text-tokens). Nothing is "
                "truncated: split the text.",
            )


# What to tell of a text over --max-text-chars, by how it came to be one.
UNSPLIT_HINT = (  # split_sentences false: the server may split it.
    ", or leave split_sentences out (a document of up to "
    "--max-document-chars is split into sentences)"
)
SENTENCE_HINT = "; it is one sentence, and a sentence is translated whole"


def check_text(
    field: str,
    text: str,
    max_chars: int,
    flag: str = "--max-text-chars",
    hint: str = "",
) -> None:
    """413 for a text over `max_chars` (`hint` ends its advice); 422 for
    what no tokenizer can take."""
    if len(text) > max_chars:
        raise RequestError(
            413,
            field,
            f"{field} has {len(text)} characters; the limit is {max_chars:,} "
            f"({flag}). Nothing is truncated: split the text{hint}.",
        )
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        code = ord(text[error.start])
        raise RequestError(
            422,
            field,
            f"{field} is not valid Unicode: a lone surrogate U+{code:04X} at "
            f"character {error.start} (\\u escapes of surrogates come in pairs).",
        ) from None
    if "\0" in text:
        raise RequestError(
            422, field, f"{field} has a NUL character at {text.index(chr(0))}."
        )


def may_split(request: TranslateRequest) -> bool:
    """Whether the request's texts may be split into sentences:
    `split_sentences` true, or left out without constraints or a prefix
    (those are per text)."""
    if request.split_sentences is not None:
        return request.split_sentences
    return request.constraints is None and request.target_prefix is None


def translate_job(
    request: TranslateRequest,
    defaults: SearchSettings,
    limits: ServeOptions,
    allowed: AllowedSettings,
) -> TranslateJob:
    """Check a `TranslateRequest` against the limits and make its settings."""
    texts = request.texts
    if not texts:
        raise RequestError(422, "texts", "texts is empty: send at least one text.")
    if len(texts) > limits.max_texts:
        raise RequestError(
            413,
            "texts",
            f"texts holds {len(texts)} texts; the limit is {limits.max_texts} "
            "per request (--max-texts). Send them in several requests.",
        )
    for index, text in enumerate(texts):
        field = f"texts[{index}]"
        if may_split(request):  # Each sentence is checked once split.
            check_text(field, text, limits.max_document_chars, "--max-document-chars")
        else:
            check_text(field, text, limits.max_text_chars, hint=UNSPLIT_HINT)
    if request.alignment_layer is not None and not request.details:
        raise RequestError(
            422,
            "alignment_layer",
            "alignment_layer chooses the layer of details' alignment: add "
            '"details": true, or leave it out.',
        )
    sampling = request_sampling(request, allowed)
    if sampling is not None:
        if request.constraints is not None or request.target_prefix is not None:
            raise RequestError(
                422,
                "sampling",
                "Constraints and target_prefix guide the search, not sampling: "
                "leave out one or the other.",
            )
        return _sampling_job(request, defaults, limits, sampling)
    settings = request_settings(request, defaults, allowed)
    n_best = settings.beam_size if request.n_best is None else request.n_best
    if not 1 <= n_best <= settings.beam_size:
        raise RequestError(
            422,
            "n_best",
            f"n_best must be between 1 and the beam size ({settings.beam_size}). "
            f"Received: {n_best}",
        )
    job = TranslateJob(
        texts, settings, n_best, request.details, request.alignment_layer
    )
    if request.constraints is None and request.target_prefix is None:
        return job
    return _guided_job(request, job, limits, allowed)


def _guided_job(request, job, limits, allowed) -> TranslateJob:
    """A job with constraints or prefixes, checked: one entry per text, no
    blank phrase, text by text not split, the best hypothesis only."""
    if not allowed.constraints:
        raise RequestError(
            422,
            "constraints" if request.constraints is not None else "target_prefix",
            "This server takes no constraints or target_prefix: start it with "
            "--allow-constraints (each beam size's constrained search is then "
            "compiled before it is ready).",
        )
    if request.split_sentences:
        raise RequestError(
            422,
            "split_sentences",
            "Constraints and target_prefix are per text; with split_sentences "
            "a text is several sentences. Send each sentence as a text.",
        )
    if request.n_best not in (None, 1):
        raise RequestError(
            422,
            "n_best",
            "The constrained search returns its best hypothesis only: leave "
            f"n_best out or 1. Received: {request.n_best}",
        )
    for name in ("constraints", "target_prefix"):
        given = getattr(request, name)
        if given is not None and len(given) != len(job.texts):
            raise RequestError(
                422,
                name,
                f"{name} has {len(given)} entries for {len(job.texts)} texts: give "
                "one per text (an empty one for none).",
            )
    for index, phrases in enumerate(request.constraints or []):
        for number, phrase in enumerate(phrases):
            field = f"constraints[{index}][{number}]"
            check_text(field, phrase, limits.max_text_chars)
            if not phrase.strip():
                raise RequestError(422, field, f"{field} is blank: give a phrase.")
    for index, prefix in enumerate(request.target_prefix or []):
        check_text(f"target_prefix[{index}]", prefix, limits.max_text_chars)
    constraints = request.constraints
    if constraints is not None:
        constraints = [[p.strip() for p in phrases] for phrases in constraints]
    prefixes = request.target_prefix
    if prefixes is not None:
        prefixes = [prefix.strip() for prefix in prefixes]
    return dataclasses.replace(
        job, n_best=1, constraints=constraints, prefixes=prefixes
    )


def encode_guides(job: TranslateJob, tokenizer, allow_unk: bool) -> list[tuple]:
    """(text, phrases' ids, prefix ids) per text of a guided job; 422 for a
    phrase or prefix that encodes to nothing or to the unknown piece (the
    search never generates it, so it could never be met)."""
    texts = job.texts
    constraints = job.constraints or [[] for _ in texts]
    prefixes = job.prefixes or ["" for _ in texts]
    guides = []
    for index, (text, phrases, prefix) in enumerate(zip(texts, constraints, prefixes)):
        fields = [f"constraints[{index}][{n}]" for n in range(len(phrases))]
        ids = _encode_guide(tokenizer, fields, phrases, allow_unk)
        prefix_ids = []
        if prefix:
            field = f"target_prefix[{index}]"
            prefix_ids = _encode_guide(tokenizer, [field], [prefix], allow_unk)[0]
        guides.append((text, ids, prefix_ids))
    return guides


def _encode_guide(tokenizer, fields, texts, allow_unk: bool) -> list[list[int]]:
    from keras_transformer.decoding.constraint_files import unmeetable

    encoded = tokenizer.encode_target(list(texts)) if texts else []
    for field, text, ids in zip(fields, texts, encoded):
        problem = unmeetable(ids, tokenizer, allow_unk)
        if problem:
            raise RequestError(422, field, f"{field} ({text!r}) {problem}.")
    return [list(map(int, ids)) for ids in encoded]


_SAMPLING_FIELDS = ("sampling", "top_k", "top_p", "temperature", "seed", "num_samples")


def request_sampling(
    request: TranslateRequest, allowed: AllowedSettings
) -> SamplingSettings | None:
    """The request's sampling (None: it searches), validated by
    `SamplingSettings` and one of the server's --allowed-sampling, whose
    programs were compiled before it was ready; 422 naming the field."""
    given = {
        name: getattr(request, name)
        for name in _SAMPLING_FIELDS
        if getattr(request, name) is not None
    }
    if not given:
        return None
    given.setdefault("sampling", "greedy")
    try:
        asked = SamplingSettings(**given)
    except ValueError as error:
        field, message = _sampling_error(str(error))
        raise RequestError(422, field, message) from None
    if not asked.is_sampling:  # "greedy": the search, as without the field.
        return None
    for spec in allowed.sampling:
        if draw_key(spec) == draw_key(asked):
            return spec.replace(seed=asked.seed, num_samples=asked.num_samples)
    shown = ", ".join(sampling_spec(spec) for spec in allowed.sampling)
    raise RequestError(
        422,
        "sampling",
        f"This server draws with {shown or 'no sampling'} (--allowed-sampling, "
        f"METHOD:VALUE[:TEMPERATURE], each compiled before the server is "
        f"ready); this request asks for {sampling_spec(asked)}.",
    )


def draw_key(sampling: SamplingSettings) -> tuple:
    """What a compiled sampling program depends on: not the seed or the
    number of samples."""
    return sampling.sampling, sampling.k, sampling.p, sampling.draw_temperature


def _sampling_error(message: str) -> tuple[str, str]:
    """`SamplingSettings`' message with the request's field names for its
    flags, and the first field it names."""
    for name in (*_SAMPLING_FIELDS, "beam_size"):
        flag = flag_name(name)
        message = message.replace(f"{name} ({flag})", name).replace(flag, name)
    named = [(message.find(name), name) for name in _SAMPLING_FIELDS if name in message]
    return (min(named)[1] if named else "sampling"), message


def _sampling_job(request, defaults, limits, sampling) -> TranslateJob:
    """A sampling request's job: greedy settings (a sample is one token at
    a time), no n-best, texts times samples within --max-texts."""
    if request.beam_size not in (None, 1):
        raise RequestError(
            422,
            "beam_size",
            "beam_size: sampling draws one token at a time (beam 1); leave "
            f"beam_size out. Received: {request.beam_size}",
        )
    if request.n_best is not None:
        raise RequestError(
            422, "n_best", "n_best is of the search; with sampling, see samples."
        )
    rows = len(request.texts) * sampling.samples
    if rows > limits.max_texts:
        raise RequestError(
            413,
            "num_samples",
            f"{len(request.texts)} texts times num_samples {sampling.samples} are "
            f"{rows} translations; the limit is {limits.max_texts} per request "
            "(--max-texts). Send fewer texts or samples per request.",
        )
    settings = defaults.replace(beam_size=1)
    return TranslateJob(
        request.texts,
        settings,
        n_best=1,
        details=request.details,
        alignment_layer=request.alignment_layer,
        sampling=sampling,
    )


def request_settings(
    request: TranslateRequest, defaults: SearchSettings, allowed: AllowedSettings
) -> SearchSettings:
    """The server's settings with the request's beam size and alpha, each
    one of the values this server allows (compiled before it was ready)."""
    for name, values, flag in (
        ("beam_size", allowed.beam_sizes, "--allowed-beam-sizes"),
        ("alpha", allowed.alphas, "--allowed-alphas"),
    ):
        value = getattr(request, name)
        if value is not None and value not in values:
            shown = ", ".join(map(str, values))
            raise RequestError(
                422,
                name,
                f"{name} must be one of {shown} (this server's {flag}: each is "
                f"compiled before the server is ready). Received: {value}",
            )
    settings = defaults
    for name in ("beam_size", "alpha"):
        value = getattr(request, name)
        if value is None:
            continue
        try:
            settings = settings.replace(**{name: value})
        except ValueError as error:  # SearchSettings' own range checks.
            raise RequestError(422, name, _without_flag(name, error)) from None
    return settings


def _without_flag(name: str, error: Exception) -> str:
    """SearchSettings names the command-line flag too; a request has none."""
    return str(error).replace(f"{name} ({flag_name(name)})", name)
