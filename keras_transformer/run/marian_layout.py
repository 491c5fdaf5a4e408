"""Our `Transformer`'s weights as MarianMT's tensors and back (NumPy only).

MarianMT (`transformers`' `MarianMTModel`, the OPUS-MT family) is the
paper's model with three differences of layout, none of substance:

- its sinusoidal table puts every sine in the first half of the model
  dimension and every cosine in the second; the paper's formula (ours)
  interleaves them. Permuting the model dimension the same way in every
  weight that reads or writes it (embeddings, projections' inputs and
  outputs, layer norms) is an exact equivalence: layer norms average over
  all dimensions, and the tied output projection contracts over them;
- its linear weights are (out, in), Keras kernels (in, out);
- its ids: Marian starts the decoder with a `decoder_start_token_id` (the
  pad id in OPUS-MT) where we start with BOS, and numbers its pieces in
  its own order. `MarianIds` maps our ids to Marian's.

`to_marian` and `from_marian` are inverse: a model that goes out and comes
back has the same weights, bit for bit (a permutation and transposes only).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from keras_transformer.config import BOS_ID, EOS_ID, PAD_ID, UNK_ID, TransformerConfig

# config.json's entry holding our config, read back for what Marian lacks.
KERAS_TRANSFORMER_FIELD = "keras_transformer_config"
# config.json's entry saying whether sources end in </s> (Marian's do; ours
# do not), read back by an import so the model gets what it was trained on.
SOURCE_EOS_FIELD = "keras_transformer_source_eos"
# Those fields: not part of Marian's architecture, but of ours.
_KEPT_FIELDS = ("max_position", "label_smoothing", "warmup_steps", "layer_norm_epsilon")

# Our sub-layer names -> Marian's, inside a block.
_ATTENTIONS = {"self_attention": "self_attn", "cross_attention": "encoder_attn"}
_PROJECTIONS = {
    "query_dense": "q_proj",
    "key_dense": "k_proj",
    "value_dense": "v_proj",
    "output_dense": "out_proj",
}
_NORMS = {
    "self_attention_norm": "self_attn_layer_norm",
    "cross_attention_norm": "encoder_attn_layer_norm",
    "feed_forward_norm": "final_layer_norm",
}
# Marian's names for the same functions (transformers' ACT2FN).
_FROM_MARIAN_ACTIVATIONS = {
    "relu": "relu",
    "swish": "swish",
    "silu": "swish",
    "gelu": "gelu",
}


def model_dim_order(d_model: int) -> np.ndarray:
    """Marian's position j holds our dimension order[j]: our even (sine)
    dimensions first, then the odd (cosine) ones."""
    return np.concatenate([np.arange(0, d_model, 2), np.arange(1, d_model, 2)])


def marian_position_table(rows: int, d_model: int) -> np.ndarray:
    """Marian's sinusoid (sines, then cosines), (rows, d_model) float32."""
    positions = np.arange(rows, dtype=np.float64)[:, None]
    rates = 10000.0 ** (-2.0 * np.arange(d_model // 2) / d_model)
    angles = positions * rates[None, :]
    return np.concatenate([np.sin(angles), np.cos(angles)], 1).astype(np.float32)


@dataclasses.dataclass(frozen=True)
class MarianIds:
    """How our ids map to a Marian vocabulary.

    `marian_ids[i]` is the Marian id of our id i; our BOS is Marian's
    decoder start (a copy of its row: ours has one more row than Marian's
    vocabulary when it was imported). `pad`, `eos`, `unk` and
    `decoder_start` are the Marian ids of those roles."""

    marian_ids: tuple[int, ...]
    pad: int
    eos: int
    unk: int
    decoder_start: int

    @classmethod
    def identity(cls, vocab_size: int) -> MarianIds:
        """Our own vocabulary exported as it is: our ids are Marian's, and
        the decoder starts with our BOS."""
        return cls(tuple(range(vocab_size)), PAD_ID, EOS_ID, UNK_ID, BOS_ID)

    @classmethod
    def renumbered(
        cls, vocab_size: int, pad: int, eos: int, unk: int, decoder_start: int
    ) -> MarianIds:
        """An imported vocabulary: PAD, UNK, BOS and EOS first, then every
        other Marian id in order. BOS is the decoder start: its own row, or
        a copy of the pad row where the decoder starts with pad (OPUS-MT)."""
        first = (pad, unk, decoder_start, eos)
        rest = [i for i in range(vocab_size) if i not in first]
        return cls(first + tuple(rest), pad, eos, unk, decoder_start)

    @classmethod
    def of_tokenizer(cls, tokenizer) -> MarianIds:
        """The map of a tokenizer: an imported one's own, else identity."""
        marian_ids = getattr(tokenizer, "marian_ids", None)
        if marian_ids is None:
            return cls.identity(tokenizer.vocab_size)
        pad, unk, start, eos = marian_ids[:4]
        return cls(tuple(marian_ids), pad, eos, unk, start)

    @property
    def marian_vocab_size(self) -> int:
        return len(self.kept_rows())

    def kept_rows(self) -> list[int]:
        """The row of ours each Marian id takes, in Marian's order: our own
        id's, but where BOS was added (as a copy of the pad row, the decoder
        start) Marian's one pad row takes our BOS row.

        That row is both the decoder start and the pad: the decoder reads it
        first, while as the pad it is masked as an input and never predicted
        (both searches suppress it). Our BOS and PAD rows start equal (the
        import copies it) and part when a fine-tune trains them."""
        added_bos = len(set(self.marian_ids)) < len(self.marian_ids)
        rows = [i for i in range(len(self.marian_ids)) if i != BOS_ID or not added_bos]
        rows = sorted(rows, key=lambda i: self.marian_ids[i])
        return [BOS_ID if added_bos and i == PAD_ID else i for i in rows]

    def to_marian_rows(self, table: np.ndarray) -> np.ndarray:
        return table[self.kept_rows()]

    def from_marian_rows(self, table: np.ndarray) -> np.ndarray:
        return table[list(self.marian_ids)]


def _block_weights(prefix: str, block):
    """(our variable, Marian's tensor name, layout) of one block's weights.

    The layout says how the weight meets the model dimension: a kernel that
    reads it ("reads", permuted rows), one that writes it ("writes",
    permuted columns), a vector over it ("along"), or neither ("apart")."""
    for ours, theirs in _ATTENTIONS.items():
        attention = getattr(block, ours, None)
        if attention is None:  # An encoder block has no cross-attention.
            continue
        for role, name in _PROJECTIONS.items():
            dense, writes = getattr(attention, role), role == "output_dense"
            kernel_layout, bias_layout = (
                ("writes", "along") if writes else ("reads", "apart")
            )
            yield dense.kernel, f"{prefix}.{theirs}.{name}.weight", kernel_layout
            yield dense.bias, f"{prefix}.{theirs}.{name}.bias", bias_layout
    feed_forward = block.feed_forward
    yield feed_forward.intermediate_dense.kernel, f"{prefix}.fc1.weight", "reads"
    yield feed_forward.intermediate_dense.bias, f"{prefix}.fc1.bias", "apart"
    yield feed_forward.output_dense.kernel, f"{prefix}.fc2.weight", "writes"
    yield feed_forward.output_dense.bias, f"{prefix}.fc2.bias", "along"
    for ours, theirs in _NORMS.items():
        norm = getattr(block, ours, None)
        if norm is not None:
            yield norm.gamma, f"{prefix}.{theirs}.weight", "along"
            yield norm.beta, f"{prefix}.{theirs}.bias", "along"


def _model_weights(model):
    """`_block_weights` of every encoder and decoder block of `model`."""
    stacks = (("encoder", model.encoder_blocks), ("decoder", model.decoder_blocks))
    for stack, blocks in stacks:
        for index, block in enumerate(blocks):
            yield from _block_weights(f"model.{stack}.layers.{index}", block)


def _to_marian_layout(value: np.ndarray, layout: str, order) -> np.ndarray:
    """Keras (in, out) kernels -> Marian's (out, in); the model dimension
    in Marian's order."""
    if layout == "reads":
        return np.ascontiguousarray(value[order].T)
    if layout == "writes":
        return np.ascontiguousarray(value[:, order].T)
    return value[order] if layout == "along" else value


def _from_marian_layout(value: np.ndarray, layout: str, inverse) -> np.ndarray:
    """The inverse of `_to_marian_layout` (`inverse`: the inverse order)."""
    if layout == "reads":
        return value.T[inverse]
    if layout == "writes":
        return value.T[:, inverse]
    return value[inverse] if layout == "along" else value


def check_exportable(config: TransformerConfig) -> None:
    """Refuse, naming the field, what MarianMT cannot represent."""
    problems = []
    if config.position_encoding != "sinusoidal":
        problems.append(
            f"position_encoding={config.position_encoding!r} (Marian's are sinusoidal)"
        )
    if config.norm_first:
        problems.append("norm_first=True (Marian is post-norm)")
    if config.attention_window is not None:
        problems.append(
            f"attention_window={config.attention_window} (no local attention)"
        )
    if config.key_dim not in (None, config.head_dim):
        problems.append(f"key_dim={config.key_dim} (Marian's is d_model / num_heads)")
    if not config.share_embeddings:
        problems.append("share_embeddings=False (one joint vocabulary is exported)")
    if config.d_model % 2:
        problems.append(f"d_model={config.d_model} is odd (sines and cosines pair)")
    if problems:
        raise ValueError(
            "This model cannot be written as a MarianMT checkpoint: "
            + "; ".join(problems)
        )


def to_marian(
    model, ids: MarianIds, max_positions: int, source_eos: bool
) -> tuple[dict, dict]:
    """(config.json fields, {tensor name: float32 array}) of `model`, whose
    sources end in `</s>` if `source_eos`.

    Raises:
        ValueError: for a model MarianMT cannot represent (the field named).
    """
    from keras import ops

    config = model.config
    check_exportable(config)

    def values(variable) -> np.ndarray:
        return np.asarray(ops.convert_to_numpy(variable), np.float32)

    order = model_dim_order(config.d_model)
    parts = model._parts
    embeddings = ids.to_marian_rows(values(parts.source_embedding.embeddings))[:, order]
    positions = marian_position_table(max_positions, config.d_model)
    tensors = {
        "model.shared.weight": np.ascontiguousarray(embeddings),
        "model.encoder.embed_positions.weight": positions,
        "model.decoder.embed_positions.weight": positions.copy(),
    }
    for variable, name, layout in _model_weights(model):
        tensors[name] = _to_marian_layout(values(variable), layout, order)
    bias = np.zeros(ids.marian_vocab_size, np.float32)
    if parts.output_projection is not None:
        tensors["lm_head.weight"] = ids.to_marian_rows(
            np.ascontiguousarray(values(parts.output_projection.kernel).T)
        )[:, order]
        bias = ids.to_marian_rows(values(parts.output_projection.bias))
    if parts.output_bias is not None:
        bias = bias + ids.to_marian_rows(values(parts.output_bias.bias))
    tensors["final_logits_bias"] = bias[None, :]
    fields = _marian_config(config, ids, max_positions)
    fields[SOURCE_EOS_FIELD] = source_eos
    return fields, tensors


def _marian_config(
    config: TransformerConfig, ids: MarianIds, max_positions: int
) -> dict:
    return {
        "architectures": ["MarianMTModel"],
        "model_type": "marian",
        "vocab_size": ids.marian_vocab_size,
        "decoder_vocab_size": ids.marian_vocab_size,
        "d_model": config.d_model,
        "encoder_layers": config.num_encoder_layers,
        "decoder_layers": config.num_decoder_layers,
        "encoder_attention_heads": config.num_heads,
        "decoder_attention_heads": config.num_heads,
        "encoder_ffn_dim": config.d_ff,
        "decoder_ffn_dim": config.d_ff,
        "activation_function": config.activation,  # Marian spells ours alike.
        "dropout": config.dropout_rate,
        "attention_dropout": config.attention_dropout_rate,
        "activation_dropout": config.relu_dropout_rate,
        "scale_embedding": True,
        "static_position_embeddings": True,
        "share_encoder_decoder_embeddings": True,
        "tie_word_embeddings": config.tie_output_projection,
        "max_position_embeddings": max_positions,
        "pad_token_id": ids.pad,
        "eos_token_id": ids.eos,
        "decoder_start_token_id": ids.decoder_start,
        "forced_eos_token_id": None,
        "is_encoder_decoder": True,
        # Ours whole, for an import back (transformers keeps and ignores it;
        # its layer norms use 1e-5 whatever layer_norm_epsilon says).
        KERAS_TRANSFORMER_FIELD: config.to_dict(),
    }


def config_from_marian(
    fields: dict, vocab_size: int, output_bias: bool, where: str
) -> TransformerConfig:
    """Our config for a MarianMT `config.json`'s fields (`vocab_size`: ours,
    with a BOS row if one is added; `output_bias`: whether the checkpoint's
    `final_logits_bias` is not all zero). A field we cannot represent is
    refused by name."""
    problems = []

    def need(name, expected, default=None):
        value = fields.get(name, default)
        if value != expected:
            problems.append(f"{name}={value!r} (expected {expected!r})")

    need("model_type", "marian")
    need("scale_embedding", True, False)
    need("static_position_embeddings", True, True)
    need("share_encoder_decoder_embeddings", True, True)
    need("normalize_before", False, False)
    need("add_final_layer_norm", False, False)
    need("decoder_attention_heads", fields.get("encoder_attention_heads"))
    need("decoder_ffn_dim", fields.get("encoder_ffn_dim"))
    need("decoder_vocab_size", fields.get("vocab_size"), fields.get("vocab_size"))
    activation = fields.get("activation_function", "gelu")
    if activation not in _FROM_MARIAN_ACTIVATIONS:
        problems.append(
            f"activation_function={activation!r} (expected one of "
            f"{sorted(_FROM_MARIAN_ACTIVATIONS)})"
        )
    if problems:
        raise ValueError(
            f"{where}: this MarianMT checkpoint has what this package cannot "
            "represent: " + "; ".join(problems)
        )
    ours = fields.get(KERAS_TRANSFORMER_FIELD)
    kept = (
        {k: ours[k] for k in _KEPT_FIELDS if k in ours}
        if isinstance(ours, dict)
        else {}
    )
    values = dict(
        vocab_size=vocab_size,
        num_encoder_layers=int(fields["encoder_layers"]),
        num_decoder_layers=int(fields["decoder_layers"]),
        d_model=int(fields["d_model"]),
        d_ff=int(fields["encoder_ffn_dim"]),
        num_heads=int(fields["encoder_attention_heads"]),
        dropout_rate=float(fields.get("dropout", 0.1)),
        attention_dropout_rate=float(fields.get("attention_dropout", 0.0)),
        relu_dropout_rate=float(fields.get("activation_dropout", 0.0)),
        tie_output_projection=bool(fields.get("tie_word_embeddings", True)),
        activation=_FROM_MARIAN_ACTIVATIONS[activation],
        output_bias=output_bias,
        # PyTorch's LayerNorm default, which Marian's layers use.
        layer_norm_epsilon=1e-5,
    )
    return TransformerConfig(**{**values, **kept})


def from_marian(model, tensors: dict, ids: MarianIds, where: str) -> None:
    """Assign Marian's `tensors` to `model` (built with `config_from_marian`).

    Raises:
        ValueError: a tensor missing or of another shape (named); stored
            positions are checked when the checkpoint is read
            (`check_positions`).
    """
    config = model.config
    order = model_dim_order(config.d_model)
    inverse = np.argsort(order)

    def take(name: str) -> np.ndarray:
        if name not in tensors:
            raise ValueError(f"{where}: the tensor {name} is missing.")
        return np.asarray(tensors[name], np.float32)

    parts = model._parts
    shared = take("model.shared.weight")
    _assign(
        parts.source_embedding.embeddings,
        ids.from_marian_rows(shared)[:, inverse],
        "model.shared.weight",
        where,
    )
    for variable, name, layout in _model_weights(model):
        value = _from_marian_layout(take(name), layout, inverse)
        _assign(variable, value, name, where)
    if parts.output_projection is not None:
        head = take("lm_head.weight")
        kernel = ids.from_marian_rows(head)[:, inverse].T
        _assign(parts.output_projection.kernel, kernel, "lm_head.weight", where)
        parts.output_projection.bias.assign(
            np.zeros(config.output_vocab_size, np.float32)
        )
    if parts.output_bias is not None:
        bias = take("final_logits_bias").reshape(-1)
        _assign(
            parts.output_bias.bias,
            ids.from_marian_rows(bias),
            "final_logits_bias",
            where,
        )


def check_positions(tensors: dict, d_model: int, where: str) -> None:
    """Refuse stored position tables that are not Marian's sinusoid."""
    for stack in ("encoder", "decoder"):
        name = f"model.{stack}.embed_positions.weight"
        if name not in tensors:  # Computed, not stored, by some writers.
            continue
        table = np.asarray(tensors[name], np.float32)
        expected = marian_position_table(table.shape[0], d_model)
        if table.shape != expected.shape or not np.allclose(table, expected, atol=1e-4):
            raise ValueError(
                f"{where}: {name} is not Marian's sinusoidal table; this package "
                "cannot represent other positions in a MarianMT checkpoint."
            )


def _assign(variable, value: np.ndarray, name: str, where: str) -> None:
    if tuple(variable.shape) != value.shape:
        raise ValueError(
            f"{where}: {name} has shape {value.shape} after conversion; the "
            f"model built from config.json expects {tuple(variable.shape)}."
        )
    variable.assign(value.astype(np.float32))
