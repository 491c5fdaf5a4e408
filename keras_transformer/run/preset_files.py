"""A preset directory in keras-hub's layout: written whole or not at all, read checked.

config.json          the backbone (`Transformer`) as Keras serializes it
model.weights.h5     its weights
tokenizer.json       the tokenizer's kind and size; its files in assets/tokenizer/
preprocessor.json    `TransformerPreprocessor` settings
task.json            `TransformerSeq2SeqLM`: backbone, preprocessor, search settings
metadata.json        format, versions, parameter count, date, paper
                     configuration, training data

An on-disk artifact like a run directory, read and written here for the
task (`TransformerSeq2SeqLM.from_preset`, `save_to_preset`), the exporter
and fine-tuning alike. The search settings are plain data here (the
`SearchSettings.to_dict()` form): what reads them makes the settings.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import math
import os
from pathlib import Path
from typing import Any

import keras
import numpy as np

from keras_transformer.config import PRESETS, TransformerConfig
from keras_transformer.data.tokenizer import load_tokenizer
from keras_transformer.utils.atomic_files import atomic_directory, backup_path
from keras_transformer.utils.version import __version__

#: Version of the layout below; a newer one is refused by name.
PRESET_FORMAT = 1
CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.weights.h5"
TOKENIZER_FILE = "tokenizer.json"
PREPROCESSOR_FILE = "preprocessor.json"
TASK_FILE = "task.json"
METADATA_FILE = "metadata.json"
TOKENIZER_ASSETS = Path("assets") / "tokenizer"
#: What preprocessor.json holds: `TransformerPreprocessor`'s settings, which
#: a run's manifest records among train's options.
PREPROCESSOR_FIELDS = ("max_length", "tokens_per_batch", "seed")
REQUIRED_FILES = (
    CONFIG_FILE,
    WEIGHTS_FILE,
    TOKENIZER_FILE,
    PREPROCESSOR_FILE,
    TASK_FILE,
    METADATA_FILE,
)
_PACKAGE = "keras_transformer"


@dataclasses.dataclass
class PresetContents:
    """What a preset directory holds, checked (see `read_preset`)."""

    path: Path
    config: TransformerConfig
    tokenizer: Any
    preprocessor: dict[str, Any]
    search: dict[str, Any]
    """The search settings as `SearchSettings.to_dict()` gives them."""
    metadata: dict[str, Any]

    @property
    def weights_path(self) -> Path:
        return self.path / WEIGHTS_FILE


def write_preset(
    directory: str | os.PathLike,
    backbone: keras.Model,
    tokenizer,
    preprocessor: dict[str, Any],
    search: dict[str, Any],
    *,
    training_data: str | None = None,
    overwrite: bool = False,
) -> Path:
    """Write a preset to `directory` through a temporary sibling renamed
    into place, so a failed save leaves no half preset. An existing
    directory is refused unless it is empty, or with `overwrite`, moved
    aside to `<directory>.backup-<time>` (never deleted). The space the
    weights need is checked first: h5py crashes the process on a full disk,
    where this raises `WriteFailed` naming the preset."""
    target = Path(directory)
    if target.exists() and not target.is_dir():
        raise FileExistsError(f"{target} exists and is not a directory.")
    if target.is_dir() and any(target.iterdir()) and not overwrite:
        raise FileExistsError(
            f"{target} is not empty. Pass overwrite=True (the CLI: --overwrite) "
            "to move it aside and write the preset there."
        )
    occupied = target.is_dir() and any(target.iterdir())
    atomic_directory(
        target,
        lambda staging: _write_files(
            staging, backbone, tokenizer, preprocessor, search, training_data
        ),
        replace=occupied,
        set_aside_to=backup_path(target) if occupied else None,
        needed_bytes=_size_estimate(backbone),
        what="the preset",
    )
    return target


# Room beside the weights: the tokenizer (a 32k SentencePiece model is about
# 0.8 MB), the JSON files and HDF5's own structures.
_PRESET_SLACK_BYTES = 16 * 2**20


def weights_bytes(model: keras.Model) -> int:
    """The bytes of `model`'s weights as they are stored (float32: 4 each):
    what a preset or an export of it needs on disk, at least."""
    return sum(
        math.prod(variable.shape) * np.dtype(variable.dtype).itemsize
        for variable in model.weights
    )


def _size_estimate(backbone: keras.Model) -> int:
    """About the bytes a preset of `backbone` takes: its weights' and some."""
    return weights_bytes(backbone) + _PRESET_SLACK_BYTES


