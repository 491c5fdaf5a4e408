"""`export.targets.export_run` through `keras-transformer export`: a full
disk is exit 74 naming the export, as `train` and `prepare` do (issue 50:
h5py segfaulted; other formats exited 2 with a bare errno).

The preset is written the same way on every backend: run once (the torch
suite); each format's own writing is checked in its module."""

from __future__ import annotations

import collections

import numpy as np
import pytest

from keras_transformer.cli import main
from keras_transformer.task.seq2seq_lm import TransformerSeq2SeqLM
from keras_transformer.utils import atomic_files
from keras_transformer.utils.console import EXIT_WRITE_FAILED

pytestmark = pytest.mark.backend_neutral


def test_a_full_disk_is_exit_74_naming_the_preset(
    untrained_run, tmp_path, monkeypatch, capsys
):
    usage = collections.namedtuple("usage", "total used free")
    monkeypatch.setattr(
        atomic_files.shutil, "disk_usage", lambda path: usage(10**9, 10**9, 10)
    )
    out = tmp_path / "preset"
    argv = ["export", "--run-dir", str(untrained_run), "--out", str(out)]
    assert main([*argv, "--format", "preset"]) == EXIT_WRITE_FAILED
    error = capsys.readouterr().err
    assert f"could not write the preset {out}: No space left on device" in error
    assert list(tmp_path.iterdir()) == []


def _full_disk(monkeypatch):
    usage = collections.namedtuple("usage", "total used free")
    monkeypatch.setattr(
        atomic_files.shutil, "disk_usage", lambda path: usage(10**9, 10**9, 10)
    )


@pytest.mark.parametrize(
    "format_, what",
    [("onnx", "the ONNX export"), ("ctranslate2", "the CTranslate2 export")],
)
def test_a_full_disk_is_found_before_an_export_is_written(
    untrained_run, tmp_path, monkeypatch, capsys, format_, what
):
    # In this process (ONNX on torch, CTranslate2 anywhere); SavedModel's
    # child reports the same error (tests/export/test_common.py).
    pytest.importorskip("onnx" if format_ == "onnx" else "ctranslate2")
    _full_disk(monkeypatch)
    out = tmp_path / format_
    argv = ["export", "--run-dir", str(untrained_run), "--out", str(out)]
    assert main([*argv, "--format", format_]) == EXIT_WRITE_FAILED
    error = capsys.readouterr().err
    assert f"could not write {what} {out}: No space left on device" in error
    assert "MB free" in error
    assert list(tmp_path.iterdir()) == []


def test_a_preset_directory_exports_as_its_run(untrained_run, tmp_path, capsys):
    preset = tmp_path / "preset"
    argv = ["export", "--run-dir", str(untrained_run), "--format", "preset"]
    assert main([*argv, "--out", str(preset)]) == 0
    again = tmp_path / "again"
    argv = ["export", "--run-dir", str(preset), "--format", "preset"]
    assert main([*argv, "--out", str(again)]) == 0, capsys.readouterr().err
    first, second = (TransformerSeq2SeqLM.from_preset(p) for p in (preset, again))
    for mine, theirs in zip(
        first.backbone.get_weights(), second.backbone.get_weights()
    ):
        np.testing.assert_array_equal(mine, theirs)
    argv += ["--model", str(untrained_run / "model.keras")]
    assert main([*argv, "--out", str(tmp_path / "third")]) == 2
    assert f"{preset} is a preset, which holds one model" in capsys.readouterr().err
