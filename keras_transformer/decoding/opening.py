"""One way to open a model for decoding: a run, a preset or a `.keras` file.

`translate`, `evaluate`, `parse` and `serve`'s Keras engine all open their
model here, so a source is read, checked, quantized and joined to an
ensemble the same way wherever it is served:

- a run directory: its tokenizer and model (`model`: a `.keras` file of the
  run, else the final model, else the newest checkpoint), refused when the
  run learned another task; a parsing run whose targets hold the words
  searches with UNK allowed (its targets spell rare words `<unk>`);
- a preset directory (keras-hub's layout, `run.preset_files`): its model,
  tokenizer and weights; it holds one model, so `model` and `ensemble` are
  refused;
- a `.keras` file inside a run (`RUN/model.keras`,
  `RUN/checkpoints/ckpt-N.keras`): that model with that run's tokenizer.

`quantize` ("int8") converts the model in place before anything compiles;
`ensemble` names more models that decode with it (`decoding.ensemble`).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from keras_transformer.decoding.quantization import quantize_model
from keras_transformer.decoding.settings import SearchSettings, WeightOptions
from keras_transformer.run import preset_files
from keras_transformer.run.directory import InferenceRun, RunDirectory

KINDS = ("run", "preset", "model file")


@dataclasses.dataclass
class OpenedModel:
    """A model ready to decode, with what it decodes with."""

    model: Any
    """The `Transformer` (quantized when asked), or an `Ensemble` of it and
    the `ensemble` members."""
    tokenizer: Any
    settings: SearchSettings
    """The search settings asked for, with what the model needs."""
    kind: str
    """Which of `KINDS` the source was."""
    path: Path
    """The model file, or the preset's weights."""
    config: Any
    """The (main) model's `TransformerConfig`."""
    run: InferenceRun | None = None
    """The run the model came from (None for a preset)."""

    @property
    def name(self) -> str:
        """The run's or the preset's directory name (not its path)."""
        return (self.run.run.path if self.run else self.path.parent).name


def open_model(
    source: str | os.PathLike,
    *,
    model: str | os.PathLike | None = None,
    settings: SearchSettings | None = None,
    quantize: str | None = None,
    ensemble: Sequence[str | os.PathLike] = (),
    task: str = "translation",
    kind: str | None = None,
) -> OpenedModel:
    """Open `source` (a run, a preset or a `.keras` file) for decoding.

    Args:
        source: the run directory, preset directory or `.keras` file.
        model: a `.keras` file of the run to use instead of its final model.
        settings: the search settings asked for (default: the paper's).
        quantize: None or "int8" (`quantization.quantize_model`).
        ensemble: more runs or `.keras` files decoding with the model.
        task: what the caller decodes ("translation" or "parsing"); a run
            trained for the other is refused, naming the command to use.
        kind: one of `KINDS` when the caller was told which (`--preset`:
            a run directory there is refused, naming how to export it);
            None: recognised by its files.

    Raises:
        FileNotFoundError, ValueError: naming the path and what was expected.
    """
    WeightOptions(quantize)  # An unknown mode is refused before any loading.
    settings = SearchSettings() if settings is None else settings
    path = Path(source)
    if kind is not None and kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS} or None. Received: {kind!r}")
    if kind == "preset" or (
        kind is None and (path / preset_files.METADATA_FILE).is_file()
    ):
        return _open_preset(path, settings, quantize, model, ensemble)
    if kind != "run" and path.is_file() and path.suffix == ".keras":
        if model is not None:
            raise ValueError(f"{path} and --model {model} both name a model: pass one.")
        run_dir, model = _run_of_model_file(path), path
        kind = "model file"
    else:
        run_dir, kind = RunDirectory(path), "run"
    check_task(run_dir, task)
    if run_dir.tree_words:  # Its targets hold <unk> for rare words.
        settings = settings.replace(allow_unk=True)
    run = run_dir.open_for_inference(model)
    decoder = quantize_model(run.model, quantize)
    if ensemble:
        from keras_transformer.decoding.ensemble import open_ensemble

        decoder = open_ensemble(run, list(ensemble), model=decoder, quantize=quantize)
    return OpenedModel(
        decoder, run.tokenizer, settings, kind, run.model_path, run.model.config, run
    )


def open_huggingface(directory: str | os.PathLike):
    """A local MarianMT checkpoint (transformers' format, OPUS-MT) as this
    package's model, built and loaded (`run.huggingface_import`): (the
    `Transformer`, the `MarianCheckpoint` with its tokenizer and search
    fields). Nothing is downloaded."""
    from keras_transformer.model import build_transformer
    from keras_transformer.run.huggingface_import import read_marian

    checkpoint = read_marian(directory)
    backbone = build_transformer(checkpoint.config)
    checkpoint.load_into(backbone)
    return backbone, checkpoint


def _open_preset(path, settings, quantize, model, ensemble) -> OpenedModel:
    from keras_transformer.model import build_transformer

    for flag, value in (("--model", model), ("--ensemble", ensemble)):
        if value:
            raise ValueError(
                f"{flag} is for a run: the preset {path} holds one model "
                "(export the runs you want to combine, or pass --run-dir)."
            )
    contents = preset_files.read_preset(path)
    backbone = build_transformer(contents.config)
    preset_files.load_weights(backbone, contents)
    decoder = quantize_model(backbone, quantize)
    return OpenedModel(
        decoder,
        contents.tokenizer,
        settings,
        "preset",
        contents.weights_path,
        backbone.config,
    )


def _run_of_model_file(path: Path) -> RunDirectory:
    """The run a `.keras` file belongs to (`ensemble.run_holding`'s rule)."""
    from keras_transformer.decoding.ensemble import run_holding

    run = run_holding(path)
    if run is None:
        raise ValueError(
            f"{path} is in no run directory (RUN/model.keras or "
            "RUN/checkpoints/ckpt-N.keras, with RUN/tokenizer/): its tokenizer "
            "is unknown. Pass the run with --run-dir and the file with --model."
        )
    return run


def check_task(run: RunDirectory, task: str) -> None:
    """Refuse a run trained for another task (its output would be nonsense)."""
    trained = run.task
    if trained is not None and trained != task:
        command = {"translation": "translate", "parsing": "parse"}.get(trained)
        advice = f": use keras-transformer {command} with it" if command else ""
        raise ValueError(
            f"{run.path} was trained for {trained} (its manifest says so), not "
            f"{task}{advice}."
        )
