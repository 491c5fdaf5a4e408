"""Where the package keeps files between runs (downloads, compiled programs)."""

from __future__ import annotations

import os
from pathlib import Path

CACHE_ENV = "KERAS_TRANSFORMER_CACHE"


def user_cache_root() -> Path:
    """`$KERAS_TRANSFORMER_CACHE` (with `~` expanded), else
    `~/.cache/keras_transformer`."""
    root = os.environ.get(CACHE_ENV)
    if root:
        return Path(root).expanduser()
    return Path.home() / ".cache" / "keras_transformer"
