"""`OnnxEngine`: an ONNX export searched by `OnnxTranslator` with any settings.

NumPy's search over onnxruntime gives `Translator`'s translations.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from keras_transformer.decoding.settings import SearchSettings
from keras_transformer.serving.engines.base import (
    SEARCH_SCORE,
    Engine,
)


class OnnxEngine(Engine):
    """An ONNX export directory (`export --format onnx`): any settings."""

    name = "onnx"
    score = SEARCH_SCORE

    def __init__(
        self, directory: Path, settings: SearchSettings, threads: int, batch_size: int
    ):
        from keras_transformer.export.onnx_translator import OnnxTranslator

        self.model = OnnxTranslator(directory, threads=threads, batch_size=batch_size)
        super().__init__(self.model.tokenizer, settings)
        self.directory = directory
        self.check_settings(settings)

    def translate(self, texts: Sequence[str], settings: SearchSettings, abandoned=None):
        return self.model.nbest(list(texts), settings)

    def info(self) -> dict[str, Any]:
        model = {
            "export": self.directory.name,
            "file": self.model.info.get("model"),
            "quantization": self.model.info.get("quantization", "float32"),
        }
        return {**super().info(), "model": model}
