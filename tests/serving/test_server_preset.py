"""`keras-transformer serve --preset DIR`: a preset served as its run is,
answers equal to `translate --preset`; and the flags that would name a
second model are refused.

Backend-neutral (the torch suite only): the preset route is command-line
plumbing (`preset_as_run` writes the preset as a run, which the Keras
engine serves), the same Python on every backend. Saving and loading a
preset and generating from it are checked per backend by
tests/task/test_seq2seq_lm.py
(test_fit_then_save_to_preset_then_from_preset_gives_the_same_outputs), the
Keras engine served by tests/serving/test_server_keras.py."""

from __future__ import annotations

import pytest

from keras_transformer.cli import main
from tests.serving.client import ServerProcess

pytestmark = [pytest.mark.slow, pytest.mark.backend_neutral]

EXTRA = 4
TEXTS = ["the dog sleeps.", "", "the old man likes the garden.", "water."]


@pytest.fixture(scope="module")
def preset(untrained_run, tmp_path_factory):
    folder = tmp_path_factory.mktemp("serve-preset")
    argv = ["export", "--format", "preset", "--run-dir", str(untrained_run)]
    assert main([*argv, "--out", str(folder / "preset")]) == 0
    return folder / "preset"


def test_serve_a_preset_answers_as_translate_does(preset, tmp_path, capsys):
    source = tmp_path / "input.txt"
    source.write_text("".join(f"{line}\n" for line in TEXTS), encoding="utf-8")
    argv = ["translate", "--preset", str(preset), "--input", str(source)]
    assert main([*argv, "--max-extra-length", str(EXTRA), "--beam-size", "2"]) == 0
    expected = capsys.readouterr().out.split("\n")[:-1]
    assert len(expected) == 4 and expected[0]
    server = ServerProcess(
        ["--preset", str(preset), "--max-extra-length", str(EXTRA),
         "--allowed-beam-sizes", "1,2,4", "--warmup-tokens", "8"],
        tmp_path / "log",
    )  # fmt: skip
    try:
        assert server.translate(TEXTS, beam_size=2) == expected
    finally:
        assert server.stop() == 0


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--run-dir", "R"], "--preset and --run-dir both name a model"),
        (["--model", "m.keras"], "--preset and --model both name a model"),
        (["--export-dir", "E"], "--preset and --export-dir both name the weights"),
    ],
)
def test_serve_refuses_a_second_model_beside_the_preset(preset, capsys, flags, message):
    assert main(["serve", "--preset", str(preset), *flags]) == 2
    assert message in capsys.readouterr().err


def test_serve_needs_a_run_or_a_preset(capsys):
    assert main(["serve"]) == 2
    assert (
        "serve needs --run-dir (a trained run) or --preset" in capsys.readouterr().err
    )
    # The Keras engine reads a model, not an export.
    assert main(["serve", "--export-dir", "somewhere"]) == 2
    assert "serve needs --run-dir" in capsys.readouterr().err
