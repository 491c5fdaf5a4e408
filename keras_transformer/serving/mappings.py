"""Memory mappings: what compiled programs hold, against the kernel's limit.

XLA's CPU code for each program a search compiles holds about 140 memory
mappings (the test model, 2+2 layers; more layers, more), and Linux allows a
process `vm.max_map_count` of them (65,530 by default). Past the limit the
next compile fails inside LLVM and the process aborts, whatever the request
was: so the server watches the count. Over half: a warning; over
`REFUSE_FRACTION`: the warm-up stops with an error that names the settings
to lower, and while serving, texts that would compile a new program (longer
than the warm-up reached) get a 503 while /readyz says why.
"""

from __future__ import annotations

from collections.abc import Callable

# Refuse new programs past this share of the limit: one batch compiles at
# most about 10 programs (1,400 mappings, 2% of Linux's default), so the
# rest is a margin of several batches.
REFUSE_FRACTION = 0.85

_LOWER = (
    "Lower --max-text-tokens (or --warmup-tokens), allow fewer settings "
    "(--allowed-beam-sizes, --allowed-alphas, --allowed-sampling, "
    "--allow-constraints) or a smaller --max-batch-size, or raise "
    "vm.max_map_count (sysctl -w vm.max_map_count=262144)."
)


def memory_maps() -> tuple[int, int] | None:
    """(memory mappings this process holds, the kernel's limit on them,
    vm.max_map_count); None where /proc does not say (not Linux)."""
    try:
        with open("/proc/self/maps", "rb") as lines:
            used = sum(1 for _ in lines)
        with open("/proc/sys/vm/max_map_count", encoding="ascii") as limit:
            return used, int(limit.read())
    except (OSError, ValueError):
        return None


def maps_running_short(
    maps: Callable[[], tuple[int, int] | None] = memory_maps,
) -> str | None:
    """A warning when over half the memory mappings the kernel allows are
    in use, else None."""
    found = maps()
    if found is None or found[0] <= found[1] // 2:
        return None
    used, limit = found
    return (
        f"this process holds {used:,} memory mappings of the {limit:,} the kernel "
        "allows (vm.max_map_count): each program XLA compiles for the CPU holds "
        f"about 140 more, and past {REFUSE_FRACTION:.0%} of them the server "
        f"compiles nothing more. {_LOWER}"
    )


def mappings_exhausted(
    maps: Callable[[], tuple[int, int] | None] = memory_maps,
) -> str | None:
    """Why no program may be compiled any more (over `REFUSE_FRACTION` of
    the limit), else None."""
    found = maps()
    if found is None or found[0] <= found[1] * REFUSE_FRACTION:
        return None
    used, limit = found
    return (
        f"this process holds {used:,} of the {limit:,} memory mappings the kernel "
        f"allows (vm.max_map_count), over {REFUSE_FRACTION:.0%}: another compiled "
        f"program could crash it. {_LOWER}"
    )
