"""Runs and presets, each written as the other (preset layout: `run.preset_files`).

A trained run as a preset directory in keras-hub's layout, and a preset as
a run directory for what reads runs (`serve`'s engines). Neither builds the
task (`TransformerSeq2SeqLM`): both are files of a model, its tokenizer and
settings, written through `run.preset_files` as the task's
`save_to_preset` writes them and `from_preset` reads them.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from keras_transformer.decoding.settings import SearchSettings
from keras_transformer.export.common import open_run
from keras_transformer.run import preset_files


def export_preset(
    run_dir: str | os.PathLike,
    out: str | os.PathLike,
    settings: SearchSettings,
    *,
    model: str | os.PathLike | None = None,
) -> Path:
    """Write the run's model (`model`, else the final model, else the newest
    checkpoint) with its tokenizer, `settings` and the run's batch settings
    as a preset in `out` (which must not exist, or be empty)."""
    run = open_run(run_dir, Path(out), model, load_model=True)
    manifest = run.run.manifest() or {}
    options = manifest.get("options", {})
    batching = {
        name: options[name]
        for name in preset_files.PREPROCESSOR_FIELDS
        if isinstance(options.get(name), int) and not isinstance(options[name], bool)
    }
    return preset_files.write_preset(
        out,
        run.model,
        run.tokenizer,
        batching,
        settings.to_dict(),
        training_data=training_data(manifest),
    )


def training_data(manifest: dict[str, Any]) -> str | None:
    """The corpus of a run's manifest in words, or None if it names none."""
    data = manifest.get("identity", {}).get("data")
    if not isinstance(data, dict) or not data.get("name"):
        return None
    name = data["name"]
    where = {
        "builtin": f"{data.get('builtin_size')} generated pairs, seed "
        f"{data.get('builtin_seed')}",
        "files": ", ".join(
            f"{split}: {' | '.join(paths)}" for split, paths in data["files"].items()
        )
        if isinstance(data.get("files"), dict)
        else None,
    }.get(name, data.get("data_dir"))
    fingerprint = data.get("fingerprint")
    parts = [name, f"({where})" if where else None]
    parts.append(f"fingerprint {fingerprint[:12]}" if fingerprint else None)
    return " ".join(part for part in parts if part)


def preset_as_run(preset: str | os.PathLike, directory: str | os.PathLike) -> Path:
    """Write the preset's model and tokenizer as a run directory in
    `directory` (`model.keras` and `tokenizer/`), for what reads runs: the
    same weights, so the same translations."""
    from keras_transformer.decoding.opening import open_model

    opened = open_model(preset, kind="preset")
    run = Path(directory)
    opened.tokenizer.save(run / "tokenizer")
    opened.model.save(run / "model.keras")
    return run
