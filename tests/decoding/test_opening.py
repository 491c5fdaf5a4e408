"""`open_model`: a run, a preset and a `.keras` file open alike, and the
command line and the server's Keras engine open their model through it."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from keras_transformer.cli import build_parser, commands
from keras_transformer.decoding.opening import open_model
from keras_transformer.decoding.settings import SearchSettings
from keras_transformer.model import Transformer
from keras_transformer.run.directory import RunDirectory
from keras_transformer.serving.engines import open_engine
from tests.helpers import to_numpy

pytestmark = pytest.mark.slow

SETTINGS = SearchSettings(beam_size=2, max_extra_length=5)
CHECKPOINT = "checkpoints/ckpt-00000100.keras"


@pytest.fixture(scope="module")
def preset(trained_run, tmp_path_factory):
    from keras_transformer.export.preset import export_preset

    return export_preset(trained_run, tmp_path_factory.mktemp("open") / "p", SETTINGS)


def weights(model) -> list[np.ndarray]:
    return [to_numpy(w) for w in model.weights]


def same_weights(first, second) -> bool:
    return all(
        np.array_equal(a, b)
        for a, b in zip(weights(first), weights(second), strict=True)
    )


def test_a_run_a_preset_and_a_model_file_open_alike(trained_run, preset):
    run = open_model(trained_run, settings=SETTINGS)
    from_preset = open_model(preset, settings=SETTINGS)
    checkpoint = open_model(trained_run / CHECKPOINT, settings=SETTINGS)
    assert (run.kind, from_preset.kind, checkpoint.kind) == (
        "run",
        "preset",
        "model file",
    )
    for opened in (run, from_preset, checkpoint):
        assert isinstance(opened.model, Transformer)
        assert opened.settings == SETTINGS
        assert opened.tokenizer.vocab_size == opened.config.vocab_size
    assert same_weights(from_preset.model, run.model)  # The final model's.
    assert checkpoint.path == (trained_run / CHECKPOINT).resolve()
    assert not same_weights(checkpoint.model, run.model)  # Step 100's.
    assert (run.name, from_preset.name) == (trained_run.name, "p")  # Not paths.


def command_line(*argv: str):
    """What `translate` decodes with for `argv`'s model flags."""
    args = build_parser().parse_args(
        ["translate", *argv, "--beam-size", "2", "--max-extra-length", "5"]
    )
    return commands._translator(args)


def server(source, tmp_path, model=None):
    return open_engine(
        "keras",
        source,
        SETTINGS,
        model=model,
        scratch=tmp_path,
        batch_size=8,
        threads=1,
    )


@pytest.mark.parametrize("source", ["run", "preset", "model file"])
def test_the_command_line_and_the_server_open_what_open_model_opens(
    source, trained_run, preset, tmp_path
):
    if source == "run":
        flags, where, model = ["--run-dir", str(trained_run)], trained_run, None
    elif source == "preset":
        flags, where, model = ["--preset", str(preset)], preset, None
    else:
        model = trained_run / CHECKPOINT
        flags = ["--run-dir", str(trained_run), "--model", str(model)]
        where = trained_run
    opened = open_model(where, model=model, settings=SETTINGS)
    translator = command_line(*flags)
    engine = server(where, tmp_path, model)
    for got in (translator.model, engine.model):
        assert type(got) is type(opened.model)
        assert same_weights(got, opened.model)
    assert translator.settings == engine.settings == opened.settings


def test_a_preset_refuses_a_model_file_and_an_ensemble(preset, trained_run):
    with pytest.raises(ValueError, match="--model is for a run: the preset"):
        open_model(preset, model=trained_run / CHECKPOINT)
    with pytest.raises(ValueError, match="--ensemble is for a run: the preset"):
        open_model(preset, ensemble=[trained_run])


def test_a_run_directory_given_as_a_preset_says_how_to_export_it(trained_run):
    with pytest.raises(ValueError, match="export --format preset"):
        open_model(trained_run, kind="preset")


def test_a_model_file_outside_a_run_is_refused_naming_it(trained_run, tmp_path):
    loose = tmp_path / "a" / "b" / "loose.keras"
    loose.parent.mkdir(parents=True)
    shutil.copy(RunDirectory(trained_run).model_path, loose)
    with pytest.raises(ValueError, match=f"{loose} is in no run directory"):
        open_model(loose)
