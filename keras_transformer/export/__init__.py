"""Export a trained run for serving, one module per target.

- `savedmodel`: a text-in, text-out TensorFlow SavedModel
  (`export_translator`); `savedmodel_graph` builds its TensorFlow graph.
- `ctranslate2`: a CTranslate2 model directory (`export_ctranslate2`).
- `common`: what the targets share: opening the run, the output
  directory, the record each export writes beside its files.

Every exporter takes the run directory, the output directory and one
`SearchSettings`. Importing this package loads nothing heavy: the command
line reads `QUANTIZATIONS` and `DEFAULT_MAX_POSITIONS` at start-up, and each
public name below loads its module on first use.
"""

from __future__ import annotations

import importlib

#: Weight types `quantization` accepts (CTranslate2's names); None keeps float32.
QUANTIZATIONS = (
    "int8",
    "int8_float32",
    "int8_float16",
    "int8_bfloat16",
    "int16",
    "float16",
    "bfloat16",
    "float32",
)
#: Rows of the positional table: CTranslate2's default `max_input_length` plus
#: room for the target side's extra length.
DEFAULT_MAX_POSITIONS = 1024 + 256

_EXPORTS = {
    "export_ctranslate2": "ctranslate2",
    "EXPORT_INFO": "savedmodel",
    "IDS_ONLY": "savedmodel",
    "SIGNATURES": "savedmodel",
    "export_translator": "savedmodel",
}

__all__ = sorted([*_EXPORTS, "DEFAULT_MAX_POSITIONS", "QUANTIZATIONS"])


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module = importlib.import_module(f"{__name__}.{_EXPORTS[name]}")
    value = getattr(module, name)
    globals()[name] = value  # Later lookups skip this function.
    return value
