"""Atomic writes: the target holds the old content or the new, never a part."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

from keras_transformer.utils.atomic_files import (
    WriteFailed,
    atomic_directory,
    atomic_write_text,
    atomic_write_with,
    partial_path,
    remove_dead_partials,
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


def test_a_full_disk_is_named_with_the_export_and_nothing_kept(tmp_path):
    out = tmp_path / "onnx"

    def fills_the_disk(staging):
        (staging / "decoder.onnx").write_text("part")
        raise OSError(28, "No space left on device")

    with pytest.raises(WriteFailed) as failed:
        atomic_directory(out, fills_the_disk, what="the ONNX export")
    assert str(failed.value).startswith(
        f"could not write the ONNX export {out}: No space left on device (the "
        "disk is full). Nothing partial was kept"
    )
    assert failed.value.errno == 28
    assert list(tmp_path.iterdir()) == []


def test_a_writers_own_error_is_not_renamed(tmp_path):
    class StoreFull(OSError):
        pass

    def fails(staging):
        raise StoreFull(28, "the store's own words")

    with pytest.raises(StoreFull):
        atomic_directory(tmp_path / "store", fails)


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_only_a_dead_writers_leftovers_are_removed(tmp_path):
    """A `kill -9` during a write leaves a staging directory as big as the
    export: the next write of the same target removes it, and only it."""
    out, host = tmp_path / "preset", socket.gethostname()
    dead = tmp_path / f".preset.partial-{_dead_pid()}@{host}-abc"
    live = tmp_path / f".preset.partial-{os.getpid()}@{host}-def"
    elsewhere = tmp_path / f".preset.partial-{_dead_pid()}@other-host-ghi"
    unnamed = tmp_path / ".preset.partial-xyz"  # An older writer's: unknown.
    other = tmp_path / f".other.partial-{_dead_pid()}@{host}-jkl"
    for path in (dead, live, elsewhere, unnamed, other):
        path.mkdir()
    assert remove_dead_partials(out) == [dead]
    atomic_directory(out, lambda staging: (staging / "f").write_text("ok"))
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        p.name for p in (live, elsewhere, unnamed, other, out)
    )
    assert out.stat().st_mode & 0o777 == 0o755


@pytest.mark.parametrize("number", [13, 30])  # EACCES, EROFS
def test_a_directory_it_may_not_write_is_named_not_its_staging(
    tmp_path, monkeypatch, number
):
    # As root, a chmod does not stop a write: the refusal is injected where
    # the OS gives it (issue 50: a raw OSError named the staging directory).
    def refused(prefix, dir):
        raise PermissionError(number, os.strerror(number), f"{dir}/{prefix}x")

    monkeypatch.setattr("tempfile.mkdtemp", refused)
    out = tmp_path / "preset"
    with pytest.raises(WriteFailed) as failed:
        atomic_directory(out, lambda staging: None, what="the preset")
    message = str(failed.value)
    assert message.startswith(
        f"could not write the preset {out}: {os.strerror(number)}"
    )
    assert f"make {tmp_path} writable" in message and ".partial" not in message
    assert list(tmp_path.iterdir()) == []


def test_a_write_failure_crosses_a_process_as_itself(tmp_path):
    error = WriteFailed(
        tmp_path / "onnx", OSError(28, "No space left on device"), "the ONNX export",
        ": it needs about 1.0 MB, 0.0 MB free",
    )  # fmt: skip
    again = WriteFailed.from_json(error.to_json())
    assert type(again) is WriteFailed and str(again) == str(error)
    assert again.errno == 28 and again.path == error.path
