"""Drop a constant scale-and-offset pair that changes nothing, as rknn-toolkit2 2.5.0 does.

torch exports an untrained ``nn.GroupNorm`` as ``Reshape → InstanceNormalization → Reshape →
Mul(γ) → Add(β)`` with γ = 1 and β = 0 on every channel (the oracle corpus's FPN decoder).
rknn-toolkit2 removes such a ``Mul(x, 1) → Add(·, 0)`` pair: probes (rk3588, int8; docs/fidelity.md)
print no layer for it after a GroupNorm and after a MaxPool, with or without a ReLU after it,
while a trained pair (random γ, β) stays (``BatchNormalizationRelu`` before a ReLU). Only the pair
is handled here: a lone ``Add(x, 0)`` is ``zero_weights``' business, whose order the vendor's
late folds depend on.

Exact: multiplying by one and adding zero is the identity in float. A constant that would widen
``x`` by broadcasting (more axes, or a longer one) keeps the pair.
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import numpy_helper

from openrknn.graph.passes.base import PassResult, bypass_node, consumers, graph_output_names, initializers
from openrknn.graph.passes.constant_folding import static_shapes

_ONNX = ("", "ai.onnx")


def remove_identity_affines(model: onnx.ModelProto) -> PassResult:
    """Remove every ``Mul(x, ones) → Add(·, zeros)`` pair that keeps ``x``'s shape."""
    graph = model.graph
    pairs = _candidate_pairs(graph)
    if not pairs:
        return PassResult(model, False)
    shapes = static_shapes(model)   # only now: shape inference is the costly part
    inits = initializers(graph)
    modified = False
    for mul, add in pairs:
        data = _data_input(mul, inits)
        if data not in shapes or any(not _keeps_shape(shapes[data], inits[c]) for c in
                                     (_constant_input(mul, inits), _constant_input(add, inits))):
            continue
        if bypass_node(graph, add, mul.output[0]):
            modified |= bypass_node(graph, mul, data)
    return PassResult(model, modified)


def _candidate_pairs(graph: onnx.GraphProto) -> list[tuple[onnx.NodeProto, onnx.NodeProto]]:
    inits = initializers(graph)
    readers = consumers(graph)
    outputs = graph_output_names(graph)
    pairs = []
    for mul in graph.node:
        if not _constant_step(mul, "Mul", inits, 1.0) or mul.output[0] in outputs:
            continue
        after = readers.get(mul.output[0], [])
        if len(after) == 1 and _constant_step(after[0], "Add", inits, 0.0) \
                and _data_input(after[0], inits) == mul.output[0]:
            pairs.append((mul, after[0]))
    return pairs


def _constant_step(node: onnx.NodeProto, op_type: str, inits: dict[str, onnx.TensorProto], value: float) -> bool:
    """``node`` is ``op_type`` of one data tensor and one float initializer whose every value is ``value``."""
    if node.op_type != op_type or node.domain not in _ONNX or len(node.input) != 2 or len(node.output) != 1:
        return False
    constant = _constant_input(node, inits)
    if constant is None or _data_input(node, inits) is None:
        return False
    array = numpy_helper.to_array(inits[constant])
    return array.dtype.kind == "f" and array.size > 0 and bool(np.all(array == value))


def _constant_input(node: onnx.NodeProto, inits: dict[str, onnx.TensorProto]) -> str | None:
    found = [i for i in node.input if i in inits]
    return found[0] if len(found) == 1 else None


def _data_input(node: onnx.NodeProto, inits: dict[str, onnx.TensorProto]) -> str | None:
    found = [i for i in node.input if i and i not in inits]
    return found[0] if len(found) == 1 else None


def _keeps_shape(shape: list[int], constant: onnx.TensorProto) -> bool:
    try:
        return list(np.broadcast_shapes(tuple(shape), tuple(constant.dims))) == list(shape)
    except ValueError:
        return False
