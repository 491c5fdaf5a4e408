"""Which exporter writes the format `ExportOptions` names: `export_run`.

Each exporter loads on first use, so `export --format onnx` loads no
TensorFlow and `--format savedmodel` no torch.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from keras_transformer.decoding.settings import SearchSettings
from keras_transformer.export.options import (
    DEFAULT_MAX_POSITIONS,
    HF_MAX_POSITIONS,
    ExportOptions,
)
from keras_transformer.run.preset_files import METADATA_FILE


def export_run(
    run_dir: str | os.PathLike,
    options: ExportOptions,
    settings: SearchSettings,
    *,
    model: str | os.PathLike | None = None,
    command: str | None = None,
    card: dict | None = None,
) -> str:
    """Write the export `options` asks for of the run in `run_dir` (its
    `model` file, else its final model) with the search `settings`; returns
    a line that says where it is and how to use it. A preset directory in
    `run_dir` is exported as the run it was made from (its model and
    tokenizer, written to a temporary run first). `command` (the command
    line) and `card` (fields such as "source", "training_data") go into a
    model card."""
    if (Path(run_dir) / METADATA_FILE).is_file():
        return _export_preset_directory(
            Path(run_dir), options, settings, model, command
        )
    out = options.out
    if options.format == "ctranslate2":
        from keras_transformer.export.ctranslate2 import export_ctranslate2

        path = export_ctranslate2(
            run_dir,
            out,
            settings,
            model=model,
            quantization=options.quantization,
            max_positions=options.max_positions or DEFAULT_MAX_POSITIONS,
        )
        return (
            f"CTranslate2 model written to {path} (how to call it: {path}/export.json)"
        )
    if options.format == "onnx":
        from keras_transformer.export.onnx import export_onnx

        path = export_onnx(
            run_dir, out, settings, model=model, quantization=options.quantization
        )
        return (
            f"ONNX graphs written to {path} (translate --onnx {path}, serve "
            f"--engine onnx --export-dir {path}; see {path}/export.json)"
        )
    if options.format == "huggingface":
        from keras_transformer.export.huggingface import export_huggingface

        path = export_huggingface(
            run_dir,
            out,
            settings,
            model=model,
            max_positions=options.max_positions or HF_MAX_POSITIONS,
            card={"command": command, **(card or {})},
        )
        return (
            f"MarianMT checkpoint written to {path} (MarianMTModel.from_pretrained; "
            f"how to call it: {path}/README.md)"
        )
    if options.format == "preset":
        from keras_transformer.export.preset import export_preset

        path = export_preset(run_dir, out, settings, model=model)
        return f"Preset written to {path} (TransformerSeq2SeqLM.from_preset, --preset)"
    from keras_transformer.export.savedmodel import export_translator

    # int8, or float32 (the default) as None; others refused, named.
    quantize = None if options.quantization == "float32" else options.quantization
    path = export_translator(run_dir, out, settings, model=model, quantize=quantize)
    return f"SavedModel written to {path} (signatures: see {path}/assets/export.json)"


def _export_preset_directory(
    preset: Path,
    options: ExportOptions,
    settings: SearchSettings,
    model: str | os.PathLike | None,
    command: str | None,
) -> str:
    if model is not None:
        raise ValueError(
            f"--model {model} is for a run: {preset} is a preset, which holds one "
            "model (leave --model out to export it)."
        )
    from keras_transformer.export.preset import preset_as_run

    metadata = json.loads((preset / METADATA_FILE).read_text(encoding="utf-8"))
    card = {"source": str(preset), "training_data": metadata.get("training_data")}
    with tempfile.TemporaryDirectory(prefix="keras-transformer-preset-") as scratch:
        run = preset_as_run(preset, Path(scratch) / "run")
        return export_run(run, options, settings, command=command, card=card)
