"""What the HTTP API accepts and answers, and how a bad request is told.

The request and response bodies are pydantic models (FastAPI draws the
OpenAPI schema from them), but a body is parsed here, step by step, so that
each way of getting it wrong has its own answer naming the field and what
was expected: bytes that are not UTF-8 or not JSON (400), a field of the
wrong type, a missing or unknown field, an empty batch, a setting out of
range (422), too many texts or a text too long (413, with the limit). The
search settings of a request are the server's `SearchSettings` with the
request's changes, validated by `SearchSettings` itself.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from keras_transformer.decoding.settings import SearchSettings
from keras_transformer.serving.options import AllowedSettings, ServeOptions
from keras_transformer.utils.setting_fields import flag_name


class RequestError(Exception):
    """A bad request: its HTTP status, the field at fault and why (and any
    headers the answer needs, such as Retry-After)."""

    def __init__(
        self,
        status: int,
        field: str | None,
        message: str,
        headers: dict[str, str] | None = None,
    ):
        super().__init__(message)
        self.status = status
        self.field = field
        self.message = message
        self.headers = headers

    def body(self) -> dict[str, Any]:
        return {"error": {"field": self.field, "message": self.message}}


class _Strict(BaseModel):
    # No coercion ("4" is not a beam size) and no unknown fields (a typo
    # would otherwise be ignored without a word).
    model_config = ConfigDict(extra="forbid", strict=True)


class TranslateRequest(_Strict):
    texts: list[str] = Field(
        description="Texts to translate (one sentence or line each).",
        examples=[["A dog runs on the beach.", "Two men play football."]],
    )
    beam_size: int | None = Field(
        None, description="Beam width; 1 is greedy search. Default: the server's."
    )
    n_best: int | None = Field(
        None,
        description="Hypotheses to return per text, at most the beam size. "
        "Default: the beam size.",
    )
    alpha: float | None = Field(
        None,
        description="Length penalty exponent, ((5 + length) / 6) ** alpha. "
        "Default: the server's.",
    )
    split_sentences: bool = Field(
        False,
        description="Split each text into sentences (the server's "
        "--source-language), translate them as one batch and rejoin them "
        "with the text's own whitespace and line breaks.",
    )


class Hypothesis(BaseModel):
    translation: str
    score: float


class SentenceTranslation(BaseModel):
    source: str = Field(description="The sentence, as split from the text.")
    translation: str
    score: float
    n_best: list[Hypothesis]


class Translation(BaseModel):
    translation: str = Field(description="The best hypothesis.")
    score: float = Field(description="Its score (see /v1/info, score).")
    n_best: list[Hypothesis] = Field(
        description="The hypotheses, best first ([] with split_sentences: see "
        "each sentence's)."
    )
    sentences: list[SentenceTranslation] | None = Field(
        None, description="With split_sentences: each sentence's translation."
    )


class TranslateResponse(BaseModel):
    translations: list[Translation] = Field(description="One per text, in order.")
    settings: dict[str, Any] = Field(description="The search settings used.")
    milliseconds: float = Field(description="Time from arrival to answer.")


class AttentionRequest(_Strict):
    source: str = Field(description="The source text.", examples=["A dog runs."])
    translation: str = Field(
        description="A translation of it (for instance one of its n-best).",
        examples=["Ein Hund rennt."],
    )


class AttentionResponse(BaseModel):
    source_tokens: list[str] = Field(description="Subword pieces of the source.")
    target_tokens: list[str] = Field(
        description="Subword pieces of the translation, then the end token: "
        "row i of each matrix is the attention while producing token i."
    )
    cross_attention: list[list[list[list[float]]]] = Field(
        description="[layer][head][target token][source token], rows sum to 1."
    )
    milliseconds: float


class ErrorDetail(BaseModel):
    field: str | None = Field(
        description="What is at fault: a field ('texts[2]'), 'body', a header "
        "('Content-Type'), 'path', 'method', 'http'; null when it is not the "
        "request (overload, warming up, a server failure)."
    )
    message: str


class ErrorResponse(BaseModel):
    error: ErrorDetail


@dataclasses.dataclass(frozen=True)
class TranslateJob:
    """A valid translate request: its texts, settings and n-best size."""

    texts: list[str]
    settings: SearchSettings
    n_best: int


def parse_body(body: bytes) -> Any:
    """UTF-8 JSON -> Python values; 400 naming the byte or the position."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as error:
        bad = body[error.start : error.start + 1]
        raise RequestError(
            400,
            "body",
            f"The body is not valid UTF-8: byte {bad!r} at offset {error.start} "
            f"({error.reason}). Send JSON encoded as UTF-8.",
        ) from None
    try:
        return json.loads(text, parse_constant=_refuse_constant)
    except json.JSONDecodeError as error:
        raise RequestError(
            400,
            "body",
            f"The body is not valid JSON: {error.msg} at line {error.lineno} "
            f"column {error.colno}.",
        ) from None
    except (ValueError, RecursionError) as error:  # Too deep; an over-long int.
        raise RequestError(
            400, "body", f"The body cannot be read as JSON here: {error}."
        ) from None


def _refuse_constant(name: str):
    raise RequestError(
        400, "body", f"The body is not valid JSON: {name} is not a number."
    )


def validate(model: type[_Strict], data: Any) -> Any:
    """`model` from parsed JSON; the first problem as a 422 naming its field."""
    try:
        return model.model_validate(data)
    except ValidationError as error:
        problem = error.errors(include_url=False)[0]
        raise RequestError(422, *_describe(model, problem)) from None


def _describe(model: type[_Strict], problem: dict) -> tuple[str, str]:
    location = problem["loc"]
    field = _field_path(location)
    kind = problem["type"]
    if not location:
        return "body", f"The body must be a JSON object. Received: {_show(problem)}"
    if kind == "missing":
        return field, f"{field} is required."
    if kind == "extra_forbidden":
        fields = ", ".join(model.model_fields)
        return field, f"{field} is not a field of this request. Fields: {fields}."
    return field, f"{field}: {problem['msg']}. Received: {_show(problem)}"


def _field_path(location) -> str:
    path = ""
    for part in location:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else part)
    return path


def _show(problem: dict) -> str:
    text = json.dumps(problem.get("input"), ensure_ascii=False)
    return text if len(text) <= 60 else text[:57] + "..."


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


def check_text(
    field: str, text: str, max_chars: int, flag: str = "--max-text-chars"
) -> None:
    """413 for a text over `max_chars`; 422 for what no tokenizer can take."""
    if len(text) > max_chars:
        raise RequestError(
            413,
            field,
            f"{field} has {len(text)} characters; the limit is {max_chars:,} "
            f"({flag}). Nothing is truncated: split the text.",
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
        if request.split_sentences:
            check_text(field, text, limits.max_document_chars, "--max-document-chars")
        else:
            check_text(field, text, limits.max_text_chars)
    settings = request_settings(request, defaults, allowed)
    n_best = settings.beam_size if request.n_best is None else request.n_best
    if not 1 <= n_best <= settings.beam_size:
        raise RequestError(
            422,
            "n_best",
            f"n_best must be between 1 and the beam size ({settings.beam_size}). "
            f"Received: {n_best}",
        )
    return TranslateJob(texts, settings, n_best)


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
