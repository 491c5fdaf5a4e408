"""Which process is the `keras-transformer` command (its package import
defers registering with Keras, so that `--help` starts no Keras)."""

from __future__ import annotations

import sys

import pytest

from keras_transformer.utils import console

pytestmark = pytest.mark.backend_neutral


@pytest.mark.parametrize(
    "argv0, orig_argv, expected",
    [
        ("/usr/bin/keras-transformer", ["keras-transformer", "train"], True),
        ("-m", ["python", "-m", "keras_transformer", "train"], True),
        # A child the package starts (the SavedModel export runs one): it
        # loads model.keras, so its import must register the classes.
        ("-m", ["python", "-m", "keras_transformer.export.savedmodel", "{}"], False),
        ("-m", ["python", "-m", "pytest"], False),
        ("script.py", ["python", "script.py"], False),
    ],
)
def test_only_the_command_itself_is_the_command_line(
    monkeypatch, argv0, orig_argv, expected
):
    monkeypatch.setattr(sys, "argv", [argv0, *orig_argv[2:]])
    monkeypatch.setattr(sys, "orig_argv", orig_argv)
    assert console.is_command_line() is expected
