"""What the HTTP API accepts and answers, and how a bad request is told.

The request and response bodies are pydantic models (FastAPI draws the
OpenAPI schema from them), but a body is parsed here, step by step, so that
each way of getting it wrong has its own answer naming the field and what
was expected: bytes that are not UTF-8 or not JSON (400), a field of the
wrong type, a missing or unknown field (422). What a valid request asks the
engine to do, and its limits, is `serving.jobs`'.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError


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
    split_sentences: bool | None = Field(
        None,
        description="Split each text into sentences (the server's "
        "--source-language), translate them as one batch and rejoin them "
        "with the text's own whitespace and line breaks. Default: split when "
        "a text of the request holds more than one sentence (never with "
        "constraints or target_prefix); false: never; true: always.",
    )
    sampling: str | None = Field(
        None,
        description="Draw each token at random instead of searching: top-k or "
        "top-p (nucleus), with top_k, top_p and temperature among the server's "
        "--allowed-sampling (see /v1/info, allowed). The search's beam is 1; "
        "samples holds each draw.",
    )
    top_k: int | None = Field(None, description="top-k: tokens drawn among.")
    top_p: float | None = Field(
        None, description="top-p: the probability mass drawn among, in (0, 1]."
    )
    temperature: float | None = Field(
        None, description="Sampling: divides the log-probabilities, > 0."
    )
    seed: int | None = Field(
        None,
        description="Sampling: the same seed gives the same samples of a text "
        "(its place in texts counts too). Default 0.",
    )
    num_samples: int | None = Field(
        None,
        description="Sampling: samples drawn per text (texts times samples at "
        "most --max-texts). Default 1.",
    )
    constraints: list[list[str]] | None = Field(
        None,
        description="Per text, target phrases its translation must contain "
        "([] for none): the constrained beam search (dynamic beam allocation). "
        "Servers started with --allow-constraints.",
    )
    target_prefix: list[str] | None = Field(
        None,
        description='Per text, the text its translation must start with ("" '
        "for none). Servers started with --allow-constraints.",
    )
    details: bool = Field(
        False,
        description="Add to each translation its tokens (subword pieces, the "
        "end token last), token_scores (the model's log-probability of each), "
        'alignment ("i-j": source word i to target word j, 0-based over '
        "whitespace-separated words) and the score's normalization. The Keras "
        "engine only.",
    )
    alignment_layer: int | None = Field(
        None,
        description="With details: the decoder layer whose cross-attention, "
        "averaged over its heads, gives the alignment; negative counts from the "
        "last. Default: the last.",
    )


class Hypothesis(BaseModel):
    translation: str
    score: float


class Details(BaseModel):
    """What `details: true` adds to a translation (and to each sentence's)."""

    normalization: str = Field(description="How score is normalised, in words.")
    tokens: list[str] = Field(description="Subword pieces, the end token last.")
    token_scores: list[float] = Field(
        description="Log-probability of each token; they sum to the "
        "unnormalised sentence log-probability."
    )
    alignment: list[str] = Field(
        description='"i-j" pairs: source word i to target word j, 0-based.'
    )


class SentenceTranslation(BaseModel):
    source: str = Field(description="The sentence, as split from the text.")
    translation: str
    score: float
    n_best: list[Hypothesis]
    details: Details | None = Field(None, description="With details: true.")


class ConstraintsMet(BaseModel):
    satisfied: bool = Field(description="Every phrase and the prefix are in.")
    unmet: list[str] = Field(description="The phrases the translation lacks.")
    prefix: str | None = Field(None, description='"unmet" when the prefix is not.')


class Sample(Hypothesis):
    details: Details | None = Field(None, description="With details: true.")


class Translation(BaseModel):
    translation: str = Field(description="The best hypothesis (the first sample).")
    score: float = Field(description="Its score (see /v1/info, score).")
    n_best: list[Hypothesis] = Field(
        description="The hypotheses, best first ([] with split_sentences: see "
        "each sentence's)."
    )
    split_sentences: bool = Field(
        description="Whether the text was split into sentences (see sentences)."
    )
    sentences: list[SentenceTranslation] | None = Field(
        None, description="With split_sentences: each sentence's translation."
    )
    details: Details | None = Field(
        None,
        description="With details: true, of the best hypothesis (with "
        "split_sentences: see each sentence's).",
    )
    samples: list[Sample] | None = Field(
        None, description="With sampling: each sample, in the order drawn."
    )
    constraints: ConstraintsMet | None = Field(
        None, description="With constraints or target_prefix: were they met?"
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
