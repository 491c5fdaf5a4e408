"""Atomic writes: the target holds the old content or the new, never a part."""

from __future__ import annotations

import pytest

from keras_transformer.utils.atomic_files import (
    atomic_directory,
    atomic_write_text,
    atomic_write_with,
    partial_path,
)

pytestmark = pytest.mark.backend_neutral


def test_write_replaces_the_file_and_leaves_no_temporary(tmp_path):
    target = tmp_path / "manifest.json"
    target.write_text("old")
    atomic_write_text(target, "new")
    assert target.read_text() == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["manifest.json"]


def test_a_failed_writer_keeps_the_old_file_and_removes_its_part(tmp_path):
    target = tmp_path / "model.keras"
    target.write_text("old")

    def fails_half_way(path):
        path.write_text("half")
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError, match="No space"):
        atomic_write_with(target, fails_half_way)
    assert target.read_text() == "old"
    assert not partial_path(target).exists()


def test_partial_path_keeps_the_suffix_keras_needs(tmp_path):
    assert partial_path(tmp_path / "ckpt-00000005.keras").name == (
        ".ckpt-00000005.partial.keras"
    )


def test_a_failed_directory_write_leaves_nothing(tmp_path):
    out = tmp_path / "export"

    def fails(staging):
        (staging / "model.bin").write_text("part")
        raise RuntimeError("converter failed")

    with pytest.raises(RuntimeError):
        atomic_directory(out, fails)
    assert list(tmp_path.iterdir()) == []
    atomic_directory(out, lambda staging: (staging / "model.bin").write_text("ok"))
    assert (out / "model.bin").read_text() == "ok"
