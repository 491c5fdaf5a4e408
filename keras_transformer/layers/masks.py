"""Attention masks, built explicitly from token ids.

One convention everywhere: a boolean mask where True means "this query may
attend to this key". Masks are plain tensors passed to every attention call;
nothing relies on Keras's implicit `_keras_mask` propagation, which is lost by
arithmetic such as `x + positional_encoding`.

Positions are derived from the ids with a cumulative sum rather than
`arange(length)`, so the same functions work on symbolic Keras tensors whose
length is unknown (functional model construction), under jit and eagerly.

Legend: B batch, T query (target) length, S key (source) length.
"""

from __future__ import annotations

from keras import ops

from keras_transformer.config import PAD_ID


def padding_mask(token_ids, pad_id: int = PAD_ID):
    """True at real tokens. (B, L) int ids -> (B, L) bool."""
    return ops.not_equal(token_ids, pad_id)


def token_positions(token_ids, offset=0):
    """0-based position of every slot. (B, L) -> (B, L) int32."""
    ones = ops.ones_like(token_ids, dtype="int32")
    return ops.cumsum(ones, axis=1) - 1 + offset


def causal_mask(query_positions, key_positions):
    """True where key position <= query position. (B, T), (B, S) -> (B, T, S).

    During incremental decoding the query position is the step index, so the
    query at step t sees cache slots 0..t and nothing later.
    """
    return ops.less_equal(key_positions[:, None, :], query_positions[:, :, None])


def window_mask(query_positions, key_positions, size: int, *, causal: bool = False):
    """True where the key is in the query's neighbourhood of `size` positions.

    Restricted self-attention of Vaswani et al. 2017 (§4, Table 1): each
    query attends to a neighbourhood of r = `size` positions. With `causal`
    (decoder) those are the r positions ending at the query: query - r <
    key <= query. Without (encoder) they are centred on the query: size // 2
    before it and size - 1 - size // 2 after it (as many on each side for
    odd r; one more before for even r). -> (B, T, S) bool.
    """
    offset = query_positions[:, :, None] - key_positions[:, None, :]
    before = size - 1 if causal else size // 2
    after = 0 if causal else size - 1 - size // 2
    return ops.logical_and(
        ops.less_equal(offset, before), ops.less_equal(-offset, after)
    )


def self_attention_mask(token_ids, *, causal: bool = False, window: int | None = None):
    """Mask for self-attention over one sequence. (B, L) ids -> (B, L, L).

    Keys that are padding are never attended; `causal` hides later positions
    (decoder); `window` restricts attention to a neighbourhood of that many
    positions (`window_mask`). Query rows that are padding keep their key
    mask: their outputs are ignored downstream, and rows with at least one
    key stay well-defined.
    """
    positions = token_positions(token_ids)
    mask = _broadcast_keys(padding_mask(token_ids), token_ids)
    if causal:
        mask = ops.logical_and(mask, causal_mask(positions, positions))
    if window is not None:
        mask = ops.logical_and(
            mask, window_mask(positions, positions, window, causal=causal)
        )
    return mask


def cross_attention_mask(source_ids, target_ids):
    """Mask for decoder queries over encoder keys. -> (B, T, S) bool."""
    return _broadcast_keys(padding_mask(source_ids), target_ids)


def _broadcast_keys(key_valid, query_ids):
    """(B, S) key mask -> (B, T, S), T taken from the query ids (B, T)."""
    query_rows = ops.ones_like(query_ids, dtype="bool")[:, :, None]
    return ops.logical_and(query_rows, key_valid[:, None, :])
