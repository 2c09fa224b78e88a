"""Lowering of float layers to NPU float16 semantics.

The NPU has no fp32 (seed 002 §3.1.4): weights are stored as fp16 and every layer reads and
writes fp16 tensors. We emulate that exactly where it matters for accuracy — every float
initializer and every float tensor a node produces is rounded to the nearest fp16 value
(``Cast(to=FLOAT16)`` then ``Cast(to=FLOAT)``) — while the arithmetic inside a layer runs in
fp32, as the NPU accumulates in higher precision.
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from openrknn.graph.npu_layers import internal_tensors

FLOAT16_SUFFIX = "__fp16"   # a float tensor rounded to float16 (T__fp16)

# Ops whose float outputs are fp16 values whenever their float inputs are: they move, select or
# compare values without arithmetic, so rounding after them would change nothing.
_EXACT_OPS = frozenset({
    "Relu", "MaxPool", "GlobalMaxPool", "Reshape", "Flatten", "Transpose", "Concat", "Slice", "Gather",
    "GatherElements", "GatherND", "Squeeze", "Unsqueeze", "Split", "Identity", "Expand", "Tile", "DepthToSpace",
    "SpaceToDepth", "ReduceMax", "ReduceMin", "Max", "Min", "Abs", "Neg", "Where", "Dropout", "Clip", "Pad",
    "Resize", "Upsample", "Sign", "Ceil", "Floor", "Round",
})


def round_to_fp16(array: np.ndarray) -> np.ndarray:
    """Round float32 values to the nearest float16 value, keeping float32 storage."""
    return array.astype(np.float16).astype(np.float32)


def float_tensor_names(model: onnx.ModelProto) -> set[str]:
    """Names of float32 tensors produced by nodes (needs shape-inferred value_info)."""
    types = {v.name: v.type.tensor_type.elem_type for v in
             list(model.graph.value_info) + list(model.graph.output) + list(model.graph.input)}
    produced = set()
    for node in model.graph.node:
        produced.update(o for o in node.output if o)
    return {n for n in produced if types.get(n) == onnx.TensorProto.FLOAT}


def lower_fp16(model: onnx.ModelProto, exclude: set[str] | None = None) -> onnx.ModelProto:
    """Return an executable copy of ``model`` with fp16 rounding after every float tensor.

    Args:
        model: structural float32 graph with value_info for every tensor.
        exclude: tensor names left in fp32 (e.g. layers forced to the CPU).
    """
    exclude = exclude or set()
    out = onnx.ModelProto()
    out.CopyFrom(model)
    graph = out.graph
    for init in graph.initializer:
        if init.data_type == onnx.TensorProto.FLOAT and init.name not in exclude:
            init.CopyFrom(numpy_helper.from_array(round_to_fp16(numpy_helper.to_array(init)), init.name))
    to_round = float_tensor_names(out) - exclude
    inits = {i.name for i in graph.initializer}
    for value in graph.input:
        if value.name not in inits and value.type.tensor_type.elem_type == onnx.TensorProto.FLOAT:
            to_round.add(value.name)
    graph_outputs = {o.name for o in graph.output}
    exact = set(inits)          # tensors already holding fp16 values
    renamed = {}
    new_nodes: list[onnx.NodeProto] = []
    input_names = {v.name for v in graph.input}
    for name in sorted(n for n in to_round if n in input_names):
        rounded = name + FLOAT16_SUFFIX
        new_nodes += _cast_pair(name, rounded)
        renamed[name] = rounded
        exact.add(name)
    fused = internal_tensors(graph)   # computed inside an NPU layer: never stored, so never rounded
    for node in graph.node:
        if node.op_type == "Constant" and _round_constant(node):
            exact.update(node.output)
            new_nodes.append(node)
            continue
        inputs_exact = all(not i or i in exact or i not in to_round for i in node.input)
        _rewire(node, renamed)
        new_nodes.append(node)
        for produced in node.output:
            if produced not in to_round:
                continue
            if produced not in graph_outputs and (
                    (node.op_type in _EXACT_OPS and inputs_exact and _exact_attributes(node)) or produced in fused):
                if produced not in fused:
                    exact.add(produced)
                continue
            exact.add(produced)
            if produced in graph_outputs:
                # Keep the graph output name: the node writes a raw tensor, the cast pair restores the name.
                raw = produced + "__fp32"
                node.output[list(node.output).index(produced)] = raw
                new_nodes += _cast_pair(raw, produced)
            else:
                rounded = produced + FLOAT16_SUFFIX
                new_nodes += _cast_pair(produced, rounded)
                renamed[produced] = rounded
    del graph.node[:]
    graph.node.extend(new_nodes)
    del graph.value_info[:]
    return out


def _round_constant(node: onnx.NodeProto) -> bool:
    """Round a float Constant's value in place (it is a weight like any initializer)."""
    for attr in node.attribute:
        if attr.name == "value" and attr.t.data_type == onnx.TensorProto.FLOAT:
            attr.t.CopyFrom(numpy_helper.from_array(round_to_fp16(numpy_helper.to_array(attr.t)), attr.t.name))
            return True
        if attr.name in ("value_float", "value_floats"):
            if attr.name == "value_float":
                attr.f = float(np.float16(attr.f))
            else:
                attr.floats[:] = [float(np.float16(v)) for v in attr.floats]
            return True
    return False


def _exact_attributes(node: onnx.NodeProto) -> bool:
    """Pad's constant and Resize's interpolation must not create new values."""
    if node.op_type == "Resize":
        mode = next((a.s for a in node.attribute if a.name == "mode"), b"nearest")
        return mode == b"nearest"
    if node.op_type == "Upsample":
        mode = next((a.s for a in node.attribute if a.name == "mode"), b"nearest")
        return mode == b"nearest"
    return True


def _cast_pair(src: str, dst: str) -> list[onnx.NodeProto]:
    half = dst + "__half"
    return [helper.make_node("Cast", [src], [half], to=onnx.TensorProto.FLOAT16, name=half + "_cast"),
            helper.make_node("Cast", [half], [dst], to=onnx.TensorProto.FLOAT, name=dst + "_cast")]


def _rewire(node: onnx.NodeProto, renamed: dict[str, str]) -> None:
    for i, name in enumerate(node.input):
        if name in renamed:
            node.input[i] = renamed[name]
