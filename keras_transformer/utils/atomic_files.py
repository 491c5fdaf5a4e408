"""Writes that leave either the old file or the new one, never a part.

Every file a run or an export writes goes through here: a temporary name
beside the target, flushed to disk, then renamed over it (a rename within
one directory is atomic on POSIX). Temporary names start with "." and hold
".partial", so a reader never takes one for a finished file and a cleanup
can find what a killed process left behind.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import socket
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

PARTIAL_MARK = ".partial"
# The errors of a full disk (or quota): named as such, exit 74 at the CLI.
_NO_SPACE = (errno.ENOSPC, errno.EDQUOT)
# A directory this process may not write: a read-only mount, another user's.
_NOT_WRITABLE = (errno.EACCES, errno.EPERM, errno.EROFS)


class WriteFailed(OSError):
    """An export or preset could not be written (a full disk, most often).
    Nothing partial is left: the target is as it was."""

    def __init__(self, path: Path, error: OSError, what: str, detail: str = ""):
        super().__init__(error.errno, error.strerror or str(error))
        self.path = Path(path)
        self.what = what
        self.detail = detail

    def to_json(self) -> str:
        """One line that `from_json` makes the same error of (an export's
        child process reports it so)."""
        fields = [str(self.path), self.errno, self.strerror, self.what, self.detail]
        return json.dumps(fields)

    @classmethod
    def from_json(cls, line: str) -> WriteFailed:
        path, number, reason, what, detail = json.loads(line)
        return cls(Path(path), OSError(number, reason), what, detail)

    def __str__(self) -> str:
        reason, advice = self.strerror, "run the same command again"
        if self.errno in _NO_SPACE:
            reason += " (the disk is full)"
            advice = "free some space and " + advice
        elif self.errno in _NOT_WRITABLE:
            advice = (
                f"write it to a directory this user may write, or make "
                f"{self.path.parent} writable"
            )
        return (
            f"could not write {self.what} {self.path}: {reason}{self.detail}. "
            f"Nothing partial was kept ({self.path} is as it was); {advice}."
        )


def check_free_space(directory: Path, needed: int, path: Path, what: str) -> None:
    """Raise `WriteFailed` (ENOSPC) before writing `needed` bytes into
    `directory` when its file system has less free: some writers (h5py's)
    crash the process on a full disk instead of raising."""
    free = shutil.disk_usage(directory).free
    if free < needed:
        error = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        detail = f": it needs about {needed / 1e6:,.1f} MB, {free / 1e6:,.1f} MB free"
        raise WriteFailed(path, error, what, detail)


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
    needed_bytes: int = 0,
    what: str = "the export",
) -> None:
    """Call `write` on a staging directory beside `out`, then rename it to
    `out`; on any failure remove it, so `out` never holds a partial result.
    `out` must not exist, or be an empty directory; with `replace`, a
    directory there is swapped out once the new one is complete, then
    removed, or moved to `set_aside_to` when given.

    `needed_bytes` are checked free first; a full disk is raised as
    `WriteFailed` naming `what` and `out`. Staging directories that a
    killed writer of `out` on this machine left are removed first."""
    out = Path(out)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        remove_dead_partials(out)
        check_free_space(out.parent, needed_bytes, out, what)
        # Named for its writer (PID@HOST), so that a later write of `out` can
        # tell a dead writer's leftovers from a live one's.
        writer = f"{os.getpid()}@{socket.gethostname()}"
        prefix = f".{out.name}{PARTIAL_MARK}-{writer}-"
        staging = Path(tempfile.mkdtemp(prefix=prefix, dir=out.parent))
    except OSError as error:  # Else the error names a staging path.
        if error.errno in _NOT_WRITABLE and type(error) is not WriteFailed:
            raise WriteFailed(out, error, what) from error
        raise
    try:
        try:
            write(staging)
        except OSError as error:
            # A writer's own error (a store's) already names its file.
            failed = _NO_SPACE + _NOT_WRITABLE
            if error.errno in failed and type(error) in (OSError, PermissionError):
                raise WriteFailed(out, error, what) from error
            raise
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


def remove_dead_partials(out: Path) -> list[Path]:
    """Remove the staging directories of `out` whose writer, a process of
    this machine, is gone (a `kill -9` during a write leaves one, as big as
    the export); those of a live writer, of another machine, or not named
    for a writer are left alone. Returns what was removed."""
    out = Path(out)
    prefix = f".{out.name}{PARTIAL_MARK}-"
    removed = []
    for path in out.parent.glob(f"{prefix}*@*"):
        pid, _, rest = path.name[len(prefix) :].partition("@")
        host = rest.rpartition("-")[0]
        if not pid.isdigit() or host != socket.gethostname() or _alive(int(pid)):
            continue
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # Another user's process: alive.
        return True
    return True


def backup_path(path: Path) -> Path:
    """A free name beside `path` to move it aside to: `<path>.backup-<time>`
    (`train --overwrite` moves a run there, `prepare --overwrite` a store)."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    backup, suffix = path.with_name(f"{path.name}.backup-{stamp}"), 1
    while backup.exists():
        suffix += 1
        backup = path.with_name(f"{path.name}.backup-{stamp}-{suffix}")
    return backup
