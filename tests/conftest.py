"""Shared fixtures for the core-model tests."""

from __future__ import annotations

import gc
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
    directory (shared by the CLI subprocesses), never to the user's home.

    On JAX the whole session compiles through that cache, as the CLI does:
    the many tests that build the same small model and search compile each
    program once (a second 12-update `train` took 4.5 s instead of 12.7).
    TensorFlow's XLA cache is left to the CLI: a TensorFlow test's time is
    tracing, which no cache saves (test_generator.py: 77 s against 74)."""
    os.environ["KERAS_TRANSFORMER_CACHE"] = str(tmp_path_factory.mktemp("cache"))
    if keras.backend.backend() == "jax":
        from keras_transformer.decoding.compile import enable_compilation_cache

        enable_compilation_cache()


_last_module = [None]


def pytest_runtest_setup(item):
    """At each new test module: collect the garbage, then freeze what
    survives (the imported frameworks, session fixtures) out of later
    collections. Keras calls `gc.collect()` itself (clearing sessions,
    dropping variables) and Python collects the oldest generation as the
    heap grows; each full pass walked the ~400,000 objects TensorFlow and
    torch create at import and everything the suite kept, 0.2-0.3 s a
    pass: test_quantization.py and test_translator.py took 55 s with it and
    37 s frozen. The previous module's fixtures are finalized before this
    runs, so what is frozen is what the rest of the session keeps anyway."""
    module = item.module.__name__ if item.module else None
    if module != _last_module[0]:
        _last_module[0] = module
        gc.collect()
        gc.freeze()


# Test modules that do no Keras computation (text, tokenizers, corpora,
# batching plans, BLEU, settings, plots, atomic files, the HTTP server's
# batching and request checks), or whose subject does not run on the suite's
# backend (a CTranslate2 or SavedModel engine; the demo page in a browser,
# whose Keras engine test_server_keras.py tests on every backend; the
# cross-backend parity test, which starts a worker per backend whatever the
# suite): their results cannot depend on the backend. scripts/test.sh runs
# them in one suite only by setting KERAS_TRANSFORMER_NEUTRAL_SUITE to that
# suite's backend (torch: CI's shortest suite; the suites run side by side
# on 2 cores); without the variable every suite runs them.
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


def _neutral_suite(path: str, suite: str) -> str | None:
    """The suite a test module runs in: None for every suite."""
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
            f"backend-neutral modules run in the {suite} suite only "
            f"({NEUTRAL_SUITE}): deselected elsewhere"
        )
    return None
