"""Optional packages: import one, or say which extra of ours installs it.

Each backend and each feature with a package of its own is an extra of
the ``keras-nmt`` distribution (docs/install.md). Code that needs such a
package calls ``require("ctranslate2", "serve")`` instead of a bare import,
so a user missing it reads ``pip install -e '.[serve]'`` (run in the
keras-nmt clone) rather than a ModuleNotFoundError from deep inside. This
module imports nothing heavy: the package's ``__init__`` uses it before
Keras starts its backend.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import sys
from pathlib import Path
from types import ModuleType

# The extra that installs each optional top-level module, for `require`'s
# default and for messages about a module missing from deep inside a library.
EXTRAS = {
    "tensorflow": "tensorflow",
    "tensorflow_text": "tensorflow",
    "tensorboard": "tensorflow",
    "jax": "jax",
    "jaxlib": "jax",
    "torch": "torch",
    "keras_hub": "hub",
    "ctranslate2": "serve",
    "fastapi": "serve",
    "uvicorn": "serve",
    "prometheus_client": "serve",
    "sentencex": "serve",
    "onnxruntime": "onnx",
    "onnx": "onnx-export",
    "onnxscript": "onnx-export",
    "nbclient": "notebooks",
    "nbformat": "notebooks",
}
# Keras backend name -> the module it imports.
BACKEND_MODULES = {"tensorflow": "tensorflow", "jax": "jax", "torch": "torch"}


class MissingExtraError(ImportError):
    """An optional package is not installed; the message names the extra."""


# The distribution's name (pyproject.toml): not PyPI's `keras-transformer`,
# an unrelated project that installs a `keras_transformer` package too.
DISTRIBUTION = "keras-nmt"


def install_command(extra: str) -> str:
    """The pip command that installs `extra` of this package: from the clone
    it is installed from (it is not published on a package index)."""
    return f"pip install -e '.[{extra}]' in the {DISTRIBUTION} clone"


def is_installed(module_name: str) -> bool:
    """Whether `module_name` can be imported (without importing it)."""
    try:
        return importlib.util.find_spec(module_name) is not None
    except (ImportError, ValueError):  # A parent missing, or a broken entry.
        return False


def require(
    module_name: str, extra: str | None = None, purpose: str | None = None
) -> ModuleType:
    """Import `module_name`, or raise MissingExtraError naming the extra.

    Args:
        module_name: what to import, e.g. ``"tensorflow"`` or
            ``"tensorflow_text"``.
        extra: the extra that installs it; by default the one EXTRAS lists
            for its top-level package.
        purpose: what needs it, for the message (``"SavedModel export"``).

    Raises:
        MissingExtraError: the module (or a package it needs) is missing.
    """
    top = module_name.partition(".")[0]
    extra = extra or EXTRAS.get(top)
    if extra is None:
        raise ValueError(f"No extra installs {module_name!r}; pass extra=.")
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        who = purpose or module_name
        raise MissingExtraError(
            f"{who} needs the {top} package ({error}). Install it with: "
            f"{install_command(extra)}"
        ) from error


def configured_backend() -> str:
    """The backend Keras will start, read as Keras reads it, without Keras:
    KERAS_BACKEND, else `backend` in $KERAS_HOME/keras.json (~/.keras), else
    Keras's default, tensorflow."""
    if os.environ.get("KERAS_BACKEND"):
        return os.environ["KERAS_BACKEND"]
    home = os.environ.get("KERAS_HOME") or Path.home() / ".keras"
    try:
        config = json.loads((Path(home) / "keras.json").read_text())
        return str(config.get("backend", "tensorflow"))
    except (OSError, ValueError, AttributeError):
        return "tensorflow"


def installed_backends() -> list[str]:
    """The Keras backends whose package is installed here."""
    return [name for name, module in BACKEND_MODULES.items() if is_installed(module)]


def check_backend_installed() -> None:
    """Fail early, with the extra to install, if Keras's backend is missing.

    Keras would otherwise fail deep inside its own import with a bare
    `No module named 'tensorflow'` (its default backend).
    """
    backend = configured_backend()
    chosen = (
        f"KERAS_BACKEND={backend}"
        if os.environ.get("KERAS_BACKEND")
        else f"Keras's backend is {backend} (its default: KERAS_BACKEND is not set)"
    )
    others = installed_backends()
    module = BACKEND_MODULES.get(backend)
    if module is None:  # numpy and openvino cannot train; anything else is no backend.
        installed = ", ".join(others) or "none"
        raise MissingExtraError(
            f"{chosen} is not a backend keras-transformer runs on: set "
            f"KERAS_BACKEND to one of {', '.join(BACKEND_MODULES)} "
            f"(installed here: {installed})."
        )
    if is_installed(module):
        return
    switch = (
        f", or use an installed backend: KERAS_BACKEND={others[0]}"
        if others
        else "; no backend is installed"
    )
    raise MissingExtraError(
        f"{chosen}, but the {module} package is not installed. Install it "
        f"with: {install_command(EXTRAS[module])}{switch}."
    )


def explain_missing(error: ModuleNotFoundError) -> MissingExtraError | None:
    """A MissingExtraError for `error` if the module it misses is an optional
    package of ours (for imports inside libraries we cannot wrap)."""
    top = (error.name or "").partition(".")[0]
    if top not in EXTRAS:
        return None
    return MissingExtraError(
        f"{error}: the {top} package is not installed. Install it with: "
        f"{install_command(EXTRAS[top])}"
    )


def tensorboard_callback(log_dir: str | os.PathLike):
    """Keras's TensorBoard callback writing to `log_dir`, or None (with a
    note on stderr) where TensorFlow is missing: Keras writes the logs
    through `tf.summary` on every backend."""
    if not is_installed("tensorflow"):
        print(
            "[keras-transformer] no TensorBoard logs: Keras writes them with "
            f"TensorFlow ({install_command('tensorflow')})",
            file=sys.stderr,
        )
        return None
    import keras

    return keras.callbacks.TensorBoard(log_dir=str(log_dir))
