"""Token embedding scaled by sqrt(d_model), reusable as the output layer."""

from __future__ import annotations

import math
from collections.abc import Sequence

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="keras_transformer")
class ScaledEmbedding(keras.layers.Layer):
    """Embedding lookup times sqrt(d_model); its transpose gives the logits.

    §3.4: "we share the same weight matrix between the two embedding layers
    and the pre-softmax linear transformation ... In the embedding layers, we
    multiply those weights by sqrt(d_model)". One instance called on source
    ids, on target ids and with `reverse=True` on decoder outputs ties all
    three; separate instances give untied embeddings.

    The table is initialised with stddev d_model^-0.5 (as tensor2tensor and
    fairseq), so the scaled embeddings start with unit variance, comparable
    to the positional encoding they are added to.

    `quantize("int8")` (what `keras.Model.quantize` calls) replaces the table
    by int8 rows with one float32 scale per token: Keras quantizes its own
    `Embedding` but not a subclass of `Layer` such as this one, and the tied
    output projection is the largest matrix of a translation model. Lookups
    dequantize the rows they read; the output projection quantizes the
    hidden states per position too and multiplies int8 by int8, as Keras's
    int8 `Dense` does. Inference only: the int8 table is not trainable.

    `enable_lora(rank)` adds low-rank factors A (V, r) and B (r, D) beside
    the frozen table, which then reads as table + (alpha / r) A B, as
    Keras's `Embedding.enable_lora` does. Tied, the table is also the
    output layer: a fine-tune to a new domain that leaves it frozen cannot
    move the logits of the new domain's words (docs/fine-tuning.md).
    `enable_lora(rank, rows=ids)` also trains those K rows in full: a (K, D)
    update added to them (Hugging Face PEFT's "trainable tokens"), for the
    pieces a new domain uses most, which a low-rank update of all V rows
    serves poorly. Saving writes the merged table only, as Keras's LoRA
    layers do.

    Args:
        vocab_size: int. V.
        model_dim: int. D.

    Call arguments:
        inputs: (B, L) int token ids, or (B, L, D) hidden states when
            `reverse=True`.
        reverse: bool, keyword-only. Project hidden states onto the
            vocabulary: (B, L, D) -> (B, L, V) float32 logits, computed in
            float32 under mixed precision.

    Examples:
        >>> embedding = ScaledEmbedding(vocab_size=100, model_dim=16)
        >>> x = embedding(keras.ops.ones((2, 5), "int32"))
        >>> embedding(x, reverse=True).shape
        (2, 5, 100)
    """

    def __init__(self, vocab_size: int, model_dim: int, **kwargs):
        super().__init__(**kwargs)
        for name, value in (("vocab_size", vocab_size), ("model_dim", model_dim)):
            if not isinstance(value, int) or value < 1:
                raise ValueError(
                    f"{name} must be an integer >= 1. Received: {name}={value}"
                )
        self.vocab_size = vocab_size
        self.model_dim = model_dim
        self.int8 = False  # Set by `quantize("int8")`.
        self.lora_enabled = False  # Set by `enable_lora`.

    def build(self, input_shape=None):
        self._embeddings = self.add_weight(
            name="embeddings",
            shape=(self.vocab_size, self.model_dim),
            initializer=keras.initializers.RandomNormal(stddev=self.model_dim**-0.5),
        )
        self.built = True

    @property
    def embeddings(self):
        """The (V, D) table: the variable, or with LoRA the merged table."""
        if not self.lora_enabled:
            return self._embeddings
        update = ops.matmul(self.lora_embeddings_a, self.lora_embeddings_b)
        merged = ops.add(self._embeddings, self.lora_scale * update)
        if self.lora_rows is not None:
            ids = ops.expand_dims(self.lora_row_ids, -1)
            shape = (self.vocab_size, self.model_dim)
            merged = ops.add(merged, ops.scatter(ids, self.lora_rows, shape))
        return ops.cast(merged, self._embeddings.dtype)

    def enable_lora(
        self,
        rank: int,
        lora_alpha: float | None = None,
        rows: Sequence[int] | None = None,
    ) -> None:
        """Train rank-`rank` factors instead of the table, and the `rows`
        (distinct token ids) in full (see the class docstring);
        `lora_alpha` defaults to the rank (a scale of 1)."""
        if not self.built or self.int8 or self.lora_enabled:
            state = "int8" if self.int8 else "LoRA" if self.lora_enabled else "unbuilt"
            raise ValueError(f"{self.name}: cannot enable LoRA on a {state} table.")
        if not 1 <= rank <= min(self.vocab_size, self.model_dim):
            raise ValueError(
                f"{self.name}: the LoRA rank must be in [1, "
                f"{min(self.vocab_size, self.model_dim)}]. Received: rank={rank}"
            )
        row_ids = None if rows is None else self._check_rows(rows)
        self._tracker.unlock()
        # float32 factors, as Keras's: updates this small underflow in float16.
        # Keras's `Embedding` initialisation (B = 0). Hugging Face PEFT's
        # (A = 0, B ~ N(0, 1)) learned less at the higher of two rates
        # (docs/benchmarks-fine-tuning.md).
        self.lora_embeddings_a = self.add_weight(
            name="lora_embeddings_a",
            shape=(self.vocab_size, rank),
            initializer="he_uniform",
            dtype="float32",
        )
        self.lora_embeddings_b = self.add_weight(
            name="lora_embeddings_b",
            shape=(rank, self.model_dim),
            initializer="zeros",
            dtype="float32",
        )
        self.lora_row_ids = self.lora_rows = None
        if row_ids is not None:
            # The ids are a variable so that a checkpoint's LoRA state holds them.
            self.lora_row_ids = self.add_weight(
                name="lora_row_ids",
                shape=(len(row_ids),),
                initializer="zeros",
                dtype="int32",
                trainable=False,
            )
            self.lora_row_ids.assign(ops.convert_to_tensor(row_ids, "int32"))
            self.lora_rows = self.add_weight(
                name="lora_rows",
                shape=(len(row_ids), self.model_dim),
                initializer="zeros",
                dtype="float32",
            )
        self._tracker.lock()
        self._embeddings.trainable = False
        self.lora_rank = rank
        self.lora_alpha = rank if lora_alpha is None else lora_alpha
        self.lora_scale = self.lora_alpha / rank
        self.lora_enabled = True

    def _check_rows(self, rows: Sequence[int]) -> list[int]:
        ids = [int(row) for row in rows]
        if not ids or len(set(ids)) != len(ids):
            raise ValueError(
                f"{self.name}: the LoRA rows must be distinct token ids, at "
                f"least one. Received: {len(ids)} ids, {len(set(ids))} distinct"
            )
        outside = [row for row in ids if not 0 <= row < self.vocab_size]
        if outside:
            raise ValueError(
                f"{self.name}: the LoRA rows must be token ids in [0, "
                f"{self.vocab_size}). Received: {outside[:5]}"
            )
        return ids

    def save_own_variables(self, store):
        if not self.lora_enabled:
            return super().save_own_variables(store)
        store["0"] = self.embeddings  # Merged, as a LoRA Dense saves its kernel.

    def load_own_variables(self, store):
        if not self.lora_enabled:
            return super().load_own_variables(store)
        self._embeddings.assign(store["0"])
        factors = [self.lora_embeddings_a, self.lora_embeddings_b, self.lora_rows]
        for factor in factors:
            if factor is not None:
                factor.assign(ops.zeros(factor.shape))

    def quantize(self, mode=None, type_check=True, config=None):
        if mode != "int8":
            raise NotImplementedError(
                f"{type(self).__name__} can be quantized to int8 only, not {mode!r}."
            )
        if self.int8 or self.lora_enabled:
            state = "quantized to int8" if self.int8 else "LoRA-enabled"
            raise ValueError(f"{self.name} is already {state}.")
        # Keras's scale multiplies: int8 row = round(row * scale).
        rows, scales = keras.quantizers.abs_max_quantize(
            self.embeddings, axis=-1, to_numpy=True
        )
        del self._embeddings
        shape = (self.vocab_size, self.model_dim)
        self._embeddings = self.add_weight(
            name="embeddings", shape=shape, dtype="int8", trainable=False
        )
        self.embeddings_scale = self.add_weight(
            name="embeddings_scale", shape=(self.vocab_size,), trainable=False
        )
        self._embeddings.assign(rows)
        self.embeddings_scale.assign(ops.squeeze(scales, axis=-1))
        self.int8 = True

    def _int8_logits(self, hidden):
        hidden, hidden_scale = keras.quantizers.abs_max_quantize(
            ops.cast(hidden, "float32"), axis=-1
        )
        products = ops.matmul(hidden, ops.transpose(self.embeddings))
        scale = hidden_scale * ops.cast(self.embeddings_scale, "float32")
        return ops.divide(ops.cast(products, "float32"), scale)

    def _int8_lookup(self, ids):
        rows = ops.cast(ops.take(self.embeddings, ids, axis=0), "float32")
        scales = ops.take(self.embeddings_scale, ids, axis=0)
        return ops.divide(rows, ops.expand_dims(scales, -1))

    def call(self, inputs, *, reverse: bool = False):
        if reverse and self.int8:
            return self._int8_logits(inputs)
        if self.int8:
            vectors = self._int8_lookup(ops.cast(inputs, "int32"))
            return ops.cast(vectors * math.sqrt(self.model_dim), self.compute_dtype)
        if reverse:
            table = ops.cast(self.embeddings, "float32")
            hidden = ops.cast(inputs, "float32")
            return ops.matmul(hidden, ops.transpose(table))
        vectors = ops.take(self.embeddings, ops.cast(inputs, "int32"), axis=0)
        return ops.cast(vectors, self.compute_dtype) * ops.cast(
            math.sqrt(self.model_dim), self.compute_dtype
        )

    def compute_output_spec(self, inputs, *, reverse: bool = False):
        if reverse:
            return keras.KerasTensor(inputs.shape[:-1] + (self.vocab_size,), "float32")
        return keras.KerasTensor(inputs.shape + (self.model_dim,), self.compute_dtype)

    def get_config(self):
        config = super().get_config()
        config.update({"vocab_size": self.vocab_size, "model_dim": self.model_dim})
        return config
