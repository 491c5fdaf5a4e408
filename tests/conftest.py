"""Shared fixtures for the core-model tests."""

from __future__ import annotations

import os

# Before Keras imports torch, which reads it once. torch's OpenMP threads
# meet at a barrier after every op, so on a busy machine each op waits for a
# free core: with the suites side by side on 2 cores, a (16, 64) x (64, 64)
# matmul took 2.3 ms with 2 threads and 3 us with 1, and the decoding tests
# ran 7x faster with one. Child processes (the CLI tests) inherit it.
if os.environ.get("KERAS_BACKEND") == "torch":
    os.environ.setdefault("OMP_NUM_THREADS", "1")

import keras  # noqa: E402
import pytest  # noqa: E402


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


# Test modules that do no Keras computation (text, tokenizers, corpora,
# batching plans, BLEU, settings, plots, atomic files, the HTTP server's
# batching and request checks), or whose subject does not run on the suite's
# backend (a CTranslate2 or SavedModel engine; the demo page in a browser,
# whose Keras engine test_server_keras.py tests on every backend): their
# results cannot depend on the backend. scripts/test.sh runs them in one suite only (CI
# runs three suites side by side on 2 cores and must end within an hour) by
# setting KERAS_TRANSFORMER_NEUTRAL_SUITE to that suite's backend; without
# the variable every suite runs them.
BACKEND_NEUTRAL = (
    "tests/data/",
    "tests/utils/test_atomic_files.py",
    "tests/utils/test_console.py",
    "tests/test_backend_parity.py",
    "tests/task/test_preset_backends.py",
    "tests/test_config.py",
    "tests/training/test_options.py",
    "tests/training/test_memory.py",
    "tests/test_layout.py",
    "tests/decoding/test_evaluation.py",
    "tests/test_plots.py",
    "tests/decoding/test_settings.py",
    "tests/serving/test_batcher.py",
    "tests/serving/test_requests.py",
    "tests/serving/test_engines.py",
    "tests/serving/test_server_ctranslate2.py",
    "tests/serving/test_demo_page.py",
    "tests/serving/test_documents.py",
    "tests/serving/test_observability.py",
    "tests/serving/test_http_protocol.py",
    "tests/parsing/test_linearize.py",
    "tests/parsing/test_evalb.py",
    "tests/parsing/test_evaluation.py",
    "tests/parsing/test_settings.py",
    "tests/cli/test_parsing_cli.py",
)
NEUTRAL_SUITE = "KERAS_TRANSFORMER_NEUTRAL_SUITE"
# The slowest neutral modules run in the torch suite instead, when the
# variable is set: it is CI's shortest (torch 1,059 s, JAX 2,784 s,
# TensorFlow 3,423 s in the last full run), and the suites run side by side.
NEUTRAL_ON_TORCH = ("tests/test_backend_parity.py", "tests/serving/test_demo_page.py")


def _neutral_suite(path: str, suite: str) -> str | None:
    """The suite a test module runs in: None for every suite."""
    if path.startswith(NEUTRAL_ON_TORCH):
        return "torch"
    return suite if path.startswith(BACKEND_NEUTRAL) else None


def pytest_collection_modifyitems(config, items):
    """Deselect the backend-neutral tests outside their suite (the closing
    line counts them as deselected; the header says why)."""
    suite = os.environ.get(NEUTRAL_SUITE)
    if not suite:
        return
    root = config.rootpath
    backend = keras.backend.backend()
    neutral = [
        item
        for item in items
        if _neutral_suite(item.path.relative_to(root).as_posix(), suite)
        not in (None, backend)
    ]
    if neutral:
        config.hook.pytest_deselected(items=neutral)
        chosen = set(map(id, neutral))
        items[:] = [item for item in items if id(item) not in chosen]


def pytest_report_header(config):
    suite = os.environ.get(NEUTRAL_SUITE)
    if suite:
        return (
            f"backend-neutral modules (no Keras computation) run in the {suite} "
            f"suite only, {', '.join(NEUTRAL_ON_TORCH)} in the torch suite "
            f"({NEUTRAL_SUITE}): deselected elsewhere"
        )
    return None
