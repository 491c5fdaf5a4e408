"""The Transformer's layers, one concept per module."""

from keras_transformer.layers.decoder_block import DecoderBlock
from keras_transformer.layers.encoder_block import EncoderBlock
from keras_transformer.layers.feed_forward import PositionwiseFeedForward
from keras_transformer.layers.learned_positional_embedding import (
    LearnedPositionalEmbedding,
)
from keras_transformer.layers.logits_bias import LogitsBias
from keras_transformer.layers.multi_head_attention import MultiHeadAttention
from keras_transformer.layers.scaled_dot_product_attention import (
    ScaledDotProductAttention,
    attention_weights,
)
from keras_transformer.layers.scaled_embedding import ScaledEmbedding
from keras_transformer.layers.sinusoidal_positional_encoding import (
    SinusoidalPositionalEncoding,
    sinusoidal_table,
)
from keras_transformer.layers.word_pointer import WordPointer

__all__ = [
    "DecoderBlock",
    "EncoderBlock",
    "LearnedPositionalEmbedding",
    "LogitsBias",
    "MultiHeadAttention",
    "PositionwiseFeedForward",
    "ScaledDotProductAttention",
    "ScaledEmbedding",
    "SinusoidalPositionalEncoding",
    "WordPointer",
    "attention_weights",
    "sinusoidal_table",
]
