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

The route from either backend: the run's ``.keras`` file holds backend-neutral
weights, so a run trained with JAX is rebuilt under TensorFlow in a child
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
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from keras_transformer.atomic_files import atomic_directory
from keras_transformer.generate import check_search_settings
from keras_transformer.version import __version__

EXPORT_INFO = "export.json"
IDS_ONLY = "ids_only"
SIGNATURES = ("translate", "translate_ids", "nbest", "info")
_CHILD_ERRORS = {
    error.__name__: error for error in (ValueError, FileNotFoundError, FileExistsError)
}


@dataclass(frozen=True)
class ExportSettings:
    """What an export fixes; mirrors `Translator`'s arguments."""

    beam_size: int = 4
    alpha: float = 0.6
    max_extra_length: int = 50
    allow_unk: bool = False

    def __post_init__(self):
        check_search_settings(self.beam_size, self.alpha, self.max_extra_length)


def export_translator(
    run_dir: str | os.PathLike,
    out: str | os.PathLike,
    *,
    model: str | os.PathLike | None = None,
    beam_size: int = 4,
    alpha: float = 0.6,
    max_extra_length: int = 50,
    allow_unk: bool = False,
) -> Path:
    """Export the run in `run_dir` as a SavedModel at `out` (see module doc).

    Args:
        run_dir: A trained run directory (either backend).
        out: Where the SavedModel goes; must not exist, or be empty.
        model: A `.keras` file to export instead of the run's final model
            (for example an averaged checkpoint).
        beam_size, alpha, max_extra_length, allow_unk: As for `Translator`.

    Returns:
        The SavedModel's path.

    Raises:
        FileNotFoundError: The run has no model (or `model` does not exist).
        FileExistsError: `out` exists and is not empty.
        ValueError: The tokenizer does not match the model's vocabulary.
    """
    settings = ExportSettings(beam_size, alpha, max_extra_length, allow_unk)
    out = Path(out)
    model_path = check_run(run_dir, out, model)
    import keras

    if keras.backend.backend() == "tensorflow":
        _export_saved_model(Path(run_dir), model_path, out, settings)
    else:
        _export_in_child(Path(run_dir), model_path, out, settings)
    return out


def check_run(run_dir, out: Path, model) -> Path:
    """Everything that can be checked without loading the model; returns the
    path of the `.keras` file to export."""
    from keras_transformer.run_directory import RunDirectory

    run = RunDirectory(run_dir)
    if not run.path.is_dir():
        raise FileNotFoundError(f"--run-dir {run.path} does not exist.")
    model_path = run.resolve_model_path(model)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise FileExistsError(
            f"--out {out} already exists and is not empty; choose another path "
            "or remove it."
        )
    if not run.config_path.exists():
        raise FileNotFoundError(f"{run.config_path} not found: not a trained run.")
    tokenizer_vocab = _tokenizer_vocab_size(run.tokenizer_dir)
    config_vocab = run.load_config().vocab_size
    if tokenizer_vocab != config_vocab:
        raise ValueError(
            f"{run.tokenizer_dir} has a vocabulary of {tokenizer_vocab} but "
            f"{run.config_path} says vocab_size={config_vocab}: the tokenizer "
            "does not belong to this model."
        )
    return model_path


def _tokenizer_vocab_size(directory: Path) -> int:
    from keras_transformer.data.tokenizer import load_tokenizer

    if not directory.is_dir():
        raise FileNotFoundError(f"{directory} not found: the run has no tokenizer.")
    return load_tokenizer(directory).vocab_size


def _export_saved_model(run_dir: Path, model_path: Path, out: Path, settings):
    def write(staging: Path) -> None:
        _write_saved_model(run_dir, model_path, staging, settings)

    atomic_directory(out, write)


def _export_in_child(run_dir: Path, model_path: Path, out: Path, settings):
    """Rebuild and export under TensorFlow in a fresh process."""
    request = {
        "run_dir": str(run_dir),
        "model": str(model_path),
        "out": str(out),
        "settings": asdict(settings),
    }
    env = dict(os.environ, KERAS_BACKEND="tensorflow")
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    result = subprocess.run(
        [sys.executable, "-m", "keras_transformer.export", json.dumps(request)],
        env=env,
        capture_output=True,
        text=True,
    )
    if result.returncode != 0:
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        detail = lines[-1] if lines else f"exit status {result.returncode}"
        kind, _, message = detail.partition(": ")
        if kind in _CHILD_ERRORS:  # The child's own clear message.
            raise _CHILD_ERRORS[kind](message)
        raise RuntimeError(f"Export under TensorFlow failed: {detail}")


def _write_saved_model(run_dir: Path, model_path: Path, out: Path, settings):
    import keras

    from keras_transformer.export_graph import build_archive
    from keras_transformer.run_directory import RunDirectory

    run = RunDirectory(run_dir)
    tokenizer = run.load_tokenizer()
    model = keras.saving.load_model(model_path, compile=False)
    if tokenizer.vocab_size != model.config.vocab_size:
        raise ValueError(
            f"{model_path} has vocab_size={model.config.vocab_size} but the "
            f"tokenizer in {run.tokenizer_dir} has {tokenizer.vocab_size} "
            "entries: the tokenizer does not belong to this model."
        )
    info = {
        "package_version": __version__,
        "model": model_path.name,
        "tokenizer": tokenizer.kind,
        "vocab_size": tokenizer.vocab_size,
        **asdict(settings),
        "source_padding": "multiple of 8 tokens",
        "batch_padding": "power of two rows",
        "signatures": _signature_docs(settings),
    }
    archive, ids_archive = build_archive(model, tokenizer, settings, info)
    archive.write_out(str(out), verbose=False)
    ids_archive.write_out(str(out / IDS_ONLY), verbose=False)
    assets = out / "assets"
    assets.mkdir(exist_ok=True)
    (assets / EXPORT_INFO).write_text(json.dumps(info, indent=2) + "\n")
    tokenizer.save(assets / "tokenizer")


def _signature_docs(settings: ExportSettings) -> dict[str, str]:
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


def _child_main(argv: list[str]) -> int:
    request = json.loads(argv[0])
    try:
        _export_saved_model(
            Path(request["run_dir"]),
            Path(request["model"]),
            Path(request["out"]),
            ExportSettings(**request["settings"]),
        )
    except tuple(_CHILD_ERRORS.values()) as error:
        print(f"{type(error).__name__}: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(_child_main(sys.argv[1:]))
