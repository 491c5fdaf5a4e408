"""Shared fixtures: every test starts from float32 and a fixed seed."""

from __future__ import annotations

import keras
import pytest


@pytest.fixture(autouse=True)
def _float32_policy_and_seed():
    """Fixed seed before each test; float32 policy restored after it."""
    keras.config.set_dtype_policy("float32")
    keras.utils.set_random_seed(1234)
    try:
        yield
    finally:
        keras.config.set_dtype_policy("float32")


def pytest_configure(config):
    # Raised inside Keras/NumPy 2 when Keras saves weights; not ours to fix.
    config.addinivalue_line(
        "filterwarnings",
        "ignore:__array__ implementation doesn't accept a copy keyword"
        ":DeprecationWarning",
    )
