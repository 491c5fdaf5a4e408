"""Where a TensorFlow training step's time goes, op by op, from its own trace.

`profile_step.py` finds costs by difference on either backend;
`profile_jax_step.py` reads XLA:CPU's trace on JAX. This one traces a few
training steps with `tf.profiler`, reads every kernel TensorFlow's executor
ran (the `tf_Compute` threads of the trace; work a kernel hands to the Eigen
pool is inside its kernel's time) and sums them per step:

- by kind of work: matmuls, dropout's random bits, gathers and scatters
  (embedding lookups, and their gradients), layout transposes, the loss and
  metrics over the vocabulary (ops under `compile_loss` and
  `compile_metrics`, outside the output projection's matmul), the
  optimizer's update, and other elementwise work (layer norms, attention
  softmax, residuals, bias and ReLU gradients);
- by phase: forward, backward (`gradient_tape/`, and `AddN_*` summing a
  shared weight's gradients) and the optimizer;
- the most expensive kernels outside the matmuls, by name.

Kernels run concurrently on the CPU's cores, so their sum can exceed the
step's wall time; shares are of the sum.

    KERAS_BACKEND=tensorflow python benchmarks/profile_tf_step.py --size small
    KERAS_BACKEND=tensorflow python benchmarks/profile_tf_step.py --keras-hub
"""

from __future__ import annotations

import collections
import os
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
    "gathers and scatters",
    "layout transposes",
    "loss and metrics over the vocabulary",
    "optimizer update",
    "other elementwise",
)
PHASES = ("forward", "backward", "optimizer")


def kind_of(name: str, op_type: str) -> str:
    if "MatMul" in op_type:
        return "matmuls"
    if op_type.startswith("StatelessRandom"):
        return "dropout random bits"
    if op_type in ("GatherV2", "ResourceGather", "UnsortedSegmentSum", "ScatterNd"):
        return "gathers and scatters"
    if "Transpose" in op_type:
        return "layout transposes"
    if "compile_loss/" in name or "compile_metrics/" in name:
        return "loss and metrics over the vocabulary"
    if phase(name) == "optimizer":
        return "optimizer update"
    return "other elementwise"


def phase(name: str) -> str:
    # AddN_*: the gradients of a weight used in several places (the shared
    # embedding: source and target lookups, output projection) summed.
    if name.startswith(("gradient_tape/", "AddN")):
        return "backward"
    if name.startswith(("adam/", "Adam/", "Assign")):
        return "optimizer"
    return "forward"


def kernel_times(xplane_path: Path, steps: int) -> collections.Counter:
    """ms per step of each (kernel name, op type) on the executor threads."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    space = xplane_pb2.XSpace()
    space.ParseFromString(xplane_path.read_bytes())
    totals = collections.Counter()
    for plane in space.planes:
        for line in plane.lines:
            if not line.name.startswith("tf_Compute"):
                continue
            for event in line.events:
                full = plane.event_metadata[event.metadata_id].name
                name, _, op_type = full.rpartition(":")
                # Kernels are "name:OpType"; the executor's own events
                # ("ExecutorState::Process", "ParallelFor") wrap or split them.
                if not name or "::" in full:
                    continue
                totals[name, op_type] += event.duration_ps / 1e9 / steps
    return totals


def main() -> None:
    parser = profile_arguments(__doc__.splitlines()[0])
    args = parser.parse_args()
    if os.environ.get("KERAS_BACKEND") != "tensorflow":
        parser.error("run with KERAS_BACKEND=tensorflow (this reads its trace)")
    import tensorflow as tf

    model, inputs, ids, wall_ms = profiled_model(args)
    work = Path(tempfile.mkdtemp(prefix="profile_tf_step_"))
    tf.profiler.experimental.start(str(work))
    for _ in range(args.steps):
        model.train_on_batch(inputs, ids)
    tf.profiler.experimental.stop()
    planes = sorted(work.rglob("*.xplane.pb"))
    if not planes:
        sys.exit(f"no trace was written under {work}")
    kernels = kernel_times(planes[-1], args.steps)
    totals = collections.Counter()
    for (name, op_type), ms in kernels.items():
        totals[kind_of(name, op_type), phase(name)] += ms
    who = "keras-hub assembly" if args.keras_hub else "ours"
    print_breakdown(
        f"{who}, {args.size}, batch {args.rows} x {args.length}, vocabulary "
        f"{args.vocab_size:,}: {wall_ms:,.0f} ms per step (wall, untraced); "
        f"kernel time {sum(totals.values()):,.0f} ms per step, by kind",
        totals,
        KINDS,
        PHASES,
    )
    others = [(key, ms) for key, ms in kernels.items() if "MatMul" not in key[1]]
    print_costliest(("kernel", "op"), others, args.top)


if __name__ == "__main__":
    main()
