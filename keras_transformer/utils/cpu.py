"""The CPU cores this process may use: what thread and worker counts start from."""

from __future__ import annotations

import os


def available_cores() -> int:
    """CPU cores this process may run on (its affinity, else the machine's)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1
