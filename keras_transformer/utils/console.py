"""The command line's console: exit statuses, progress lines, a quiet start-up.

Imports nothing heavy. `keras_transformer.cli` calls `quiet_native_start_up`
before it imports Keras, because importing Keras (with JAX, it loads
TensorFlow too) prints native start-up lines before any Python code of the
command runs.
"""

from __future__ import annotations

import atexit
import os
import re
import sys
import threading
import time
from collections.abc import Callable

EXIT_WRITE_FAILED = 74  # sysexits EX_IOERR: a write failed (a full disk).
EXIT_INTERRUPTED = 75  # sysexits EX_TEMPFAIL: stopped cleanly, run it again.


def log(message: str) -> None:
    """A progress line of `train` and `prepare` on stdout."""
    print(f"[keras-transformer] {message}", flush=True)


# Lines native code prints while TensorFlow and JAX start, whatever
# TF_CPP_MIN_LOG_LEVEL says: CUDA probing on a machine without a GPU, absl's
# notice that it logs before it is initialised, oneDNN's notice. And two
# error-level lines TensorFlow logs on every hit of its XLA compilation cache
# (see `compile.enable_compilation_cache`), both harmless: it tries the entry
# as text before it reads it as binary, and it lists two tuning flags of the
# compiled code as features the CPU lacks.
_installed = False
_START_UP_NOISE = re.compile(
    rb"cudart_stub\.cc|cuda_platform\.cc|cuda_(dnn|blas|fft)\.cc|"
    rb"absl::InitializeLog|Unable to register cu(DNN|FFT|BLAS) factory|"
    rb"computation_placer\.cc|TF-TRT Warning|oneDNN custom operations are on|"
    rb"Error parsing text-format tensorflow\.XlaSerializedCacheEntry|"
    rb"Target machine feature \+prefer-no-(gather|scatter) is not +supported"
)


def quiet_native_start_up() -> None:
    """Drop the native start-up lines from stderr (everything else passes).

    Only when TF_CPP_MIN_LOG_LEVEL is 2 or more, which the command sets
    unless the user chose a level: set it to 0 or 1 to see them.
    """
    global _installed
    if _installed:
        return
    _installed = True
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if os.environ["TF_CPP_MIN_LOG_LEVEL"] < "2":
        return
    read_end, write_end = os.pipe()
    original = os.dup(2)
    os.dup2(write_end, 2)
    os.close(write_end)

    def forward() -> None:
        with os.fdopen(read_end, "rb", buffering=0) as pipe:
            for line in iter(pipe.readline, b""):
                if not _START_UP_NOISE.search(line):
                    os.write(original, line)

    thread = threading.Thread(target=forward, name="stderr-filter", daemon=True)
    thread.start()

    def restore() -> None:
        sys.stderr.flush()
        os.dup2(original, 2)  # Closes the pipe: the thread sees its end.
        thread.join(timeout=5)

    atexit.register(restore)


def is_command_line() -> bool:
    """Whether this process is `keras-transformer` or `python -m
    keras_transformer` (while the package is being imported)."""
    name = os.path.basename(sys.argv[0]) if sys.argv else ""
    if name == "-m":  # `python -m M` while M's packages import: M itself?
        argv = getattr(sys, "orig_argv", [])
        module = argv[argv.index("-m") + 1] if "-m" in argv[:-1] else ""
        return module == "keras_transformer"
    return name == "keras-transformer"


PROGRESS_SECONDS = 30


class Progress:
    """A line every half minute while a long pass over a corpus runs
    (`prepare`'s sampling and encoding)."""

    def __init__(self, log: Callable[[str], None], what: str) -> None:
        self._log, self._what = log, what
        self._started = self._last = time.monotonic()
        self.pairs = 0

    def add(self, pairs: int) -> None:
        self.pairs += pairs
        now = time.monotonic()
        if now - self._last >= PROGRESS_SECONDS:
            self._last = now
            rate = self.pairs / (now - self._started)
            self._log(f"{self._what}: {self.pairs:,} pairs read ({rate:,.0f}/s)")
