"""What every export target shares: the run, the output, the export record.

The run it exports, the directory it writes, the record of what was
exported, and the child process an export runs in when it needs another
Keras backend than this process's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from keras_transformer.decoding.settings import SearchSettings
from keras_transformer.run.directory import InferenceRun, RunDirectory
from keras_transformer.run.preset_files import weights_bytes
from keras_transformer.utils.atomic_files import WriteFailed, atomic_directory
from keras_transformer.utils.version import __version__

# Bytes per stored weight by the export's number type: what the free-space
# check before an export asks for (its weights; the rest is small).
_BYTES_PER_WEIGHT = {None: 4, "float32": 4, "float16": 2, "bfloat16": 2, "int16": 2}


def check_out(out: Path) -> None:
    """An export never replaces anything: `out` must not exist, or be empty."""
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise FileExistsError(
            f"--out {out} already exists and is not empty; choose another path "
            "or remove it."
        )


def open_run(
    run_dir: str | os.PathLike,
    out: Path,
    model: str | os.PathLike | None,
    *,
    load_model: bool,
) -> InferenceRun:
    """Everything checked before anything is written: the output directory,
    then the run (see `RunDirectory.open_for_inference`)."""
    check_out(out)
    return RunDirectory(run_dir).open_for_inference(model, load_model=load_model)


def write_export(
    run: InferenceRun,
    out: Path,
    write: Callable[[Path], None],
    *,
    what: str,
    quantization: str | None = None,
) -> None:
    """`write` the export of `run` into a staging directory renamed to `out`
    once whole (`atomic_directory`), after a check that the disk has room
    for the model's weights in the export's number type (`quantization`:
    None or float32, float16 or bfloat16, or an int8 kind at one byte); a
    full disk is a `WriteFailed` naming `what` and `out`."""
    per_weight = _BYTES_PER_WEIGHT.get(quantization, 1)
    # A run opened without its model (its export loads it in a child, which
    # checks there) has no weights to count here.
    weights = 0 if run.model is None else weights_bytes(run.model)
    needed = weights * per_weight // 4
    atomic_directory(out, write, needed_bytes=needed, what=what)


def export_record(
    run: InferenceRun, settings: SearchSettings, **fields: Any
) -> dict[str, Any]:
    """The fields every target's `export.json` starts with."""
    return {
        "package_version": __version__,
        "model": run.model_path.name,
        "tokenizer": run.tokenizer.kind,
        "vocab_size": run.tokenizer.vocab_size,
        **fields,
        **settings.to_dict(),
    }


#: The errors an export's child process reports by name on its last line of
#: stderr, raised again as the same kind here (anything else: RuntimeError).
CHILD_ERRORS = {
    error.__name__: error
    for error in (
        ValueError,
        FileNotFoundError,
        FileExistsError,
        ImportError,
        RuntimeError,
    )
}


def export_in_child(module: str, request: dict[str, Any], backend: str) -> None:
    """Run ``python -m module REQUEST`` under KERAS_BACKEND=`backend` (a
    run's `.keras` weights load on any backend), the module's `child_main`
    answering; its error is raised here as the same kind, with its message."""
    env = dict(os.environ, KERAS_BACKEND=backend)
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    result = subprocess.run(
        [sys.executable, "-m", module, json.dumps(request)],
        env=env,
        capture_output=True,
        text=True,
    )
    if result.returncode == 0:
        return
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    raise child_error(
        lines[-1] if lines else f"exit status {result.returncode}", backend
    )


def child_error(last_line: str, backend: str) -> Exception:
    """The error the child's last line of stderr reports: the same kind and
    message for a known one (`child_main`), else a RuntimeError quoting it."""
    kind, _, message = last_line.partition(": ")
    if kind == WriteFailed.__name__:  # A full disk: exit 74, as in-process.
        return WriteFailed.from_json(message)
    if kind in CHILD_ERRORS:  # The child's own clear message.
        return CHILD_ERRORS[kind](message)
    return RuntimeError(f"The export under {backend} failed: {last_line}")


def child_main(argv: list[str], export: Callable[[dict[str, Any]], object]) -> int:
    """The child's side of `export_in_child`: `export(request)`, and a
    known error as "Kind: message" on stderr's last line (exit status 2)."""
    try:
        export(json.loads(argv[0]))
    except WriteFailed as error:
        print(f"{WriteFailed.__name__}: {error.to_json()}", file=sys.stderr)
        return 2
    except tuple(CHILD_ERRORS.values()) as error:
        name = next(n for n, kind in CHILD_ERRORS.items() if isinstance(error, kind))
        message = str(error).replace("\n", " ")
        print(f"{name}: {message}", file=sys.stderr)
        return 2
    return 0