def _write_files(
    path: Path,
    backbone: keras.Model,
    tokenizer,
    preprocessor: dict[str, Any],
    search: dict[str, Any],
    training_data: str | None,
) -> None:
    backbone_config = keras.saving.serialize_keras_object(backbone)
    backbone.save_weights(path / WEIGHTS_FILE)
    tokenizer.save(path / TOKENIZER_ASSETS)
    preprocessor_config = _object_config(
        "task.preprocessor", "TransformerPreprocessor", preprocessor
    )
    files = {
        CONFIG_FILE: backbone_config,
        TOKENIZER_FILE: _object_config(
            "data.tokenizer",
            type(tokenizer).__name__,
            {"vocab_size": tokenizer.vocab_size, "assets": str(TOKENIZER_ASSETS)},
        ),
        PREPROCESSOR_FILE: preprocessor_config,
        TASK_FILE: _object_config(
            "task.seq2seq_lm",
            "TransformerSeq2SeqLM",
            {
                "backbone": backbone_config,
                "preprocessor": preprocessor_config,
                "search": dict(search),
            },
        ),
        METADATA_FILE: {
            "keras_transformer_preset_format": PRESET_FORMAT,
            "keras_transformer_version": __version__,
            "keras_version": keras.__version__,
            "parameter_count": backbone.count_params(),
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(
                timespec="seconds"
            ),
            "paper_configuration": paper_configuration(backbone.config),
            "training_data": training_data,
        },
    }
    for name, content in files.items():
        text = json.dumps(content, indent=2, ensure_ascii=False) + "\n"
        (path / name).write_text(text, encoding="utf-8")


def _object_config(module: str, class_name: str, config: dict[str, Any]) -> dict:
    """Keras's serialized-object shape, which keras-hub's loaders read."""
    return {
        "module": f"{_PACKAGE}.{module}",
        "class_name": class_name,
        "config": config,
        "registered_name": f"{_PACKAGE}>{class_name}",
    }


def paper_configuration(config: TransformerConfig) -> str | None:
    """The Table 3 preset `config` is, its vocabulary aside, else None."""
    for name in PRESETS:
        if TransformerConfig.preset(name, vocab_size=config.vocab_size) == config:
            return name
    return None


def read_preset(directory: str | os.PathLike) -> PresetContents:
    """A preset's contents, each file checked; errors name the file."""
    path = Path(directory)
    if path.exists() and not path.is_dir():
        raise NotADirectoryError(
            f"{path} is a file, not a preset: a preset is a directory (of "
            "save_to_preset or export --format preset), or one of the paper's "
            f"configurations by name: {', '.join(PRESETS)}."
        )
    if not path.is_dir():
        raise FileNotFoundError(
            f"Preset {path} is neither a directory nor a configuration name: "
            f"give a preset directory or one of {', '.join(PRESETS)}."
        )
    _refuse_run_directory(path)
    missing = [name for name in REQUIRED_FILES if not (path / name).is_file()]
    if missing:
        raise FileNotFoundError(
            f"{path} is not a complete preset: {', '.join(missing)} missing "
            f"(a preset holds {', '.join(REQUIRED_FILES)} and {TOKENIZER_ASSETS}/)."
        )
    metadata = _read_json(path / METADATA_FILE)
    _check_format(path / METADATA_FILE, metadata)
    config = _backbone_config(path / CONFIG_FILE)
    task = _read_json(path / TASK_FILE)
    search = _search_config(path / TASK_FILE, task)
    preprocessor = _read_json(path / PREPROCESSOR_FILE).get("config", {})
    tokenizer = _tokenizer(path, config)
    return PresetContents(path, config, tokenizer, preprocessor, search, metadata)


