"""The flags of `keras-transformer serve`, each declared and checked once.

`ServeOptions` holds the batching and the limits of one request,
`ServerSettings` what is served, where, who may call it and which search
settings a request may ask for. `serve`'s flags are made from their fields
(`max_wait_ms` is `--max-wait-ms`), as `train`'s are from `TrainOptions`.
Light to import: the command line reads it before Keras starts.
"""

from __future__ import annotations

import dataclasses

from keras_transformer.decoding.sampling import SamplingSettings
from keras_transformer.decoding.settings import SearchSettings, WeightOptions
from keras_transformer.utils.setting_fields import (
    check_setting,
    setting,
    shared_setting,
)

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8080
ENGINES = ("keras", "ctranslate2", "savedmodel", "onnx")
#: The engines that `--quantize` applies to (the others run an export as is).
QUANTIZING_ENGINES = ("keras", "ctranslate2")


@dataclasses.dataclass(frozen=True)
class ServeOptions:
    """Dynamic batching and the limits of one request.

    The batching defaults were measured with `benchmarks/serving_load.py`
    on the `small` Multi30k model (docs/benchmarks-http-*.md).
    """

    # 0: serving.server.default_batch_size, measured per engine.
    max_batch_size: int = setting(
        0,
        "dynamic batching: texts decoded together, at most (0: 8 for --engine "
        "keras, 32 for the others)",
        minimum=0,
    )
    # 0: under load a batch forms while the last one decodes; a wait only
    # slows a lone client (docs/benchmarks-http-batching.md, "on a quiet machine").
    max_wait_ms: float = setting(
        0.0,
        "dynamic batching: how long the oldest waiting text may wait for "
        "others to join its batch (0: decode what is waiting at once)",
        minimum=0.0,
    )
    # An accepted request waits about max_queue / throughput plus a batch: at
    # 2x the capacity of a 2-core machine (7-14 sentences/s), 256 gave a p99
    # of 6-14 s and 64 of 9-11 s in a slower hour (docs/benchmarks-http-*.md).
    max_queue: int = setting(
        64, "texts that may wait for a batch; past them, 503 + Retry-After", minimum=1
    )
    max_texts: int = setting(64, "texts per /v1/translate request", minimum=1)
    max_text_chars: int = setting(
        1000, "characters per text (longer: 413; nothing is truncated)", minimum=1
    )
    # Characters do not bound the work: byte fallback spells an emoji in 4
    # tokens, and the encoder's attention grows with the square of the count.
    max_text_tokens: int = setting(
        256, "subword tokens per text, after tokenizing (longer: 413)", minimum=1
    )
    # A document is split into sentences; each is a text for the limits above.
    # About 40 sentences of news text: within --max-texts' 64 per request.
    max_document_chars: int = setting(
        5000,
        "characters per text of a request with split_sentences (each sentence "
        "also within --max-text-chars and --max-text-tokens)",
        minimum=1,
    )
    # Which engines decode side by side: serving.server.decode_workers.
    workers: int = setting(
        0,
        "batches decoded at once (0: 2 on 2 or more cores for --engine "
        "ctranslate2, and keras on jax or tensorflow; else 1)",
        minimum=0,
        maximum=64,  # A thread and, for CTranslate2, a model replica each.
    )
    threads: int = setting(
        0,
        "CTranslate2 and ONNX engines: intra-op threads per batch decoding (0: "
        "the cores this process may use, less one for the HTTP side, shared by "
        "the workers)",
        minimum=0,
    )

    # Slow clients hold a connection and its memory; these bound them.
    header_timeout_s: float = setting(
        10.0,
        "seconds a client has to send a request's line and headers (then 408)",
        minimum=0.0,
        strict=True,
    )
    body_timeout_s: float = setting(
        30.0, "seconds a client has to send a body (then 408)", minimum=0.0, strict=True
    )
    keep_alive_s: float = setting(
        5.0,
        "seconds an idle keep-alive connection stays open between requests",
        minimum=0.0,
        strict=True,
    )
    # A client (or a proxy's pool) that never lets go keeps one connection,
    # its memory and its place in the accept order for ever; a bound spreads
    # long-lived clients over time (and over replicas behind a balancer).
    max_requests_per_connection: int = setting(
        1000,
        "requests one keep-alive connection may carry; the answer to the last "
        "says 'Connection: close' and the server closes it (0: no limit)",
        minimum=0,
    )
    max_request_s: float = setting(
        120.0,
        "seconds a request may take from arrival to answer, queue included "
        "(then 504; its texts still waiting are dropped)",
        minimum=0.0,
        strict=True,
    )

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            check_setting(field, getattr(self, field.name))
        if self.max_texts > self.max_queue:
            raise ValueError(
                f"max_texts (--max-texts) is {self.max_texts}, more than "
                f"max_queue (--max-queue) {self.max_queue}: such a request could "
                "never be queued. Raise --max-queue or lower --max-texts."
            )

    @property
    def max_body_bytes(self) -> int:
        """The largest body a valid request can need: every text at the
        limit, each character escaped (`\\uXXXX`, 6 bytes; 12 for one outside
        the BMP, a surrogate pair), plus the rest."""
        longest = max(self.max_text_chars, self.max_document_chars)
        return self.max_texts * (12 * longest + 8) + 4096


