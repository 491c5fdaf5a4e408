"""Files' SHA-256, remembered by version: a file hashed before costs a stat.

A digest is kept in the user cache (`file-digests/`) under the stat that
identifies one version of the file: size, modification and change times,
inode. Any write to the file changes its change time, so a remembered digest
is never that of other bytes; a copy, a move to another file system or an
edit makes the next call hash the file again. Source corpora (the key that
names a store) and a store's own files (checked whenever `train` opens it)
are hashed this way.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from pathlib import Path

from keras_transformer.data.text_files import sha256_file
from keras_transformer.utils.atomic_files import atomic_write_text
from keras_transformer.utils.user_cache import user_cache_root


def _record_path(path: Path) -> Path:
    name = hashlib.sha256(str(path).encode()).hexdigest()[:32]
    return user_cache_root() / "file-digests" / f"{name}.json"


def _version(stat: os.stat_result) -> list[int]:
    return [stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns, stat.st_ino]


def file_sha256(path: Path) -> tuple[os.stat_result, str]:
    """`path`'s stat and SHA-256, hashed only if this version of the file
    was not hashed before (a missing file raises the readers' DataError)."""
    resolved = Path(path).resolve()
    try:
        stat = resolved.stat()
    except OSError:
        sha256_file(path)  # Raises the readers' DataError, naming the file.
        raise
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
        record = json.loads(_record_path(resolved).read_text(encoding="utf-8"))
        if record["version"] == _version(stat):
            return stat, record["sha256"]
    digest = sha256_file(path)
    remember_sha256(resolved, digest, stat)
    return stat, digest


def remember_sha256(path: Path, digest: str, stat: os.stat_result | None = None):
    """Remember `digest` for the present version of `path` (a writer that
    hashed what it wrote saves the reader a pass). A read-only cache is no
    error: the file is hashed again next time."""
    resolved = Path(path).resolve()
    with contextlib.suppress(OSError):
        stat = stat or resolved.stat()
        record = {"path": str(resolved), "version": _version(stat), "sha256": digest}
        remembered = _record_path(resolved)
        remembered.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(remembered, json.dumps(record))
