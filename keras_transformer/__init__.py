"""keras-transformer: the Transformer of "Attention Is All You Need" in Keras 3.

Importing the package registers its layers, model, losses, metrics and
schedules with Keras, so `keras.saving.load_model("model.keras")` works after
`import keras_transformer`. The other public names load on first use.
"""

from __future__ import annotations

import importlib
import sys

from keras_transformer import _console, optional_imports
from keras_transformer.version import __version__  # noqa: F401 - in __all__

if _console.is_command_line():  # Before Keras prints its native start-up.
    _console.quiet_native_start_up()


def _register_keras_objects() -> None:
    """Import the modules whose classes `.keras` files name; Keras only finds
    them once they are imported (it imports keras* packages alone by itself).
    Importing Keras starts its backend: a missing one is named with its extra."""
    optional_imports.check_backend_installed()
    try:
        for module in ("layers", "model", "losses", "metrics", "schedules"):
            importlib.import_module(f"{__name__}.{module}")
    except ModuleNotFoundError as error:
        explained = optional_imports.explain_missing(error)
        if explained is None:
            raise
        raise explained from error


try:
    _register_keras_objects()
except optional_imports.MissingExtraError as _error:
    if not _console.is_command_line():
        raise
    # The command's users get the sentence, not a traceback (exit 2: setup).
    print(f"keras-transformer: error: {_error}", file=sys.stderr)
    raise SystemExit(2) from None

_EXPORTS = {
    "LabelSmoothedCrossEntropy": "keras_transformer.losses",
    "MaskedTokenAccuracy": "keras_transformer.metrics",
    "PAD_ID": "keras_transformer.config",
    "PRESETS": "keras_transformer.config",
    "PerUpdateSchedule": "keras_transformer.schedules",
    "SequenceGenerator": "keras_transformer.generate",
    "TokenCrossEntropy": "keras_transformer.metrics",
    "TokenPerplexity": "keras_transformer.metrics",
    "Transformer": "keras_transformer.model",
    "TransformerConfig": "keras_transformer.config",
    "TransformerSchedule": "keras_transformer.schedules",
    "Translator": "keras_transformer.translator",
    "average_checkpoints": "keras_transformer.averaging",
    "build_transformer": "keras_transformer.model",
    "corpus_scores": "keras_transformer.evaluation",
    "export_ctranslate2": "keras_transformer.export",
    "export_translator": "keras_transformer.export",
    "load_tokenizer": "keras_transformer.data.tokenizer",
    "train_tokenizer": "keras_transformer.data.tokenizer",
    "transformer_optimizer": "keras_transformer.schedules",
}
_SUBMODULES = ("layers", "masks")

__all__ = sorted([*_EXPORTS, *_SUBMODULES, "__version__"])


def __getattr__(name: str):
    if name in _EXPORTS:
        value = getattr(importlib.import_module(_EXPORTS[name]), name)
    elif name in _SUBMODULES:
        value = importlib.import_module(f"{__name__}.{name}")
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value  # Later lookups skip this function.
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