def _refuse_run_directory(path: Path) -> None:
    if (path / "manifest.json").is_file() and not (path / METADATA_FILE).is_file():
        raise ValueError(
            f"{path} is a training run directory, not a preset. Turn it into "
            f"one with: keras-transformer export --format preset --run-dir {path} "
            "--out PRESET_DIR"
        )


def _read_json(path: Path) -> dict[str, Any]:
    try:
        content = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as error:
        raise ValueError(f"{path}: not valid JSON ({error}).") from None
    if not isinstance(content, dict):
        raise ValueError(
            f"{path}: expected a JSON object, got {type(content).__name__}."
        )
    return content


def _check_format(path: Path, metadata: dict[str, Any]) -> None:
    version = metadata.get("keras_transformer_preset_format")
    if not isinstance(version, int) or isinstance(version, bool):
        raise ValueError(
            f"{path}: keras_transformer_preset_format is {version!r}; a "
            "keras-transformer preset names its format version there."
        )
    if version > PRESET_FORMAT:
        raise ValueError(
            f"{path}: preset format {version} was written by keras-transformer "
            f"{metadata.get('keras_transformer_version', '(unknown)')}; this is "
            f"{__version__}, which reads format {PRESET_FORMAT} and older. "
            "Upgrade keras-transformer to load it."
        )


def _backbone_config(path: Path) -> TransformerConfig:
    serialized = _read_json(path)
    name = serialized.get("registered_name")
    if name != f"{_PACKAGE}>Transformer":
        raise ValueError(
            f"{path}: the backbone is {name!r}, not keras_transformer>Transformer."
        )
    try:
        return TransformerConfig.from_dict(serialized["config"]["config"])
    except (KeyError, TypeError, ValueError) as error:
        raise ValueError(
            f"{path}: not a Transformer configuration ({error})."
        ) from None


def _search_config(path: Path, task: dict[str, Any]) -> dict[str, Any]:
    search = task.get("config", {}).get("search") if isinstance(task, dict) else None
    if not isinstance(search, dict):
        raise ValueError(
            f"{path}: bad search settings (config.search is {search!r}, "
            "expected a JSON object)."
        )
    return search


def load_weights(backbone: keras.Model, contents: PresetContents) -> None:
    """Load the preset's weights into `backbone` (a model of its config);
    an error names both files."""
    path = contents.weights_path
    try:
        backbone.load_weights(path)
    except (OSError, ValueError) as error:
        raise ValueError(
            f"{path}: the weights do not load into the model of "
            f"{path.parent / CONFIG_FILE} ({error})."
        ) from None


def read_tokenizer(path: Path):
    """The tokenizer of the preset in `path`, checked against its config."""
    return _tokenizer(path, _backbone_config(path / CONFIG_FILE))


def _tokenizer(path: Path, config: TransformerConfig):
    assets = path / TOKENIZER_ASSETS
    try:
        tokenizer = load_tokenizer(assets)
    except (OSError, ValueError) as error:
        raise ValueError(
            f"{assets}: the preset's tokenizer could not be read ({error})."
        ) from None
    expected = config.vocab_size
    if tokenizer.vocab_size != expected:
        raise ValueError(
            f"{assets} holds a tokenizer of {tokenizer.vocab_size} pieces but "
            f"{path / CONFIG_FILE} is a model of {expected}: they do not belong "
            "together (was one of them replaced?)."
        )
    return tokenizer
