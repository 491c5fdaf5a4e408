"""Helpers shared by the data-source tests."""

from __future__ import annotations

import gzip
import hashlib
import subprocess
import sys
import textwrap
from pathlib import Path

import keras_transformer

PACKAGE_DIR = Path(keras_transformer.__file__).parent

# Imports `module` with the keras_transformer packages replaced by empty
# stand-ins, so that their __init__ (which imports Keras) does not run, then
# exits 1 if TensorFlow, TFDS, Keras or JAX got imported.
_ISOLATED_IMPORT = textwrap.dedent(
    """
    import importlib, sys, types
    package_dir, module = sys.argv[1], sys.argv[2]
    for name, path in (
        ("keras_transformer", package_dir),
        ("keras_transformer.data", package_dir + "/data"),
    ):
        stand_in = types.ModuleType(name)
        stand_in.__path__ = [path]
        sys.modules[name] = stand_in
    importlib.import_module(module)
    heavy = ("tensorflow", "tensorflow_datasets", "keras", "jax")
    bad = sorted(k for k in sys.modules if k.split(".")[0] in heavy)
    print(bad)
    sys.exit(1 if bad else 0)
    """
)


def write(path: Path, data: bytes, *, compress: bool = False) -> Path:
    path.write_bytes(gzip.compress(data) if compress else data)
    return path


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def assert_imports_nothing_heavy(module: str) -> None:
    """Importing `module` alone imports no TensorFlow, TFDS, Keras or JAX."""
    result = subprocess.run(
        [sys.executable, "-c", _ISOLATED_IMPORT, str(PACKAGE_DIR), module],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr
