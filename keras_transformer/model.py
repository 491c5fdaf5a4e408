"""The encoder-decoder Transformer as one functional `keras.Model`.

`build_transformer(config)` returns a `Transformer`: a functional model with
two named int32 inputs, `source_ids` (B, S) and `target_ids` (B, T) (the
shifted decoder input), pad id 0, and float32 logits (B, T, V). The encoder
and decoder halves are also callable on their own (`encode`, `decode`), and
`decode_step` runs the decoder incrementally against key/value caches.

Legend: B batch, S source length, T target length, D d_model, V vocabulary.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import keras
import numpy as np
from keras import ops

from keras_transformer.config import TransformerConfig
from keras_transformer.layers import (
    DecoderBlock,
    EncoderBlock,
    LearnedPositionalEmbedding,
    LogitsBias,
    ScaledEmbedding,
    SinusoidalPositionalEncoding,
    WordPointer,
    masks,
    sinusoidal_table,
)
from keras_transformer.losses import with_token_loss
from keras_transformer.utils.version import __version__


def _make_layers(config: TransformerConfig) -> SimpleNamespace:
    """Create (unconnected) every layer of the model."""
    if config.share_embeddings:
        source_embedding = ScaledEmbedding(
            config.vocab_size, config.d_model, name="shared_embedding"
        )
        target_embedding = source_embedding
    else:
        source_embedding = ScaledEmbedding(
            config.vocab_size, config.d_model, name="source_embedding"
        )
        target_embedding = ScaledEmbedding(
            config.output_vocab_size, config.d_model, name="target_embedding"
        )
    if config.tie_output_projection:
        output_projection = None  # logits = target_embedding(h, reverse=True)
    else:
        # float32 so the logits (and the loss) stay float32 under mixed
        # precision, as the tied path does.
        output_projection = keras.layers.Dense(
            config.output_vocab_size, dtype="float32", name="output_projection"
        )
    block_args = dict(
        num_heads=config.num_heads,
        key_dim=config.key_dim,
        intermediate_dim=config.d_ff,
        dropout_rate=config.dropout_rate,
        attention_dropout_rate=config.attention_dropout_rate,
        relu_dropout_rate=config.relu_dropout_rate,
        norm_first=config.norm_first,
        layer_norm_epsilon=config.layer_norm_epsilon,
        activation=config.activation,
    )
    return SimpleNamespace(
        config=config,
        source_embedding=source_embedding,
        target_embedding=target_embedding,
        output_projection=output_projection,
        output_bias=LogitsBias(name="output_bias") if config.output_bias else None,
        word_pointer=_word_pointer(config),
        source_position=_position_layer(config, "source_position"),
        target_position=_position_layer(config, "target_position"),
        # §5.4: dropout on the sums of embeddings and positional encodings.
        source_dropout=keras.layers.Dropout(
            config.dropout_rate, name="source_embedding_dropout"
        ),
        target_dropout=keras.layers.Dropout(
            config.dropout_rate, name="target_embedding_dropout"
        ),
        encoder_blocks=[
            EncoderBlock(**block_args, name=f"encoder_block_{i}")
            for i in range(config.num_encoder_layers)
        ],
        decoder_blocks=[
            DecoderBlock(**block_args, name=f"decoder_block_{i}")
            for i in range(config.num_decoder_layers)
        ],
        # Pre-norm stacks end un-normalised; post-norm blocks end in a norm.
        encoder_norm=_final_norm(config, "encoder_norm"),
        decoder_norm=_final_norm(config, "decoder_norm"),
    )


def _word_pointer(config: TransformerConfig) -> WordPointer | None:
    if config.pointer_bracket_ids is None:
        return None
    return WordPointer(config.pointer_bracket_ids, config.d_model, name="word_pointer")


def _position_layer(config: TransformerConfig, name: str):
    if config.position_encoding == "learned":
        return LearnedPositionalEmbedding(config.max_position, name=name)
    return SinusoidalPositionalEncoding(name=name)


def _final_norm(config: TransformerConfig, name: str):
    if not config.norm_first:
        return None
    return keras.layers.LayerNormalization(epsilon=config.layer_norm_epsilon, name=name)


def _encode(layers: SimpleNamespace, source_ids, training=None, weights=None):
    """(B, S) ids -> (B, S, D) encoder output.

    With a `weights` dict, each block's (B, H, S, S) self-attention weights
    are appended to weights["encoder_self_attention"] (inspection only).
    """
    config = layers.config
    x = layers.source_embedding(source_ids)
    x = layers.source_position(x)
    x = layers.source_dropout(x, training=training)
    mask = masks.self_attention_mask(source_ids, window=config.attention_window)
    for block in layers.encoder_blocks:
        if weights is None:
            x = block(x, mask, training=training)
        else:
            x, layer_weights = block(x, mask, return_attention_weights=True)
            weights.setdefault("encoder_self_attention", []).append(layer_weights)
    if layers.encoder_norm is not None:
        x = layers.encoder_norm(x)
    return x


def _decode(
    layers: SimpleNamespace, target_ids, memory, source_ids, training=None, weights=None
):
    """(B, T) ids and (B, S, D) encoder output -> (B, T, V) float32 logits.

    With a `weights` dict, each block's self- and cross-attention weights are
    appended to weights["decoder_self_attention"] / ["cross_attention"].
    """
    config = layers.config
    y = layers.target_embedding(target_ids)
    y = layers.target_position(y)
    if layers.word_pointer is not None:
        index = layers.word_pointer.word_index(target_ids)
        y = y + layers.word_pointer(memory, source_ids, index)
    y = layers.target_dropout(y, training=training)
    self_mask = masks.self_attention_mask(
        target_ids, causal=True, window=config.attention_window
    )
    cross_mask = masks.cross_attention_mask(source_ids, target_ids)
    for block in layers.decoder_blocks:
        if weights is None:
            y = block(y, memory, self_mask, cross_mask, training=training)
            continue
        y, layer_weights = block(
            y, memory, self_mask, cross_mask, return_attention_weights=True
        )
        weights.setdefault("decoder_self_attention", []).append(
            layer_weights["self_attention"]
        )
        weights.setdefault("cross_attention", []).append(
            layer_weights["cross_attention"]
        )
    return _logits(layers, y)


def _logits(layers: SimpleNamespace, hidden):
    if layers.decoder_norm is not None:
        hidden = layers.decoder_norm(hidden)
    if layers.output_projection is None:
        logits = layers.target_embedding(hidden, reverse=True)
    else:
        logits = layers.output_projection(hidden)
    if layers.output_bias is not None:
        logits = layers.output_bias(logits)
    return logits


class TokenLossLogs:
    """A Keras model's logs with `loss` per token when it can be
    (`losses.with_token_loss`): the model and `TransformerSeq2SeqLM` both
    train with the label-smoothed loss summed over tokens."""

    def get_metrics_result(self) -> dict[str, Any]:
        return with_token_loss(super().get_metrics_result())


def takes_int8(layer: keras.layers.Layer) -> bool:
    """Whether `layer` of a `Transformer` gets int8 weights under
    `--quantize int8` (`decoding.quantization`): every projection (`Dense`)
    and the shared embedding, which is the output projection too; learned
    positions, norms and biases stay float32."""
    return isinstance(layer, (keras.layers.Dense, ScaledEmbedding))


@keras.saving.register_keras_serializable(package="keras_transformer")
class Transformer(TokenLossLogs, keras.Model):
    """Encoder-decoder Transformer of Vaswani et al. 2017 (Figure 1).

    A functional model (inputs `source_ids`, `target_ids`; output logits)
    whose only constructor argument is a `TransformerConfig`, so it saves to
    and loads from `.keras` files by config. Use `build_transformer`.
    """

    def __init__(self, config: TransformerConfig | dict[str, Any], **kwargs):
        if isinstance(config, dict):
            config = TransformerConfig.from_dict(config)
        layers = _make_layers(config)
        source_ids = keras.Input(shape=(None,), dtype="int32", name="source_ids")
        target_ids = keras.Input(shape=(None,), dtype="int32", name="target_ids")
        memory = _encode(layers, source_ids)
        logits = _decode(layers, target_ids, memory, source_ids)
        super().__init__(
            inputs={"source_ids": source_ids, "target_ids": target_ids},
            outputs=logits,
            **kwargs,
        )
        self.config = config
        self._parts = layers

    # Layers by role, for decoding and inspection.
    @property
    def encoder_blocks(self) -> list[EncoderBlock]:
        return self._parts.encoder_blocks

    @property
    def decoder_blocks(self) -> list[DecoderBlock]:
        return self._parts.decoder_blocks

    def encode(self, source_ids, training=None):
        """Run the encoder alone. (B, S) int ids -> (B, S, D)."""
        return _encode(self._parts, ops.convert_to_tensor(source_ids), training)

    def decode(self, target_ids, memory, source_ids, training=None):
        """Run the decoder alone on a whole target prefix.

        (B, T) target ids, (B, S, D) encoder output, (B, S) source ids (for
        the cross-attention padding mask) -> (B, T, V) float32 logits.
        """
        return _decode(
            self._parts,
            ops.convert_to_tensor(target_ids),
            memory,
            ops.convert_to_tensor(source_ids),
            training,
        )

    def attention_weights(self, source_ids, target_ids) -> dict[str, list]:
        """Attention weights of every layer (inference, for plots).

        Returns a dict with "encoder_self_attention" (B, H, S, S),
        "decoder_self_attention" (B, H, T, T) and "cross_attention"
        (B, H, T, S): one float32 tensor per layer, rows summing to 1 over
        real keys.
        """
        weights: dict[str, list] = {}
        source_ids = ops.convert_to_tensor(source_ids)
        memory = _encode(self._parts, source_ids, weights=weights)
        _decode(
            self._parts,
            ops.convert_to_tensor(target_ids),
            memory,
            source_ids,
            weights=weights,
        )
        return weights

    def teacher_forced(self, source_ids, target_ids) -> tuple:
        """One inference pass over given outputs, for their scores and
        alignments: ((B, T, V) float32 logits, the (B, H, T, S) float32
        cross-attention weights of every decoder layer). The logits are
        `decode`'s and the weights `attention_weights`', in one pass."""
        weights: dict[str, list] = {}
        source_ids = ops.convert_to_tensor(source_ids)
        memory = _encode(self._parts, source_ids)
        logits = _decode(
            self._parts,
            ops.convert_to_tensor(target_ids),
            memory,
            source_ids,
            weights=weights,
        )
        return logits, weights["cross_attention"]

    def init_decode_cache(self, batch_size: int, max_length: int):
        """Zero self-attention caches: one (key, value) pair per decoder layer,
        (B, H, L_max, d_k) and (B, H, L_max, K) (d_k = K unless key_dim);
        with a word pointer, then its (B, 1, L_max, 1) int32 cache."""
        caches = [
            block.self_attention.empty_cache(batch_size, max_length)
            for block in self._parts.decoder_blocks
        ]
        if self._parts.word_pointer is not None:
            caches.append(self._parts.word_pointer.empty_cache(batch_size, max_length))
        return caches

    def cross_key_values(self, memory):
        """Cross-attention keys/values of every decoder layer, computed once
        per source: a list of (keys, values), (B, H, S, d_k) and (B, H, S, K);
        with a word pointer, then its projected states (B, S, D)."""
        key_values = [
            block.cross_attention.project_key_value_cache(memory)
            for block in self._parts.decoder_blocks
        ]
        if self._parts.word_pointer is not None:
            key_values.append(self._parts.word_pointer.project(memory))
        return key_values

    def decode_step(
        self, target_ids, step, cache, cross_key_values, source_ids, beams: int = 1
    ):
        """Logits for `target_ids` (B, T_new) at positions step..step+T_new-1.

        Uses and returns the per-layer self-attention caches; the result
        equals `decode` on the whole prefix at those positions. `source_ids`
        has B rows; `cross_key_values` has B / `beams` (beam search: the
        `beams` consecutive rows of a source's hypotheses share its
        cross-attention keys/values; see `DecoderBlock.decode_step`).

        Returns:
            ((B, T_new, V) float32 logits, updated cache list).
        """
        parts = self._parts
        y = parts.target_embedding(target_ids)
        y = parts.target_position(y, start_index=step)
        pointer_cache = []
        if parts.word_pointer is not None:  # Its states end the cross list.
            index, word_cache = parts.word_pointer.step_index(
                cache[-1], target_ids, step
            )
            y = y + parts.word_pointer.gather(
                cross_key_values[-1], source_ids, index, beams
            )
            pointer_cache = [word_cache]
        self_mask = self.step_self_attention_mask(
            target_ids, step, ops.shape(cache[0][0])[2]
        )
        cross_mask = self.step_cross_attention_mask(source_ids, target_ids)
        new_cache = []
        for block, layer_cache, key_value in zip(
            parts.decoder_blocks, cache, cross_key_values
        ):
            y, layer_cache = block.decode_step(
                y, layer_cache, key_value, step, self_mask, cross_mask, beams
            )
            new_cache.append(layer_cache)
        return _logits(parts, y), new_cache + pointer_cache

    def step_self_attention_mask(self, target_ids, step, key_length):
        """Where new positions may look in a self-attention cache of
        `key_length` slots: each sees the slots up to its own position (and
        only the last `attention_window` of them if the model has a window).
        `decode_step` and the ONNX export's step graph both use it.

        Shape: (B, T_new) ids at positions step.. -> (B, T_new, key_length)
        bool."""
        queries = masks.token_positions(target_ids, offset=step)
        keys = masks.token_positions(ops.ones((1, key_length), "int32"))
        mask = masks.causal_mask(queries, keys)
        window = self.config.attention_window
        if window is not None:
            local = masks.window_mask(queries, keys, window, causal=True)
            mask = ops.logical_and(mask, local)
        return mask

    def step_cross_attention_mask(self, source_ids, query_ids):
        """Where decoder queries may look in the source: its real tokens.

        Shape: (B, S) source ids and (B, T) query ids -> (B, T, S) bool."""
        return masks.cross_attention_mask(source_ids, query_ids)

    def position_tables(self, length: int):
        """(source, target) position encodings, one row per position from 0:
        the learned tables as they are, or the first `length` rows of the
        sinusoid the model adds (what an engine without our layers needs).

        Shape: each (rows, d_model) float32, as NumPy arrays."""
        parts = self._parts
        if self.config.position_encoding == "learned":
            return tuple(
                np.asarray(ops.convert_to_numpy(table.position_embeddings), np.float32)
                for table in (parts.source_position, parts.target_position)
            )
        table = sinusoidal_table(np.arange(length), self.config.d_model)
        table = np.asarray(ops.convert_to_numpy(table), np.float32)
        return table, table

    def logits(self, hidden):
        """The decoder's last hidden states -> logits: the final norm (pre-norm
        models), then the tied or own output projection.

        Shape: (batch, length, d_model) -> (batch, length, target vocab)."""
        return _logits(self._parts, hidden)

    def get_config(self) -> dict[str, Any]:
        return {
            "config": self.config.to_dict(),
            "name": self.name,
            "trainable": self.trainable,
            "package_version": __version__,
        }

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> Transformer:
        config = dict(config)
        saved_by = config.pop("package_version", None)
        window = config["config"].get("attention_window")
        if saved_by is None and window is not None:
            # Saved before 0.2.0, when attention_window was a half-width
            # (2r + 1 positions); loading it as a neighbourhood size would
            # silently change the model.
            raise ValueError(
                f"This model was saved by keras-transformer < 0.2.0 with "
                f"attention_window={window}, which then meant +-{window} "
                f"positions; it now means a neighbourhood of {window} "
                "positions (the paper's r). Rebuild it with attention_window="
                f"{2 * window + 1} (encoder) and retrain, or load it with 0.1."
            )
        return cls(**config)


def build_transformer(config: TransformerConfig | None = None) -> Transformer:
    """Build the functional Transformer for `config` (default: `base`).

    Examples:
        >>> config = TransformerConfig.preset("tiny")
        >>> model = build_transformer(config)
        >>> logits = model({"source_ids": src, "target_ids": tgt})  # (B, T, V)
    """
    return Transformer(config or TransformerConfig())
