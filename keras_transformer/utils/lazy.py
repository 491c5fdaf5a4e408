"""Lazy package faces: public names that load their module on first use."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable


def lazy_exports(
    package: str, exports: dict[str, str]
) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """A package's `__getattr__` and `__dir__` for `exports`, public name ->
    the module that defines it (absolute, or relative to `package`).

    Importing the package then loads nothing but itself: the command line's
    `--help` reads the light modules without starting Keras, and each name
    imports its module the first time it is read.
    """

    def __getattr__(name: str) -> object:
        if name not in exports:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(exports[name], package), name)
        setattr(sys.modules[package], name, value)  # Later reads skip this.
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(exports))

    return __getattr__, __dir__
