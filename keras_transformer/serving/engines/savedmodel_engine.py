"""`SavedModelEngine`: an exported SavedModel, its search settings fixed at export.

A request asking for other settings is refused naming the field.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from keras_transformer.decoding.batching import real_hypotheses
from keras_transformer.decoding.settings import SearchSettings
from keras_transformer.serving.engines.base import (
    SEARCH_SCORE,
    Engine,
    _check_flags,
)
from keras_transformer.serving.options import AllowedSettings
from keras_transformer.serving.schema import RequestError


class SavedModelEngine(Engine):
    """An exported SavedModel; its search settings were fixed at export."""

    name = "savedmodel"
    score = SEARCH_SCORE

    def __init__(self, directory: Path, settings: SearchSettings):
        from keras_transformer.export.reading import read_export_tokenizer
        from keras_transformer.export.savedmodel import SavedModelTranslator

        self.model = SavedModelTranslator(directory)
        tokenizer = read_export_tokenizer(directory, self.model.info, self.name)
        super().__init__(tokenizer, self.model.settings)
        self.directory = directory
        _check_flags(settings, self.model.settings, directory)

    def check_settings(self, settings: SearchSettings) -> None:
        fixed = self.model.settings
        for name, value in settings.to_dict().items():
            if value != getattr(fixed, name):
                raise RequestError(
                    422,
                    name,
                    f"{name}: this server's SavedModel was exported with {name}="
                    f"{getattr(fixed, name)!r} and cannot search with {value!r} "
                    "(its settings are fixed at export). Leave it out, or serve "
                    "with --engine keras or ctranslate2.",
                )

    def allowed(self, asked: AllowedSettings | None) -> AllowedSettings:
        if asked is not None:
            self._check_guided(asked)
        fixed = self.model.settings
        only = AllowedSettings((fixed.beam_size,), (fixed.alpha,))
        if asked is not None and asked != only:
            raise ValueError(
                f"--allowed-beam-sizes/--allowed-alphas: the SavedModel in "
                f"{self.directory.name} searches with beam_size={fixed.beam_size} "
                f"and alpha={fixed.alpha} only (fixed at export). Leave them out, "
                "or serve with --engine keras or ctranslate2."
            )
        return only

    def translate(self, texts: Sequence[str], settings: SearchSettings, abandoned=None):
        found = self.model.nbest(list(texts))
        return [
            real_hypotheses(h) if text.strip() else [("", 0.0)]
            for text, h in zip(texts, found)
        ]

    def info(self) -> dict[str, Any]:
        model = {
            "export": self.directory.name,
            "file": self.model.info["model"],
            "quantization": self.model.info.get("quantization"),
        }
        return {**super().info(), "model": model}
