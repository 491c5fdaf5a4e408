"""Helpers shared by the data-source tests."""

from __future__ import annotations

import gzip
import hashlib
import subprocess
import sys
import textwrap
import types
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


TFDS_EXAMPLES = [
    {"de": b"Guten Morgen .", "en": b"Good morning ."},
    {"de": "Grüße".encode(), "en": b"Greetings"},
    {"de": b"", "en": b"  spaced  "},
]


def install_fake_tfds(monkeypatch) -> types.ModuleType:
    """A stand-in `tensorflow_datasets` whose every split holds
    TFDS_EXAMPLES; `calls` records each `load`, and the name "broken"
    fails to load."""
    module = types.ModuleType("tensorflow_datasets")
    module.calls = []
    module.examples = list(TFDS_EXAMPLES)
    module.info = types.SimpleNamespace(supervised_keys=("de", "en"), version="1.0.0")

    def load(name, *, split, data_dir=None, with_info=False):
        module.calls.append((name, split, data_dir, with_info))
        if name == "broken":
            raise RuntimeError("no such dataset")
        return (module.examples, module.info) if with_info else module.examples

    module.load = load
    module.as_numpy = lambda dataset: iter(dataset)
    monkeypatch.setitem(sys.modules, "tensorflow_datasets", module)
    return module