_KINDS = {int: "an integer", float: "a number"}


def parse_list(flag: str, text: str, kind: type) -> tuple:
    """`--allowed-beam-sizes 1,4` -> (1, 4): comma-separated values of
    `kind`, sorted, without repeats; a ValueError naming the flag."""
    values = []
    for part in text.split(","):
        try:
            values.append(kind(part.strip()))
        except ValueError:
            raise ValueError(
                f"{flag} {text!r}: {part.strip()!r} is not {_KINDS[kind]} "
                "(expected comma-separated values, e.g. 1,4)."
            ) from None
    return tuple(sorted(set(values)))


@dataclasses.dataclass(frozen=True)
class AllowedSettings:
    """The search settings a request may ask for, fixed at start: every
    combination is compiled before the server says it is ready, so no
    request waits behind a compile (`--allowed-beam-sizes`, `--allowed-alphas`).
    """

    beam_sizes: tuple[int, ...]
    alphas: tuple[float, ...]
    # Sampling methods a request may draw with (`--allowed-sampling`), each
    # without seed and sample count (those compile nothing): none by default.
    sampling: tuple[SamplingSettings, ...] = ()
    # Constraints and target prefixes (`--allow-constraints`).
    constraints: bool = False

    def __post_init__(self) -> None:
        for flag, values in (
            ("--allowed-beam-sizes", self.beam_sizes),
            ("--allowed-alphas", self.alphas),
        ):
            if not values:
                raise ValueError(f"{flag} is empty: give at least one value.")
        if min(self.beam_sizes) < 1:
            raise ValueError(
                f"--allowed-beam-sizes: {min(self.beam_sizes)} is not a beam size "
                "(1 is greedy search, more is beam search)."
            )
        if min(self.alphas) < 0:
            raise ValueError(
                f"--allowed-alphas: {min(self.alphas)} is negative (the length "
                "penalty exponent is >= 0)."
            )

    @classmethod
    def around(cls, beam_size: int, alpha: float) -> AllowedSettings:
        """The default: the server's own settings and greedy search."""
        return cls(tuple(sorted({1, beam_size})), (alpha,))

    def require(self, beam_size: int, alpha: float) -> None:
        """Refuse lists without the server's own settings, which a request
        that names neither uses."""
        # A request for a beam without an alpha searches with the server's.
        beam_search = beam_size > 1 or max(self.beam_sizes) > 1
        if beam_size not in self.beam_sizes or (
            beam_search and alpha not in self.alphas
        ):
            raise ValueError(
                f"--allowed-beam-sizes {_listed(self.beam_sizes)} and "
                f"--allowed-alphas {_listed(self.alphas)} must hold the server's "
                f"own --beam-size {beam_size} and --alpha {alpha}: a request that "
                "names neither uses those."
            )

    def combinations(self) -> list[tuple[int, float]]:
        """(beam size, alpha) pairs a request may ask for. Greedy search
        has no length penalty, so it runs with one alpha, the first."""
        pairs = [(1, self.alphas[0])] if 1 in self.beam_sizes else []
        beams = [size for size in self.beam_sizes if size > 1]
        return pairs + [(size, alpha) for size in beams for alpha in self.alphas]

    def to_dict(self) -> dict:
        return {
            "beam_sizes": list(self.beam_sizes),
            "alphas": list(self.alphas),
            "sampling": [sampling_spec(s) for s in self.sampling],
            "constraints": self.constraints,
        }

    def replace(self, **changes) -> AllowedSettings:
        return dataclasses.replace(self, **changes)


