"""Execute the notebooks top to bottom and store their outputs in place.

    .venv/bin/python scripts/execute_notebooks.py            # full settings
    .venv/bin/python scripts/execute_notebooks.py --quick    # CI's small settings
    .venv/bin/python scripts/execute_notebooks.py paper_ablations

Full settings train for real (about 15 minutes for the tutorial, 10 for the
JAX one and 25 for the ablations on a 2-core CPU); the committed notebooks
carry the outputs of such a run, so GitHub shows the plots, the training
log and the translations. Each notebook picks its backend in its first
cell; a KERAS_BACKEND in the environment wins, so `KERAS_BACKEND=torch`
before `scripts/execute_notebooks.py --quick transformer_translation` runs
the tutorial on PyTorch (NOTEBOOKS lists the backends each notebook is
tested on). Stops at the first error, naming the notebook and the cell.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[1]
# Simulated CPU devices share the cores with whatever else runs (CI runs both
# backends' suites side by side), and XLA aborts the process when a device
# thread misses an all-reduce for 40 s (its default): the kernel runs with a
# longer limit.
DEVICE_FLAG = "--xla_force_host_platform_device_count=2"
TIMEOUT_FLAG = "--xla_cpu_collective_call_terminate_timeout_seconds=600"
# The backends whose suite runs each notebook's quick mode. A notebook that
# picks its backend with os.environ.setdefault runs on the suite's: the
# tutorial and the parsing notebook are plain Keras 3 and this package's API
# (each call checked on every backend by the test modules), so CI runs them
# once, in the torch suite, the cheapest for small training runs, though
# their first cell's default (and their committed run) is TensorFlow. The
# JAX companion trains data-parallel with keras.distribution, which is JAX's;
# the ablations set KERAS_BACKEND=tensorflow themselves, in their kernel, so
# the suite that starts them changes nothing of what runs: the torch suite's
# lane, the shortest of CI's three, starts them.
NOTEBOOKS = {
    "transformer_translation": ("torch",),
    "transformer_translation_jax": ("jax",),
    "paper_ablations": ("torch",),
    "parsing_table4": ("torch",),
}
# The notebooks that choose their backend whatever the suite's is.
OWN_BACKENDS = {"paper_ablations": "tensorflow"}


def execute(
    name: str, *, quick: bool, output: Path | None = None, cell_timeout: int = 3600
) -> float:
    """Run notebooks/NAME.ipynb in a fresh kernel; write it (with outputs) to
    `output`, or in place. Returns the wall time in seconds."""
    path = ROOT / "notebooks" / f"{name}.ipynb"
    notebook = nbformat.read(path, as_version=4)
    os.environ["KERAS_TRANSFORMER_QUICK"] = "1" if quick else "0"
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    started = time.perf_counter()
    originals = [cell.source for cell in notebook.cells]
    for cell in notebook.cells:
        cell.source = cell.source.replace(DEVICE_FLAG, f"{DEVICE_FLAG} {TIMEOUT_FLAG}")
    with tempfile.TemporaryDirectory() as workdir:
        client = NotebookClient(
            notebook,
            timeout=cell_timeout,
            kernel_name="python3",
            resources={"metadata": {"path": workdir}},
        )
        try:
            client.execute()
        finally:
            for cell, source in zip(notebook.cells, originals):
                cell.source = source  # The stored notebook keeps its own code.
            nbformat.write(notebook, output or path)
    return time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", default=list(NOTEBOOKS))
    parser.add_argument("--quick", action="store_true", help="CI's small settings")
    parser.add_argument(
        "--cell-timeout",
        type=int,
        default=3600,
        help="seconds one cell may run (the full ablations train for hours)",
    )
    args = parser.parse_args(argv)
    unknown = sorted(set(args.names) - set(NOTEBOOKS))
    if unknown:
        parser.error(f"unknown notebooks {unknown}; expected some of {list(NOTEBOOKS)}")
    for name in args.names:
        seconds = execute(name, quick=args.quick, cell_timeout=args.cell_timeout)
        print(f"{name}: executed in {seconds / 60:.1f} min", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
