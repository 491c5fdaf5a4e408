"""Model configuration: one frozen dataclass and the paper's named presets.

`TransformerConfig` holds every hyperparameter of the architecture (and the few
optimisation constants the paper ties to it: label smoothing, warmup). It is
passed whole to `build_transformer`, written as JSON next to every model
artifact, and read back with `TransformerConfig.from_json`.

Presets (Vaswani et al. 2017, Table 3):

| preset | N | d_model | d_ff | h | d_k = d_v | P_drop | eps_ls |
| ------ | - | ------- | ---- | - | --------- | ------ | ------ |
| base   | 6 | 512     | 2048 | 8 | 64        | 0.1    | 0.1    |
| big    | 6 | 1024    | 4096 | 16| 64        | 0.3    | 0.1    |
| small  | 3 | 256     | 1024 | 4 | 64        | 0.1    | 0.1    |
| tiny   | 2 | 64      | 256  | 4 | 16        | 0.1    | 0.1    |

`small` and `tiny` are not in the paper: they keep its structure at sizes
that train in minutes on a CPU (Multi30k; the built-in corpus; tests).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from typing import Any

# Reserved token ids, fixed everywhere: masks, loss, tokenizers, decoding.
PAD_ID, UNK_ID, BOS_ID, EOS_ID = 0, 1, 2, 3

POSITION_ENCODINGS = ("sinusoidal", "learned")
# The feed-forward's activation: the paper's ReLU, or what imported MarianMT
# checkpoints use (OPUS-MT: swish, i.e. SiLU; GELU: the exact, erf form).
ACTIVATIONS = ("relu", "swish", "gelu")


@dataclasses.dataclass(frozen=True)
class TransformerConfig:
    """Hyperparameters of the encoder-decoder Transformer.

    Field names follow the paper's symbols where they are terms of art
    (`d_model`, `d_ff`); everything else is spelled out.
    """

    vocab_size: int = 37000  # Source vocabulary; also the target one if shared.
    target_vocab_size: int | None = None  # None: same as vocab_size.
    share_embeddings: bool = True  # One matrix for source and target (§3.4).
    tie_output_projection: bool = True  # Target embedding = pre-softmax (§3.4).
    num_encoder_layers: int = 6  # N
    num_decoder_layers: int = 6  # N
    d_model: int = 512
    d_ff: int = 2048
    num_heads: int = 8  # h; d_v = d_model / h.
    # d_k, each head's query/key size (Table 3 row (B)); None: d_model / h.
    key_dim: int | None = None
    dropout_rate: float = 0.1  # P_drop: sub-layer outputs, embedding sums.
    attention_dropout_rate: float = 0.0  # On attention weights; 0 in paper.
    relu_dropout_rate: float = 0.0  # Inside the FFN; 0 in the paper.
    label_smoothing: float = 0.1  # eps_ls (§5.4).
    warmup_steps: int = 4000  # §5.3.
    position_encoding: str = "sinusoidal"  # or "learned" (Table 3 row E).
    max_position: int = 1024  # Learned positions only; sinusoids are unbounded.
    norm_first: bool = False  # False: post-norm as in the paper.
    # Restricted self-attention (§4, Table 1): each query attends to a
    # neighbourhood of r positions (encoder: centred; decoder: the r ending
    # at the query). None: unrestricted. Before 0.2.0 this was a half-width.
    attention_window: int | None = None
    layer_norm_epsilon: float = 1e-6
    activation: str = "relu"  # One of ACTIVATIONS; the paper's is ReLU.
    # A learned bias added to the logits (MarianMT's final_logits_bias);
    # the paper's tied projection has none.
    output_bias: bool = False
    # The parsing decoder's word pointer (`layers.WordPointer`): the target
    # ids of the phrase brackets, every other non-reserved id being a tag
    # that moves it to the next word. None: no pointer (the paper's model).
    pointer_bracket_ids: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        if isinstance(self.pointer_bracket_ids, list):  # As JSON reads it.
            object.__setattr__(
                self, "pointer_bracket_ids", tuple(self.pointer_bracket_ids)
            )
        _validate(self)

    @property
    def output_vocab_size(self) -> int:
        """Size of the target vocabulary (the logits' last axis)."""
        return self.target_vocab_size or self.vocab_size

    @property
    def head_dim(self) -> int:
        """d_v = d_model / h (also d_k unless `key_dim` is set)."""
        return self.d_model // self.num_heads

    @property
    def query_key_dim(self) -> int:
        """d_k: `key_dim`, or d_model / h when it is None."""
        return self.key_dim or self.head_dim

    @classmethod
    def preset(cls, name: str, **overrides: Any) -> TransformerConfig:
        """Return the named preset (`tiny`, `small`, `base`, `big`, `parsing`)
        with overrides.

        Examples:
            >>> TransformerConfig.preset("base", vocab_size=37000).d_model
            512
        """
        if name not in PRESETS:
            raise ValueError(
                f"Unknown preset. Expected one of {sorted(PRESETS)}. "
                f"Received: name={name!r}"
            )
        return PRESETS[name].replace(**overrides)

    def replace(self, **overrides: Any) -> TransformerConfig:
        """Return a copy with some fields changed; unknown keys are errors."""
        _check_keys(overrides)
        return dataclasses.replace(self, **overrides)

    def to_dict(self) -> dict[str, Any]:
        """The fields as JSON holds them (a tuple as a list)."""
        values = dataclasses.asdict(self)
        if self.pointer_bracket_ids is not None:
            values["pointer_bracket_ids"] = list(self.pointer_bracket_ids)
        return values

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> TransformerConfig:
        _check_keys(values)
        return cls(**values)

    def to_json(self, path: str | os.PathLike) -> None:
        """Write the config as JSON (the file that sits next to a model)."""
        with open(path, "w", encoding="utf-8") as f:
            json.dump(self.to_dict(), f, indent=2, sort_keys=True)
            f.write("\n")

    @classmethod
    def from_json(cls, path: str | os.PathLike) -> TransformerConfig:
        with open(path, encoding="utf-8") as f:
            try:
                values = json.load(f)
            except json.JSONDecodeError as error:
                raise ValueError(
                    f"{path}: line {error.lineno}: not valid JSON ({error.msg})"
                ) from None
        if not isinstance(values, dict):
            raise ValueError(f"{path}: expected a JSON object of config fields.")
        return cls.from_dict(values)


def field_names() -> list[str]:
    return [field.name for field in dataclasses.fields(TransformerConfig)]


def _check_keys(values: dict[str, Any]) -> None:
    unknown = sorted(set(values) - set(field_names()))
    if unknown:
        raise ValueError(
            f"Unknown TransformerConfig field(s) {unknown}. "
            f"Valid fields: {', '.join(field_names())}."
        )


def _fail(name: str, value: Any, expected: str) -> None:
    raise ValueError(
        f"Invalid TransformerConfig.{name}: expected {expected}. "
        f"Received: {name}={value!r}"
    )


def _check_type(config: TransformerConfig, name: str, kinds: tuple) -> None:
    value = getattr(config, name)
    # bool is an int subclass; a True where a count belongs is a mistake.
    if isinstance(value, bool) and bool not in kinds:
        _fail(name, value, " or ".join(k.__name__ for k in kinds))
    if not isinstance(value, kinds):
        _fail(name, value, " or ".join(k.__name__ for k in kinds))


def _check_finite(config: TransformerConfig, name: str) -> None:
    # NaN passes every comparison-based range check, so it is named first.
    _check_type(config, name, (int, float))
    if not math.isfinite(getattr(config, name)):
        _fail(name, getattr(config, name), "a finite number")


def _validate(config: TransformerConfig) -> None:
    positive_ints = [
        "vocab_size",
        "num_encoder_layers",
        "num_decoder_layers",
        "d_model",
        "d_ff",
        "num_heads",
        "max_position",
    ]
    for name in positive_ints:
        _check_type(config, name, (int,))
        if getattr(config, name) < 1:
            _fail(name, getattr(config, name), "an integer >= 1")
    for name in ("warmup_steps",):
        _check_type(config, name, (int,))
        if config.warmup_steps < 1:
            _fail(name, config.warmup_steps, "an integer >= 1")
    for name in ("target_vocab_size", "attention_window", "key_dim"):
        value = getattr(config, name)
        if value is not None:
            _check_type(config, name, (int,))
            if value < 1:
                _fail(name, value, "None or an integer >= 1")
    rates = [
        "dropout_rate",
        "attention_dropout_rate",
        "relu_dropout_rate",
        "label_smoothing",
    ]
    for field in dataclasses.fields(config):
        if field.type == "float":
            _check_finite(config, field.name)
    for name in rates:
        if not 0.0 <= getattr(config, name) < 1.0:
            _fail(name, getattr(config, name), "a number in [0, 1)")
    if config.layer_norm_epsilon <= 0:
        _fail("layer_norm_epsilon", config.layer_norm_epsilon, "a number > 0")
    for name in (
        "share_embeddings",
        "tie_output_projection",
        "norm_first",
        "output_bias",
    ):
        _check_type(config, name, (bool,))
    _check_pointer(config)
    if config.position_encoding not in POSITION_ENCODINGS:
        _fail(
            "position_encoding",
            config.position_encoding,
            f"one of {POSITION_ENCODINGS}",
        )
    if config.activation not in ACTIVATIONS:
        _fail("activation", config.activation, f"one of {ACTIVATIONS}")
    if config.d_model % config.num_heads:
        _fail(
            "d_model",
            config.d_model,
            f"a multiple of num_heads={config.num_heads} (d_k = d_model / h)",
        )
    if config.share_embeddings and config.output_vocab_size != config.vocab_size:
        _fail(
            "target_vocab_size",
            config.target_vocab_size,
            f"None or equal to vocab_size={config.vocab_size} when "
            "share_embeddings=True",
        )


def _check_pointer(config: TransformerConfig) -> None:
    ids = config.pointer_bracket_ids
    if ids is None:
        return
    expected = f"None or a tuple of target ids in [4, {config.output_vocab_size})"
    if not isinstance(ids, tuple) or not ids:
        _fail("pointer_bracket_ids", ids, expected)
    for token_id in ids:
        if isinstance(token_id, bool) or not isinstance(token_id, int):
            _fail("pointer_bracket_ids", ids, expected)
        if not EOS_ID < token_id < config.output_vocab_size:
            _fail("pointer_bracket_ids", ids, expected)


_BASE = TransformerConfig()

PRESETS: dict[str, TransformerConfig] = {
    "base": _BASE,
    "big": dataclasses.replace(
        _BASE, d_model=1024, d_ff=4096, num_heads=16, dropout_rate=0.3
    ),
    # Multi30k-sized data or a CPU budget of minutes (the keras-hub
    # comparison sizes of shared/docs/measured-peers.md).
    "small": dataclasses.replace(
        _BASE,
        vocab_size=8000,
        num_encoder_layers=3,
        num_decoder_layers=3,
        d_model=256,
        d_ff=1024,
        num_heads=4,
        warmup_steps=400,
    ),
    # Table 4 (§6.3): constituency parsing, WSJ only. The paper gives 4
    # layers and d_model 1024 and tuned dropout on section 22 without
    # printing it; heads and d_ff are those of the paper's other 1024-wide
    # model ("big"), dropout 0.2 on sub-layers and attention weights is
    # tensor2tensor's transformer_parsing_base (its WSJ-only recipe).
    "parsing": dataclasses.replace(
        _BASE,
        num_encoder_layers=4,
        num_decoder_layers=4,
        d_model=1024,
        d_ff=4096,
        num_heads=16,
        dropout_rate=0.2,
        attention_dropout_rate=0.2,
    ),
    # Small enough for CI and laptops; same structure as the paper's model.
    "tiny": dataclasses.replace(
        _BASE,
        vocab_size=1000,
        num_encoder_layers=2,
        num_decoder_layers=2,
        d_model=64,
        d_ff=256,
        num_heads=4,
        warmup_steps=200,
    ),
}
