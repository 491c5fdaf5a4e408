"""A second process that holds a run directory's lock, for the lock tests."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from pathlib import Path

_HOLD = """
import sys
from keras_transformer.run.directory import RunLock, RunDirectory
run = RunDirectory(sys.argv[1])
lock = RunLock(run.lock_path, run.path).acquire()
print("locked", flush=True)
sys.stdin.read()  # Hold it until the parent closes our stdin.
"""


@contextlib.contextmanager
def run_directory_locked_by_child(run_dir: Path):
    """Yield a child process (`Popen`) that holds `run_dir`'s lock; it exits
    when the block ends."""
    repo = Path(__file__).resolve().parents[2]
    env = {
        **os.environ,
        "PYTHONPATH": f"{repo}{os.pathsep}" + os.environ.get("PYTHONPATH", ""),
    }
    child = subprocess.Popen(
        [sys.executable, "-c", _HOLD, str(run_dir)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=env,
        text=True,
    )
    try:
        line = child.stdout.readline()
        if line.strip() != "locked":
            raise RuntimeError(f"the child process did not take the lock: {line!r}")
        yield child
    finally:
        child.stdin.close()
        child.wait(timeout=60)
