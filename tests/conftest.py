"""Shared fixtures for the core-model tests."""

from __future__ import annotations

import os

import keras
import pytest


@pytest.fixture
def keras_state():
    """Fixed seed and float32 policy before a test; float32 again after it.

    Used by the core-model modules (`pytestmark`) and, through
    tests/layers/conftest.py, by every layer test.
    """
    keras.config.set_dtype_policy("float32")
    keras.utils.set_random_seed(1234)
    try:
        yield
    finally:
        keras.config.set_dtype_policy("float32")


def pytest_configure(config):
    # Raised inside Keras under NumPy 2 when Keras saves weights; not ours.
    config.addinivalue_line(
        "filterwarnings",
        "ignore:__array__ implementation doesn't accept a copy keyword"
        ":DeprecationWarning",
    )


@pytest.fixture(autouse=True, scope="session")
def _compilation_cache(tmp_path_factory):
    """The CLI's compilation caches go to the session's temporary
    directory (shared by the CLI subprocesses), never to the user's home."""
    os.environ["KERAS_TRANSFORMER_CACHE"] = str(tmp_path_factory.mktemp("cache"))
