"""Small helpers shared by the layers."""

from __future__ import annotations

import keras


def clone_initializer(initializer):
    """A fresh copy, so sibling sublayers do not start from identical draws."""
    return initializer.__class__.from_config(initializer.get_config())


def residual(inputs, sublayer, norm, dropout, *, norm_first: bool, training=None):
    """One sub-layer connection of §3.1 / §5.4.

    Post-norm (the paper): LayerNorm(x + Dropout(Sublayer(x))).
    Pre-norm: x + Dropout(Sublayer(LayerNorm(x))).
    `sublayer` returns (output, extra); `extra` (attention weights, a cache)
    is passed through untouched.
    """
    hidden = norm(inputs) if norm_first else inputs
    output, extra = sublayer(hidden)
    output = inputs + dropout(output, training=training)
    return (output if norm_first else norm(output)), extra


def layer_norm(epsilon: float, dtype, name: str):
    return keras.layers.LayerNormalization(epsilon=epsilon, dtype=dtype, name=name)
