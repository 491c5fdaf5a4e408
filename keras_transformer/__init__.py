"""keras-transformer: the Transformer of "Attention Is All You Need" in Keras 3."""

from keras_transformer import layers, masks
from keras_transformer.config import PAD_ID, PRESETS, TransformerConfig
from keras_transformer.model import Transformer, build_transformer

__version__ = "0.1.0"

__all__ = [
    "PAD_ID",
    "PRESETS",
    "Transformer",
    "TransformerConfig",
    "build_transformer",
    "layers",
    "masks",
]
