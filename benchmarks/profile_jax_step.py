"""Where a JAX training step's time goes, op by op, from XLA's own trace.

`profile_step.py` finds costs by difference (remove a part, time again) on
either backend. This one reads them directly on JAX: it traces a few
compiled training steps with `jax.profiler`, matches every XLA:CPU thunk in
the trace to its instruction in the optimized HLO (dumped for the run), and
sums the time per kind of work:

- matmuls: dots (XNNPACK/YNNPACK fusions and plain dots), forward and
  backward;
- dropout's random bits: the threefry hash behind `keras.random.dropout`;
- vocabulary-wide elementwise: softmax, loss and metric work on the
  (B, T, V) logits, outside the output projection's matmuls;
- layout copies: transposes and copies XLA inserts between ops;
- other elementwise: layer norms, attention softmax, residuals, ReLU, the
  optimizer's update, embedding gathers and their gradients.

Thunks of one step may run concurrently on the CPU's cores, so the sum of
thunk times can exceed the step's wall time; shares are of the sum.

It then lists the costliest thunks outside the matmuls by name, with the
layer op they come from and the instruction that reads them (a layout copy
is read by the op it is laid out for, often a weight gradient's dot).

    KERAS_BACKEND=jax python benchmarks/profile_jax_step.py --size small
    KERAS_BACKEND=jax python benchmarks/profile_jax_step.py --keras-hub
"""

from __future__ import annotations

import collections
import gzip
import json
import os
import re
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (  # noqa: E402
    print_breakdown,
    print_costliest,
    profile_arguments,
    profiled_model,
)

KINDS = (
    "matmuls",
    "dropout random bits",
    "vocabulary-wide elementwise",
    "layout copies",
    "other elementwise",
)


def parse_hlo(text: str) -> dict[str, tuple[str, str]]:
    """Instruction name -> (its definition line, its op_name metadata), for
    the entry computation's instructions (the ones thunks are named after)."""
    instructions = {}
    for line in text.splitlines():
        match = re.match(r"\s*(?:ROOT )?%([\w.\-]+) = (.*)", line)
        if match and match.group(1) not in instructions:
            op_name = re.search(r'op_name="([^"]*)"', line)
            instructions[match.group(1)] = (
                match.group(2),
                op_name.group(1) if op_name else "",
            )
    return instructions


def kind_of(name: str, definition: str, op_name: str, vocab_size: int) -> str:
    shape = definition.split(" ", 1)[0]
    if name.startswith("ynn_fusion") or re.match(r"dot(\.\d+)?$", name):
        return "matmuls"
    if "_bernoulli" in op_name or "_uniform" in op_name or "threefry" in op_name:
        return "dropout random bits"
    if re.search(rf"\b{vocab_size}\b", shape) and "[" in shape:
        return "vocabulary-wide elementwise"
    if "copy" in name or "transpose" in name:
        return "layout copies"
    return "other elementwise"


PHASES = ("forward", "backward", "outside the gradient")


def phase(op_name: str) -> str:
    """Forward and backward ops are under `jvp(` and `transpose(jvp(` in
    the op names; the optimizer's update and the metrics are under neither."""
    if "transpose(jvp(" in op_name:
        return "backward"
    return "forward" if "jvp(" in op_name else "outside the gradient"


def thunk_times(trace_events, hlo, steps: int) -> collections.Counter:
    """ms per step of each traced thunk that names an entry instruction."""
    totals = collections.Counter()
    for event in trace_events:
        name = event.get("name", "")
        if event.get("ph") == "X" and name in hlo:
            totals[name] += event.get("dur", 0) / 1000 / steps
    return totals


def readers(text: str) -> dict[str, str]:
    """Instruction name -> the first instruction that reads it, so a layout
    copy can be listed with the op it is laid out for."""
    first = {}
    for line in text.splitlines():
        match = re.match(r"\s*(?:ROOT )?%([\w.\-]+) = [^(]*\((.*)", line)
        if match:
            for operand in re.findall(r"%([\w.\-]+)", match.group(2)):
                first.setdefault(operand, match.group(1))
    return first


def costliest(thunks, kinds, hlo, text: str):
    """Non-matmul thunks as (cells, ms): name, kind, the layer op that made
    it (its op_name without the jit/jvp wrapping) and the op reading it."""
    read_by = readers(text)
    rows = []
    for name, ms in thunks.items():
        if kinds[name] == "matmuls":
            continue
        origin = re.sub(r"\b(?:jit|jvp|transpose)\(|\)", "", hlo[name][1])
        origin = origin.removeprefix("train_step/") or "-"
        rows.append(((name, kinds[name], origin, read_by.get(name, "-")), ms))
    return rows


def main() -> None:
    parser = profile_arguments(__doc__.splitlines()[0])
    args = parser.parse_args()
    if os.environ.get("KERAS_BACKEND") != "jax":
        parser.error("run with KERAS_BACKEND=jax (this reads XLA:CPU's trace)")
    work = Path(tempfile.mkdtemp(prefix="profile_jax_step_"))
    # Set before jax starts: the optimized HLO names every thunk of the trace.
    os.environ["XLA_FLAGS"] = (
        os.environ.get("XLA_FLAGS", "")
        + f" --xla_dump_to={work / 'hlo'} --xla_dump_hlo_as_text"
        + " --xla_dump_hlo_pass_re=NONE"
    )
    import jax

    model, inputs, ids, wall_ms = profiled_model(args)
    with jax.profiler.trace(str(work / "trace"), create_perfetto_trace=True):
        for _ in range(args.steps):
            model.train_on_batch(inputs, ids)
    dumps = sorted((work / "hlo").glob("*train_step*after_optimizations.txt"))
    traces = list((work / "trace").rglob("*.trace.json.gz"))
    if not dumps or not traces:
        sys.exit(f"no optimized HLO or trace was written under {work}")
    text = dumps[-1].read_text()
    hlo = parse_hlo(text)
    events = json.load(gzip.open(traces[0]))
    events = events["traceEvents"] if isinstance(events, dict) else events
    thunks = thunk_times(events, hlo, args.steps)
    kinds = {name: kind_of(name, *hlo[name], args.vocab_size) for name in thunks}
    totals = collections.Counter()
    for name, ms in thunks.items():
        totals[kinds[name], phase(hlo[name][1])] += ms
    who = "keras-hub assembly" if args.keras_hub else "ours"
    print_breakdown(
        f"{who}, {args.size}, batch {args.rows} x {args.length}, vocabulary "
        f"{args.vocab_size:,}: {wall_ms:,.0f} ms per step (wall, untraced); XLA "
        f"thunk time {sum(totals.values()):,.0f} ms per step, by kind",
        totals,
        KINDS,
        PHASES,
    )
    print_costliest(
        ("thunk", "kind", "from", "read by"),
        costliest(thunks, kinds, hlo, text),
        args.top,
    )


if __name__ == "__main__":
    main()
