"""Runs and exports made once per test session and shared by every test
module that needs one (tests/conftest.py registers the fixtures).

Training or exporting is the costly part of most end-to-end tests; each
module used to make its own. A shared run is read-only: `assert_unchanged`
runs after every test that asked for one and fails naming the file the test
changed. A test that must change a run copies it first (`copy_run`).

- `untrained_run`: a tiny SentencePiece tokenizer and the untrained model of
  `tests.helpers.no_eos_model` (every output runs to its length limit, so
  outputs differ from text to text and their length is known); for the
  plumbing of commands, servers and exports.
- `trained_run`: `TRAINED_STEPS` updates of the training tests' small
  model on short built-in pairs, with checkpoints: its translations are
  sentence-like and end in EOS; for exports, int8, averaging and
  fine-tuning, which need a model whose outputs mean something.
"""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import keras
import numpy as np

from tests.helpers import (
    TRAINING_MODEL,
    make_corpus,
    no_eos_model,
    training_options,
    write_training_corpus,
)

# Enough that the translations end in EOS and are sentence-like: with the
# helpers' 20 warmup steps this tiny model's learning rate peaks too high
# and its outputs degenerate into loops, so it warms up over 100.
TRAINED_STEPS = 300
TRAINED_CHECKPOINT_EVERY = 100


def make_untrained_run(directory: Path) -> Path:
    """A run directory with a tiny SentencePiece tokenizer (trained on
    `make_corpus`) and `no_eos_model`, which emits no byte pieces either: a
    byte-fallback newline in an output would split a line of
    `keras-transformer translate`'s output in two."""
    from keras_transformer.data.tokenizer import train_tokenizer

    directory.mkdir(parents=True, exist_ok=True)
    tokenizer = train_tokenizer(make_corpus(), 300)
    tokenizer.save(directory / "tokenizer")
    model = no_eos_model(tokenizer.vocab_size)
    bias = model.get_layer("output_projection").bias
    values = np.array(keras.ops.convert_to_numpy(bias))
    for token_id in range(tokenizer.vocab_size):
        if tokenizer.id_to_piece(token_id).startswith("<0x"):
            values[token_id] = -20.0
    bias.assign(values)
    model.save(directory / "model.keras")
    model.config.to_json(directory / "config.json")
    return directory


def make_trained_run(directory: Path) -> Path:
    """`TRAINED_STEPS` updates on 240 short built-in pairs (no validation
    split: these updates are dozens of short epochs, and validating after
    each one cost a third to a half of the training time), a checkpoint
    every `TRAINED_CHECKPOINT_EVERY`. Returns the run directory."""
    from keras_transformer.training import train

    directory.mkdir(parents=True, exist_ok=True)
    files = {"train": write_training_corpus(directory)["train"]}
    run = directory / "run"
    keras.config.set_dtype_policy("float32")
    model = {**TRAINING_MODEL, "warmup_steps": 100}
    options = training_options(
        run,
        files,
        max_steps=TRAINED_STEPS,
        checkpoint_every=TRAINED_CHECKPOINT_EVERY,
        overrides=model,
    )
    train(options)
    return run


def digest(directory: Path) -> dict[str, str]:
    """{relative path: SHA-256} of every file under `directory`."""
    return {
        path.relative_to(directory).as_posix(): hashlib.sha256(
            path.read_bytes()
        ).hexdigest()
        for path in sorted(directory.rglob("*"))
        if path.is_file()
    }


def assert_unchanged(directory: Path, expected: dict[str, str], test: str) -> None:
    """Fail naming what `test` added, removed or changed in a shared run."""
    actual = digest(directory)
    if actual == expected:
        return
    changed = sorted(
        name
        for name in set(actual) | set(expected)
        if actual.get(name) != expected.get(name)
    )
    raise AssertionError(
        f"{test} changed the shared run {directory} ({', '.join(changed)}): "
        "shared runs are read-only; copy one first (tests/shared_runs.py, "
        "copy_run)."
    )


def copy_run(run: Path, directory: Path) -> Path:
    """A writable copy of the shared `run`, at `directory`/run."""
    target = directory / "run"
    shutil.copytree(run, target)
    return target
