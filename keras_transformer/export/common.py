"""What every export target shares: the run, the output, the export record.

The run it exports, the directory it writes, and the record of what was
exported.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from keras_transformer.decoding.settings import SearchSettings
from keras_transformer.run.directory import InferenceRun, RunDirectory
from keras_transformer.version import __version__


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
