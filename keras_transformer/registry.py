"""The classes `.keras` files name, registered with Keras by importing them.

Keras finds a registered class only once its module is imported (it imports
keras* packages alone by itself), so `import keras_transformer` calls
`register_keras_objects`; the `keras-transformer` command calls it once a
command that needs Keras runs, so that `--help` starts no Keras.
"""

from __future__ import annotations

import importlib

from keras_transformer.utils import optional_imports

#: The modules whose classes `.keras` files name.
KERAS_MODULES = ("layers", "model", "losses", "metrics", "schedules")


def register_keras_objects() -> None:
    """Import the modules of `KERAS_MODULES`. Importing Keras starts its
    backend: a missing one is named with the extra that installs it."""
    optional_imports.check_backend_installed()
    try:
        for module in KERAS_MODULES:
            importlib.import_module(f"keras_transformer.{module}")
    except ModuleNotFoundError as error:
        explained = optional_imports.explain_missing(error)
        if explained is None:
            raise
        raise explained from error
