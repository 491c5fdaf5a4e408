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
# Nothing is downloaded at run time: `transformers` given a path that does not
# exist asks the Hugging Face Hub, and without a network each call waited out
# its timeouts (280 s for one snippet); offline, it fails at once.
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import keras  # noqa: E402
import pytest  # noqa: E402

from tests import shared_runs  # noqa: E402


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


# The shared runs made so far: fixture name -> (directory, digest).
_shared = {}


@pytest.fixture(scope="session")
def untrained_run(tmp_path_factory):
    """The session's untrained run (tests/shared_runs.py); read-only."""
    run = shared_runs.make_untrained_run(tmp_path_factory.mktemp("untrained") / "run")
    _shared["untrained_run"] = (run, shared_runs.digest(run))
    return run


@pytest.fixture(scope="session")
def trained_run(tmp_path_factory):
    """The session's trained run (tests/shared_runs.py), trained once on the
    suite's backend; read-only."""
    run = shared_runs.make_trained_run(tmp_path_factory.mktemp("trained"))
    _shared["trained_run"] = (run, shared_runs.digest(run))
    return run


@pytest.fixture(autouse=True)
def _shared_runs_stay_unchanged(request):
    """After a test that used a shared run, directly or through another
    fixture: fail naming what it changed there."""
    yield
    for name in request.fixturenames:
        if name in _shared:
            shared_runs.assert_unchanged(*_shared[name], request.node.nodeid)


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


NEUTRAL_SUITE = "KERAS_TRANSFORMER_NEUTRAL_SUITE"


def pytest_collection_modifyitems(config, items):
    """Deselect the tests marked `backend_neutral` outside the suite that
    KERAS_TRANSFORMER_NEUTRAL_SUITE names (the closing line counts them as
    deselected; the header says why).

    A test or module is marked so when its result cannot depend on the
    suite's backend: it does no Keras computation (text, tokenizers, corpora,
    settings, the HTTP server's batching), its subject runs on another
    engine (SavedModel, CTranslate2, ONNX, a browser), it starts a worker
    per backend itself (the parity test), or it is an end-to-end flow whose
    code is the same on every backend (command-line plumbing, the serving
    protocol, documentation snippets) and whose Keras computation the
    per-backend tests already check. scripts/test.sh names the torch suite,
    CI's shortest; without the variable every suite runs every test.
    """
    suite = os.environ.get(NEUTRAL_SUITE)
    if not suite or keras.backend.backend() == suite:
        return
    neutral = [item for item in items if item.get_closest_marker("backend_neutral")]
    if neutral:
        config.hook.pytest_deselected(items=neutral)
        chosen = set(map(id, neutral))
        items[:] = [item for item in items if id(item) not in chosen]


def pytest_report_header(config):
    suite = os.environ.get(NEUTRAL_SUITE)
    if suite:
        return (
            f"tests marked backend_neutral run in the {suite} suite only "
            f"({NEUTRAL_SUITE}): deselected elsewhere"
        )
    return None
