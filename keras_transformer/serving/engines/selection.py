"""Which engine `serve` runs: `open_engine`, with the checks of its flags."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from keras_transformer.decoding.settings import SearchSettings, WeightOptions
from keras_transformer.serving.engines.base import Engine
from keras_transformer.serving.options import ENGINES, QUANTIZING_ENGINES

# Each engine's module is imported when it is chosen: the ONNX and
# CTranslate2 engines serve an export on an install without any Keras
# backend (`cli.needs_keras`), and the Keras engine's modules import Keras.


def open_engine(
    name: str,
    run_dir: str | os.PathLike,
    settings: SearchSettings,
    *,
    model: str | os.PathLike | None = None,
    export_dir: str | os.PathLike | None = None,
    scratch: Path,
    batch_size: int,
    threads: int,
    workers: int = 1,
    quantize: str | None = None,
    ensemble: Sequence[str] = (),
) -> Engine:
    """The engine `name` for the run in `run_dir`.

    CTranslate2 and SavedModel read `export_dir` when given, else export
    the run (with `model`, with `settings`) into `scratch` first. `quantize`
    ("int8"): Keras's int8 weights (keras) or CTranslate2's (ctranslate2).
    `ensemble`: models decoding with the run's (`decoding.ensemble`), Keras
    engine only.
    """
    if name not in ENGINES:
        raise ValueError(f"--engine must be one of {', '.join(ENGINES)}: {name!r}")
    WeightOptions(quantize)  # An unknown mode is refused before any loading.
    if quantize is not None and name not in QUANTIZING_ENGINES:
        raise ValueError(
            f"--quantize applies to --engine {' or '.join(QUANTIZING_ENGINES)}; "
            f"--engine {name} runs the weights its export holds."
        )
    if ensemble and name != "keras":
        raise ValueError(
            f"--ensemble needs --engine keras; --engine {name} runs one export."
        )
    if name == "keras":
        from keras_transformer.decoding.opening import open_model
        from keras_transformer.serving.engines.keras_engine import KerasEngine

        if export_dir is not None:
            raise ValueError(
                "--export-dir is for --engine ctranslate2, savedmodel or onnx."
            )
        opened = open_model(
            run_dir,
            model=model,
            settings=settings,
            quantize=quantize,
            ensemble=ensemble,
        )
        return KerasEngine(opened, batch_size, quantize, ensemble)
    if export_dir is None:
        export_dir = _export(name, run_dir, settings, model, scratch / name)
    elif model is not None:
        raise ValueError("--model and --export-dir both name the weights: pass one.")
    if name == "ctranslate2":
        from keras_transformer.serving.engines.ctranslate2_engine import (
            CTranslate2Engine,
        )

        return CTranslate2Engine(Path(export_dir), settings, threads, workers, quantize)
    if name == "onnx":
        from keras_transformer.serving.engines.onnx_engine import OnnxEngine

        return OnnxEngine(Path(export_dir), settings, threads, batch_size)
    from keras_transformer.serving.engines.savedmodel_engine import SavedModelEngine

    return SavedModelEngine(Path(export_dir), settings)


def _export(name: str, run_dir, settings, model, out: Path) -> Path:
    from keras_transformer import export

    if name == "ctranslate2":
        return export.export_ctranslate2(run_dir, out, settings, model=model)
    if name == "onnx":
        return export.export_onnx(run_dir, out, settings, model=model)
    return export.export_translator(run_dir, out, settings, model=model)
