"""Every layer test starts from a fixed seed and the float32 policy."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _keras_state(keras_state):
    yield
