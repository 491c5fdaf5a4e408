"""Writes that leave either the old file or the new one, never a part.

Every file a run or an export writes goes through here: a temporary name
beside the target, flushed to disk, then renamed over it (a rename within
one directory is atomic on POSIX). Temporary names start with "." and hold
".partial", so a reader never takes one for a finished file and a cleanup
can find what a killed process left behind.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

PARTIAL_MARK = ".partial"


def partial_path(path: str | os.PathLike) -> Path:
    """The temporary name `path` is written under before its rename."""
    path = Path(path)
    return path.with_name(f".{path.stem}{PARTIAL_MARK}{path.suffix}")


def fsync_file(path: str | os.PathLike) -> None:
    with open(path, "rb") as f:
        os.fsync(f.fileno())


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write `data` to `path` through a flushed temporary file and a rename."""
    path = Path(path)
    partial = partial_path(path)
    try:
        with open(partial, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(partial, path)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_with(path: str | os.PathLike, write: Callable[[Path], None]) -> None:
    """Call `write(temporary_path)` (a writer that takes a file name, such as
    `model.save`), flush the file, and rename it to `path`; on any failure the
    temporary file is removed and `path` is untouched."""
    path = Path(path)
    partial = partial_path(path)
    try:
        write(partial)
        fsync_file(partial)
        os.replace(partial, path)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise


def atomic_directory(
    out: str | os.PathLike,
    write: Callable[[Path], None],
    *,
    replace: bool = False,
    set_aside_to: Path | None = None,
) -> None:
    """Call `write` on a staging directory beside `out`, then rename it to
    `out`; on any failure remove it, so `out` never holds a partial result.
    `out` must not exist, or be an empty directory; with `replace`, a
    directory there is swapped out once the new one is complete, then
    removed, or moved to `set_aside_to` when given."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(
        tempfile.mkdtemp(prefix=f".{out.name}{PARTIAL_MARK}-", dir=out.parent)
    )
    try:
        write(staging)
        staging.chmod(0o755)  # mkdtemp's 0700 would hide it from a server user.
        if replace and out.exists() and any(out.iterdir()):
            old = set_aside_to or Path(f"{staging}-old")
            out.rename(old)
            staging.rename(out)
            if set_aside_to is None:
                shutil.rmtree(old, ignore_errors=True)
            return
        if out.exists():
            out.rmdir()  # Empty, or this raises and nothing is replaced.
        staging.rename(out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def backup_path(path: Path) -> Path:
    """A free name beside `path` to move it aside to: `<path>.backup-<time>`
    (`train --overwrite` moves a run there, `prepare --overwrite` a store)."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    backup, suffix = path.with_name(f"{path.name}.backup-{stamp}"), 1
    while backup.exists():
        suffix += 1
        backup = path.with_name(f"{path.name}.backup-{stamp}-{suffix}")
    return backup
