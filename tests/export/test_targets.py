"""`export.targets.export_run` through `keras-transformer export`: a full
disk is exit 74 naming the export, as `train` and `prepare` do (issue 50:
h5py segfaulted; other formats exited 2 with a bare errno).

The preset is written the same way on every backend: run once (the torch
suite); each format's own writing is checked in its module."""

from __future__ import annotations

import collections

import pytest

from keras_transformer.cli import main
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
