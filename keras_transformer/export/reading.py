"""An export directory read back: its record (`export.json`) and its tokenizer.

Every target (`export --format ctranslate2 | onnx | savedmodel`) writes an
`export.json` and the run's tokenizer beside its model; whatever decodes an
export alone (`translate --onnx`, `serve --export-dir`) reads them here, so
a directory of another format, an unreadable record or a tokenizer that is
not the model's is refused the same way, naming the file. Light: NumPy-free,
no Keras; the tokenizer's own library loads with it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

EXPORT_INFO = "export.json"
#: Where each target keeps the run's tokenizer inside its directory.
TOKENIZER_PATHS = {
    "ctranslate2": "tokenizer",
    "onnx": "tokenizer",
    "savedmodel": "assets/tokenizer",
}


def tokenizer_path(directory: str | os.PathLike, export_format: str) -> Path:
    """Where an export of `export_format` keeps its tokenizer."""
    return Path(directory) / TOKENIZER_PATHS[export_format]


def read_export_info(
    directory: str | os.PathLike, export_format: str, flag: str | None = None
) -> dict[str, Any]:
    """`directory`'s `export.json`, checked to record an `export_format` export.

    Raises:
        FileNotFoundError: No export.json (`flag`, when given, is the
            option that named the directory).
        ValueError: Unreadable, not a JSON object, or another format; the
            message names the file.
    """
    path = Path(directory) / EXPORT_INFO
    named = f"{flag} {directory}" if flag else str(directory)
    if not path.is_file():
        raise FileNotFoundError(
            f"{path} not found: {named} is not an export of "
            f"keras-transformer export (--format {export_format})."
        )
    try:
        info = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as error:
        raise ValueError(f"{path}: unreadable ({error}).") from None
    found = info.get("format") if isinstance(info, dict) else None
    if found != export_format:
        raise ValueError(
            f"{path}: {named} holds a {found!r} export; this needs one of "
            f"keras-transformer export --format {export_format}."
        )
    return info


def read_export_tokenizer(
    directory: str | os.PathLike, info: dict[str, Any], export_format: str
):
    """The tokenizer of an export whose record is `info`, refused when its
    vocabulary is not the size the record gives (files of two exports)."""
    from keras_transformer.data.tokenizer import load_tokenizer

    path = tokenizer_path(directory, export_format)
    tokenizer = load_tokenizer(path)
    expected = info.get("vocab_size")
    if expected is not None and tokenizer.vocab_size != expected:
        raise ValueError(
            f"{path} has {tokenizer.vocab_size} pieces but "
            f"{Path(directory) / EXPORT_INFO} says vocab_size={expected}: the "
            "files of two exports. Export the run again into an empty directory."
        )
    return tokenizer
