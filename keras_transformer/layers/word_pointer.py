"""The parsing decoder's word pointer: the encoder state of its current word.

A parsing model writes a linearized tree in which every part-of-speech tag
stands for the next word of the sentence (`parsing.linearize`), so where the
decoder is in the sentence is known exactly: the number of tags written so
far. "Deterministic attention" (Ma et al. 2017; Liu, Zhu & Shi 2018) feeds
the decoder the encoder state of that word instead of leaving cross-attention
to find it. Here it is added, through a learned projection, to the target
embedding of every position: position t (which predicts token t + 1) gets
word k = the number of tags among target tokens 0..t; once every word has
its tag, zeros.

Legend: B batch, S source length (one id per word), T target length,
L cache length, D d_model.
"""

from __future__ import annotations

from collections.abc import Sequence

import keras
from keras import ops

from keras_transformer.config import BOS_ID, EOS_ID, PAD_ID, UNK_ID

_RESERVED = (PAD_ID, UNK_ID, BOS_ID, EOS_ID)


@keras.saving.register_keras_serializable(package="keras_transformer")
class WordPointer(keras.layers.Layer):
    """The encoder state of the decoder's current word, projected.

    Args:
        bracket_ids: the target ids of the phrase brackets (``(X``, ``)X``)
            and of any other token that is not a tag
            (`parsing.linearize.bracket_ids`). Every other id, the four
            reserved ones aside, is a tag: writing it moves the pointer to
            the next word.
        model_dim: D, the projection's output size.

    Call arguments:
        memory: (B, S, D) encoder output, one position per word.
        source_ids: (B, S) int source ids (pad 0): the words' count.
        word_index: (B, T) int32, each position's word (`word_index`).

    Returns:
        (B, T, D): the projected encoder state of each position's word,
        zeros past the last word.

    Examples:
        >>> pointer = WordPointer(bracket_ids=[4, 5], model_dim=8)
        >>> target = keras.ops.convert_to_tensor([[2, 4, 9, 9, 5]])
        >>> index = pointer.word_index(target)  # [[0, 0, 1, 2, 2]]
        >>> pointer(keras.ops.ones((1, 3, 8)), keras.ops.ones((1, 3)), index).shape
        (1, 5, 8)
    """

    def __init__(self, bracket_ids: Sequence[int], model_dim: int, **kwargs):
        super().__init__(**kwargs)
        self.bracket_ids = tuple(int(token_id) for token_id in bracket_ids)
        self.model_dim = int(model_dim)
        self.projection = keras.layers.Dense(
            self.model_dim, use_bias=False, dtype=self.dtype_policy, name="projection"
        )

    def build(self, memory_shape, source_ids_shape=None, word_index_shape=None):
        self.projection.build(memory_shape)
        self.built = True

    def moves(self, target_ids):
        """1 where a target token is a tag (it moves the pointer), else 0.
        (B, T) ids -> (B, T) int32."""
        skipped = ops.convert_to_tensor(list(_RESERVED) + list(self.bracket_ids))
        target_ids = ops.cast(target_ids, "int32")
        stays = ops.any(
            ops.equal(target_ids[..., None], ops.cast(skipped, "int32")), axis=-1
        )
        return ops.cast(ops.logical_not(stays), "int32")

    def word_index(self, target_ids):
        """Each position's word: the tags among tokens 0..t. (B, T) ->
        (B, T) int32."""
        return ops.cumsum(self.moves(target_ids), axis=1)

    def empty_cache(self, batch_size, max_length: int):
        """A zero (B, 1, L, 1) int32 cache of which positions moved the
        pointer: the caches' layout, so a search grows and reorders it as
        it does the attention's."""
        return ops.zeros((batch_size, 1, max_length, 1), "int32")

    def step_index(self, cache, target_ids, step):
        """`word_index` of new tokens at positions step..step + T_new - 1,
        from the cache of the positions before. Returns ((B, T_new) int32,
        the updated cache)."""
        moves = self.moves(target_ids)
        cache = ops.slice_update(cache, [0, 0, step, 0], moves[:, None, :, None])
        slots = ops.arange(ops.shape(cache)[2], dtype="int32")
        positions = step + ops.arange(ops.shape(target_ids)[1], dtype="int32")
        upto = ops.less_equal(slots[None, :], positions[:, None])  # (T_new, L)
        written = cache[:, 0, :, 0]  # (B, L)
        index = ops.sum(ops.where(upto[None], written[:, None, :], 0), axis=-1)
        return ops.cast(index, "int32"), cache

    def call(self, memory, source_ids, word_index):
        return self.gather(self.project(memory), source_ids, word_index)

    def project(self, memory):
        """The projected encoder states, computed once per source (what the
        cached decoder gathers from). (B, S, D) -> (B, S, D)."""
        return self.projection(memory)

    def gather(self, states, source_ids, word_index, beams: int = 1):
        """Each position's word's state. states (B / beams, S, D) from
        `project` (the `beams` consecutive rows of a source's hypotheses
        share it), source_ids (B, S), word_index (B, T) -> (B, T, D), zeros
        past the last word."""
        rows, length = ops.shape(word_index)[0], ops.shape(word_index)[1]
        words = ops.sum(ops.cast(ops.not_equal(source_ids, PAD_ID), "int32"), axis=1)
        where = ops.clip(word_index, 0, ops.shape(states)[1] - 1)
        if beams > 1:  # A source's beams, side by side on its one row.
            where = ops.reshape(where, (-1, beams * length))
        picked = ops.take_along_axis(states, where[..., None], axis=1)
        picked = ops.reshape(picked, (rows, length, self.model_dim))
        inside = ops.less(word_index, words[:, None])[..., None]
        return ops.where(inside, picked, ops.zeros_like(picked))

    def compute_output_shape(
        self, memory_shape, source_ids_shape=None, word_index_shape=None
    ):
        length = word_index_shape[1] if word_index_shape else None
        return (memory_shape[0], length, self.model_dim)

    def get_config(self):
        return {
            **super().get_config(),
            "bracket_ids": list(self.bracket_ids),
            "model_dim": self.model_dim,
        }