def sampling_spec(sampling: SamplingSettings) -> str:
    """`top-k:10`, `top-p:0.9:0.7`: METHOD:VALUE[:TEMPERATURE]."""
    value = sampling.k if sampling.sampling == "top-k" else sampling.p
    spec = f"{sampling.sampling}:{value:g}"
    if sampling.temperature is not None:
        spec += f":{sampling.temperature:g}"
    return spec


def parse_sampling_list(text: str) -> tuple[SamplingSettings, ...]:
    """`--allowed-sampling top-k:10,top-p:0.9:0.7` -> the `SamplingSettings`
    a request may draw with (METHOD:VALUE[:TEMPERATURE] each, VALUE the k or
    the p); a ValueError naming the flag and the part at fault."""
    if not text:
        return ()
    found = []
    for part in (p.strip() for p in text.split(",")):
        fields = part.split(":")
        method = fields[0]
        if method not in ("top-k", "top-p") or len(fields) not in (2, 3):
            raise ValueError(
                f"--allowed-sampling {text!r}: {part!r} is not METHOD:VALUE"
                "[:TEMPERATURE] with METHOD top-k or top-p (e.g. top-k:10,"
                "top-p:0.9:0.7)."
            )
        try:
            value = int(fields[1]) if method == "top-k" else float(fields[1])
            temperature = float(fields[2]) if len(fields) == 3 else None
            own = {"top_k" if method == "top-k" else "top_p": value}
            found.append(
                SamplingSettings(sampling=method, temperature=temperature, **own)
            )
        except ValueError as error:
            raise ValueError(f"--allowed-sampling {part!r}: {error}") from None
    return tuple(dict.fromkeys(found))


def _listed(values: tuple) -> str:
    return ",".join(map(str, values))


