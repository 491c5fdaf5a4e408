"""Export a trained run as a text-in, text-out TensorFlow SavedModel.

The SavedModel serves without this package (TensorFlow and tensorflow-text
alone; TensorFlow 2.21 imports Keras itself when it is installed, but the
SavedModel uses none of it): tokenization, the KV-cached search (compiled
with XLA) and detokenization are all TensorFlow graph ops. Its signatures:

- ``translate``: ``text`` tf.string[batch] -> ``translation`` tf.string[batch]
  and ``score`` float32[batch], the length-normalised log-probability of the
  hypothesis (beam) or its total log-probability (greedy).
- ``translate_ids``: ``source_ids`` int32[batch, length] (padded with 0, no
  BOS/EOS) -> ``target_ids`` int32[batch, length] (up to and including EOS,
  then 0) and ``score``. For servers that tokenize outside the graph.
- ``nbest`` (beam search only): ``text`` -> ``translations`` tf.string[batch,
  k] and ``scores`` float32[batch, k], best first.
- ``info``: no inputs; the export's fixed settings as constants.

The settings (beam size, alpha, the length limit, the vocabulary, the package
version) are fixed at export time and written to ``assets/export.json``.

The route from any backend: the run's ``.keras`` file holds backend-neutral
weights, so a run trained with JAX or torch is rebuilt under TensorFlow in a child
process and exported from there, exactly as a TensorFlow run is. (jax2tf
would have to convert a data-dependent while loop over dynamic shapes and
could not hold the tensorflow-text ops at all.)

``translate`` needs the tensorflow-text ops registered before loading::

    import tensorflow as tf
    import tensorflow_text  # noqa: F401 - registers the tokenizer ops
    translator = tf.saved_model.load("exported")
    translator.signatures["translate"](text=tf.constant(["The dog sleeps."]))

The ids-only signature is also written on its own to ``ids_only/`` (a second
SavedModel without tensorflow-text ops), because TensorFlow loads every
function of a SavedModel and fails on the first unregistered op.

Inputs are processed as `Translator` processes them: no truncation (sinusoidal
positions have no length limit), a blank string gives "", and sources are
padded to a multiple of 8 tokens and batches to a power of two, so XLA
compiles a small set of shapes (each new one once, at its first request).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from keras_transformer.decoding.settings import SearchSettings, search_settings
from keras_transformer.export.common import (
    child_main,
    export_in_child,
    export_record,
    open_run,
    write_export,
)
from keras_transformer.export.reading import EXPORT_INFO, tokenizer_path
from keras_transformer.run.directory import InferenceRun, RunDirectory
from keras_transformer.utils.optional_imports import install_command

IDS_ONLY = "ids_only"
SIGNATURES = ("translate", "translate_ids", "nbest", "info")


def export_translator(
    run_dir: str | os.PathLike,
    out: str | os.PathLike,
    settings: SearchSettings | None = None,
    *,
    model: str | os.PathLike | None = None,
    quantize: str | None = None,
    **changes,
) -> Path:
    """Export the run in `run_dir` as a SavedModel at `out` (see module doc).

    Args:
        run_dir: A trained run directory (any backend).
        out: Where the SavedModel goes; must not exist, or be empty.
        settings: The `SearchSettings` the SavedModel searches with (fixed
            at export). Defaults to the paper's.
        model: A `.keras` file to export instead of the run's final model
            (for example an averaged checkpoint).
        quantize: "int8" to export Keras's int8 weights
            (`keras_transformer.decoding.quantization`); None keeps float32.
        **changes: `SearchSettings` fields to change (`beam_size=1`).

    Returns:
        The SavedModel's path.

    Raises:
        ImportError: TensorFlow or tensorflow-text is not installed.
        FileNotFoundError: The run has no model (or `model` does not exist).
        FileExistsError: `out` exists and is not empty.
        ValueError: The tokenizer does not belong to the model, or the model
            file is damaged.
    """
    from keras_transformer.decoding.quantization import check_quantize_mode

    settings = search_settings(settings, **changes)
    check_quantize_mode(quantize, "--quantization")
    out = Path(out)
    import keras

    in_process = keras.backend.backend() == "tensorflow"
    if in_process:
        _require_tensorflow()
    run = open_run(run_dir, out, model, load_model=in_process)
    if in_process:
        _export_saved_model(run, out, settings, quantize)
    else:
        _export_in_child(run, out, settings, quantize)
    return out


def _require_tensorflow() -> None:
    for module in ("tensorflow", "tensorflow_text"):
        try:
            __import__(module)
        except ImportError as error:
            raise ImportError(
                f"A SavedModel export needs TensorFlow and tensorflow-text "
                f"({module} is missing): {install_command('tensorflow')}"
            ) from error


def _export_saved_model(
    run: InferenceRun, out: Path, settings: SearchSettings, quantize: str | None
):
    from keras_transformer.decoding.quantization import quantize_model

    quantize_model(run.model, quantize, "--quantization")
    write_export(
        run,
        out,
        lambda staging: _write_saved_model(run, staging, settings, quantize),
        what="the SavedModel export",  # Quantized already: its weights' own size.
    )


def _export_in_child(
    run: InferenceRun, out: Path, settings: SearchSettings, quantize: str | None
):
    """Rebuild and export under TensorFlow in a fresh process."""
    request = {
        "run_dir": str(run.run.path),
        "model": str(run.model_path),
        "out": str(out),
        "settings": settings.to_dict(),
        "quantize": quantize,
    }
    try:
        export_in_child("keras_transformer.export.savedmodel", request, "tensorflow")
    except RuntimeError as error:
        if "No module named" in str(error):
            _require_tensorflow()  # Names the extra to install.
        raise


def _write_saved_model(
    run: InferenceRun, out: Path, settings: SearchSettings, quantize: str | None
):
    from keras_transformer.export.savedmodel_graph import build_archive

    info = export_record(run, settings, quantization=quantize)
    info.update(
        source_padding="multiple of 8 tokens",
        batch_padding="power of two rows",
        signatures=_signature_docs(settings),
    )
    archive, ids_archive = build_archive(run.model, run.tokenizer, settings, info)
    archive.write_out(str(out), verbose=False)
    ids_archive.write_out(str(out / IDS_ONLY), verbose=False)
    assets = out / "assets"
    assets.mkdir(exist_ok=True)
    (assets / EXPORT_INFO).write_text(json.dumps(info, indent=2) + "\n")
    run.tokenizer.save(tokenizer_path(out, "savedmodel"))


def _signature_docs(settings: SearchSettings) -> dict[str, str]:
    search = (
        "greedy search"
        if settings.beam_size == 1
        else f"beam search (k={settings.beam_size}, alpha={settings.alpha})"
    )
    docs = {
        "translate": (
            f"text tf.string[batch] -> translation tf.string[batch], score "
            f"float32[batch]; {search}, output up to source length + "
            f"{settings.max_extra_length} tokens. Import tensorflow_text "
            "before loading."
        ),
        "translate_ids": (
            "source_ids int32[batch, length] (0-padded, no BOS/EOS) -> "
            "target_ids int32[batch, length] (up to and including EOS, then "
            "0), score float32[batch]. Also in ids_only/, which loads without "
            "tensorflow_text."
        ),
        "info": "no inputs -> the export's settings as constants.",
    }
    if settings.beam_size > 1:
        docs["nbest"] = (
            f"text tf.string[batch] -> translations tf.string[batch, "
            f"{settings.beam_size}], scores float32[batch, {settings.beam_size}], "
            "best first."
        )
    return docs


class SavedModelTranslator:
    """An exported SavedModel loaded for serving (`keras-transformer serve
    --engine savedmodel`): strings in, n-best lists out.

    Args:
        path: the export's directory (with `assets/export.json`).

    Raises:
        ImportError: TensorFlow or tensorflow-text is missing.
        FileNotFoundError: `path` holds no export of this package.
    """

    def __init__(self, path: str | os.PathLike):
        path = Path(path)
        info_path = path / "assets" / EXPORT_INFO
        if not info_path.is_file():
            raise FileNotFoundError(
                f"{info_path} not found: {path} is not a SavedModel written by "
                "keras-transformer export."
            )
        _require_tensorflow()
        import tensorflow as tf
        import tensorflow_text  # noqa: F401 - registers the tokenizer ops

        self.info = json.loads(info_path.read_text(encoding="utf-8"))
        names = {field: self.info[field] for field in SearchSettings().to_dict()}
        self.settings = SearchSettings(**names)
        self._tf = tf
        loaded = tf.saved_model.load(str(path))
        self._signatures = loaded.signatures
        self._loaded = loaded  # The signatures need their object alive.

    def nbest(self, texts: list[str]) -> list[list[tuple[str, float]]]:
        """The export's hypotheses per text, best first (one for greedy)."""
        tf = self._tf
        batch = tf.constant(texts, tf.string)
        if self.settings.beam_size == 1:
            out = self._signatures["translate"](text=batch)
            strings, scores = out["translation"][:, None], out["score"][:, None]
        else:
            out = self._signatures["nbest"](text=batch)
            strings, scores = out["translations"], out["scores"]
        return [
            [(s.decode("utf-8"), float(score)) for s, score in zip(row, row_scores)]
            for row, row_scores in zip(strings.numpy(), scores.numpy())
        ]


def _export_request(request: dict) -> None:
    """The child's side of `_export_in_child`."""
    _require_tensorflow()
    run = RunDirectory(request["run_dir"]).open_for_inference(request["model"])
    settings = SearchSettings.from_dict(request["settings"])
    _export_saved_model(run, Path(request["out"]), settings, request["quantize"])


if __name__ == "__main__":
    sys.exit(child_main(sys.argv[1:], _export_request))
