"""int8 weights for an ONNX export: onnxruntime's dynamic quantization.

`export --format onnx --quantization int8` writes the float32 graphs,
checks them against the model, then rewrites both graphs here with
`onnxruntime.quantization.quantize_dynamic`: every MatMul with a constant
weight becomes a MatMulInteger on int8 weights (a scale per output channel)
and uint8 activations quantized per call (DynamicQuantizeLinear), which
onnxruntime's CPU kernels (VNNI, AVX2, NEON) run in integer arithmetic.
That is where int8 is faster on a CPU; Keras's int8 `Dense` quantizes its
input at every call and XLA:CPU has no int8 dot (docs/export.md).

One step before the quantizer: the output projection shares the embedding
(the paper's tied weights), so the traced step multiplies by
Transpose(embedding), which the quantizer skips as not a constant. The
transpose of a constant is folded into a constant of its own first, so the
largest product of a small model's step (d_model x vocabulary) is int8 too;
the embedding lookup (a Gather) keeps the float32 table.

Needs the `onnx` package (`[onnx-export]`); the quantized graphs run with
onnxruntime alone (`[onnx]`).
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

#: What `quantization` may be for an ONNX export (None: float32).
ONNX_QUANTIZATIONS = ("float32", "int8")


def quantize_graph(path: Path) -> None:
    """Rewrite the ONNX graph at `path` with int8 weights (in place)."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    graph = onnx.load(path)
    _fold_weight_transposes(graph)
    folded = path.with_name(path.name + ".folded")
    onnx.save(graph, folded)
    root = logging.getLogger()
    level = root.level
    # quantize_dynamic logs a warning to the root logger, suggesting a
    # pre-processing pass made for convolutional models.
    root.setLevel(logging.ERROR)
    try:
        quantize_dynamic(folded, path, weight_type=QuantType.QInt8, per_channel=True)
    finally:
        root.setLevel(level)
        folded.unlink()


def _fold_weight_transposes(graph) -> None:
    """Replace each Transpose of a constant that only MatMuls read by the
    transposed constant (see the module docstring)."""
    from onnx import numpy_helper

    constants = {tensor.name: tensor for tensor in graph.graph.initializer}
    readers: dict[str, list] = {}
    for node in graph.graph.node:
        for name in node.input:
            readers.setdefault(name, []).append(node)
    for node in list(graph.graph.node):
        if node.op_type != "Transpose" or node.input[0] not in constants:
            continue
        users = readers.get(node.output[0], [])
        if not users or any(user.op_type != "MatMul" for user in users):
            continue
        perm = next((list(a.ints) for a in node.attribute if a.name == "perm"), None)
        weight = numpy_helper.to_array(constants[node.input[0]])
        folded = np.ascontiguousarray(np.transpose(weight, perm))
        name = f"{node.output[0]}_folded"
        graph.graph.initializer.append(numpy_helper.from_array(folded, name))
        for user in users:
            user.input[:] = [name if i == node.output[0] else i for i in user.input]
        graph.graph.node.remove(node)