@dataclasses.dataclass(frozen=True)
class ServerSettings:
    """What `serve` runs and where, who may call it, and which search
    settings a request may ask for (each compiled before the server is
    ready). The request's defaults are the search flags (`SearchSettings`)."""

    engine: str = setting(
        "keras",
        "keras (the run's model, attention plots), ctranslate2, savedmodel or "
        "onnx (an export: --export-dir, or made at start-up)",
        choices=ENGINES,
    )
    quantize: str | None = shared_setting(WeightOptions, "quantize")
    export_dir: str | None = setting(
        None,
        "ctranslate2 / savedmodel / onnx: an existing export, served alone "
        "(it holds its tokenizer: no --run-dir needed)",
        shown_default="export it to a temporary directory at start-up",
    )
    host: str = setting(
        DEFAULT_HOST,
        "address to listen on (any but this machine's needs --allow-remote)",
        shown_default=f"{DEFAULT_HOST}, this machine only",
    )
    # A port above 65535 would wrap around silently.
    port: int = setting(
        DEFAULT_PORT, "port (0: a free one, printed at start)", minimum=0, maximum=65535
    )
    allow_remote: bool = setting(
        False,
        "allow a --host reachable from other machines (no authentication, no "
        "TLS: put it behind your own proxy)",
    )
    allowed_beam_sizes: str | None = setting(
        None,
        "comma-separated beam sizes a request may ask for, each compiled before "
        "the server is ready",
        shown_default="1 and --beam-size; a SavedModel: its own",
    )
    allowed_alphas: str | None = setting(
        None,
        "comma-separated length-penalty alphas a request may ask for",
        shown_default="--alpha",
    )
    allowed_sampling: str | None = setting(
        None,
        "comma-separated sampling methods a request may draw with, "
        "METHOD:VALUE[:TEMPERATURE] each (top-k:10 draws among the 10 most "
        "probable tokens, top-p:0.9:0.7 among the top 0.9 of the mass at "
        "temperature 0.7), each compiled before the server is ready; a "
        "request's seed and num_samples are free (--engine keras)",
        shown_default="none",
    )
    allow_constraints: bool = setting(
        False,
        "requests may give constraints (target phrases the translation must "
        "contain) and target_prefix; the constrained search of each allowed "
        "beam size is compiled before the server is ready (--engine keras)",
    )
    ensemble: tuple[str, ...] = setting(
        (),
        "decode with this model or run too, as translate --ensemble does "
        "(--engine keras, with --run-dir)",
        metavar="MODEL_OR_RUN",
    )
    # Every allowed request shape compiled before ready: then no request
    # compiles, and the programs (and their memory mappings) are bounded.
    warmup_tokens: int = setting(
        0,
        "warm-up: compile the searches of sources up to this many tokens; "
        "longer ones, up to --max-text-tokens, compile on first use (logged, "
        "counted in /metrics, and refused with 503 once compiled programs "
        "near the kernel's vm.max_map_count: docs/serving-warm-up.md) (0: all of "
        "--max-text-tokens)",
        minimum=0,
    )
    source_language: str = setting(
        "en",
        "language of the source texts, for splitting documents into sentences "
        "(an ISO 639 code)",
    )
    cors_origin: tuple[str, ...] = setting(
        (),
        "an origin whose pages may call the API (e.g. https://example.org)",
        metavar="ORIGIN",
    )
    api_key_file: str | None = setting(
        None,
        "a file holding a key: every request but /healthz, /readyz and the "
        "demo page's files then needs 'Authorization: Bearer KEY'; the page "
        "asks for the key",
        shown_default="no key",
    )
    log_probes: bool = setting(
        False,
        "log every /healthz and /readyz answer too (by default only those "
        "that are not 200: probes come every few seconds; all are counted "
        "in /metrics)",
    )
    log_format: str = setting(
        "text",
        "the per-request log lines on stderr: key=value text or one JSON object "
        "per line",
        choices=("text", "json"),
    )

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            check_setting(field, getattr(self, field.name))
        # Lists from the command line: the fields hold them as tuples.
        object.__setattr__(self, "ensemble", tuple(self.ensemble))
        object.__setattr__(self, "cors_origin", tuple(self.cors_origin))

    def allowed(self, settings: SearchSettings) -> AllowedSettings | None:
        """The search settings a request may ask for: the lists given,
        around the server's own `settings`; None: the engine's default."""
        allowed = None
        default = AllowedSettings.around(settings.beam_size, settings.alpha)
        beams, alphas = self.allowed_beam_sizes, self.allowed_alphas
        if beams or alphas:
            allowed = AllowedSettings(
                parse_list("--allowed-beam-sizes", beams, int)
                if beams
                else default.beam_sizes,
                parse_list("--allowed-alphas", alphas, float)
                if alphas
                else default.alphas,
            )
            allowed.require(settings.beam_size, settings.alpha)
        if self.allowed_sampling or self.allow_constraints:
            allowed = (allowed or default).replace(
                sampling=parse_sampling_list(self.allowed_sampling or ""),
                constraints=self.allow_constraints,
            )
        return allowed
