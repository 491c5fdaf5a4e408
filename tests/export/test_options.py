"""`export.options.ExportOptions`: the flags of `export`, refused before any
run is read when they belong to another format.

Plain Python, no Keras computation: run once (the torch suite); each
format's exporter is checked in its own module."""

from __future__ import annotations

import re

import pytest

from keras_transformer.cli import build_parser, main
from keras_transformer.export.options import (
    DEFAULT_MAX_POSITIONS,
    HF_MAX_POSITIONS,
    ExportOptions,
)

pytestmark = pytest.mark.backend_neutral


def test_the_defaults_are_a_float32_savedmodel():
    options = ExportOptions(out="DIR")
    assert (options.format, options.quantization, options.max_positions) == (
        "savedmodel",
        None,
        None,
    )


@pytest.mark.parametrize(
    "changes, expected",
    [
        ({"format": "onnx", "max_positions": 10}, "--max-positions applies to"),
        ({"format": "preset", "quantization": "int8"}, "--preset DIR --quantize int8"),
        ({"format": "onnx", "quantization": "float16"}, "takes int8 or float32"),
        ({"format": "tflite"}, "format (--format) must be one of savedmodel"),
        ({"format": "ctranslate2", "max_positions": 0}, "must be >= 1"),
    ],
)
def test_flags_of_another_format_are_refused_with_the_way_to_go(changes, expected):
    with pytest.raises(ValueError, match=re.escape(expected)):
        ExportOptions(out="DIR", **changes)


def test_ctranslate2_and_savedmodel_take_their_weight_types():
    ExportOptions(out="D", format="ctranslate2", quantization="int8_float16")
    ExportOptions(out="D", format="savedmodel", quantization="int8")
    ExportOptions(out="D", format="onnx", quantization="float32")


def test_out_is_required_and_the_help_shows_the_real_defaults(capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["export", "--run-dir", "R"])
    assert "the following arguments are required: --out" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        build_parser().parse_args(["export", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert (
        f"(default: {DEFAULT_MAX_POSITIONS} for ctranslate2, {HF_MAX_POSITIONS} "
        "for huggingface)"
    ) in text
    assert "(default: float32)" in text


def test_the_command_refuses_before_reading_the_run(tmp_path, capsys):
    missing = tmp_path / "no-run"
    argv = ["export", "--run-dir", str(missing), "--out", str(tmp_path / "o")]
    assert main([*argv, "--format", "onnx", "--max-positions", "9"]) == 2
    assert "--max-positions applies to --format ctranslate2" in capsys.readouterr().err
