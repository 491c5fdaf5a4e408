"""A second process that holds a run directory's lock, for the lock tests.

The holder is a fork of the test process: it takes the lock with the
package's `RunLock` and waits, touching no framework (a fresh Python that
imports the package and its backend cost 3-10 s per test, for a `flock`).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
import warnings
from pathlib import Path

from keras_transformer.run.directory import RunDirectory, RunLock


class LockHolder:
    """The child process (as much of `subprocess.Popen` as the tests use)."""

    def __init__(self, pid: int):
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(f"lock holder {self.pid}", timeout)
            time.sleep(0.01)
        return self.returncode

    def kill(self) -> None:
        if self.poll() is None:
            os.kill(self.pid, signal.SIGKILL)


def _hold(lock: RunLock, ready: int, release: int) -> None:
    """In the child: take the lock, say so, hold it until `release` ends."""
    code = 1
    try:
        lock.acquire()
        os.write(ready, b"locked\n")
        os.read(release, 1)  # End of file: the parent closed its end.
        code = 0
    finally:
        os._exit(code)  # Never back into pytest.


@contextlib.contextmanager
def run_directory_locked_by_child(run_dir: Path):
    """Yield a child process (`LockHolder`: pid, kill, wait) that holds
    `run_dir`'s lock; it exits when the block ends."""
    run = RunDirectory(run_dir)
    lock = RunLock(run.lock_path, run.path)
    ready_read, ready_write = os.pipe()
    release_read, release_write = os.pipe()
    with warnings.catch_warnings():
        # JAX warns at every fork of a process that has used it; the child
        # runs no JAX (nor any other framework), only `RunLock`.
        warnings.filterwarnings("ignore", "os.fork", RuntimeWarning)
        pid = os.fork()
    if pid == 0:
        os.close(ready_read)
        os.close(release_write)
        _hold(lock, ready_write, release_read)
    os.close(ready_write)
    os.close(release_read)
    child = LockHolder(pid)
    try:
        with os.fdopen(ready_read, "rb") as ready:
            line = ready.readline()
        if line.strip() != b"locked":
            raise RuntimeError(f"the child process did not take the lock: {line!r}")
        yield child
    finally:
        os.close(release_write)
        child.wait(timeout=60)
