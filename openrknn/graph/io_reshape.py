"""``config(remove_reshape=True)``: drop shape-only ops at the model's inputs and outputs.

A Reshape/Flatten/Squeeze/Unsqueeze that produces a graph output is removed (the output becomes
its input tensor, under the output's name); one that only reshapes a graph input is folded into
the input's shape. The data are unchanged; only their shape at the model boundary changes, which
saves the CPU-side reshapes the guide warns about.
"""
from __future__ import annotations

import onnx
from onnx import helper

from openrknn import log

_SHAPE_ONLY = {"Reshape", "Flatten", "Squeeze", "Unsqueeze"}


def remove_boundary_reshapes(model: onnx.ModelProto) -> onnx.ModelProto:
    """Return a copy without the boundary reshapes (needs shape-inferred value_info)."""
    out = onnx.shape_inference.infer_shapes(model)
    shapes = {v.name: v for v in list(out.graph.value_info) + list(out.graph.input) + list(out.graph.output)}
    producers = {o: n for n in out.graph.node for o in n.output}
    consumers: dict[str, list[onnx.NodeProto]] = {}
    for node in out.graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    graph_inputs = {v.name for v in out.graph.input}
    removed = []
    for index, value in enumerate(list(out.graph.output)):
        node = producers.get(value.name)
        if node is None or node.op_type not in _SHAPE_ONLY or node.input[0] in graph_inputs:
            continue
        source = node.input[0]
        if len(consumers.get(source, [])) != 1 or source not in shapes:
            continue
        for other in out.graph.node:
            for i, name in enumerate(other.output):
                if name == source:
                    other.output[i] = value.name
        out.graph.node.remove(node)
        new_value = helper.make_tensor_value_info(value.name, shapes[source].type.tensor_type.elem_type,
                                                  [d.dim_value for d in shapes[source].type.tensor_type.shape.dim])
        out.graph.output[index].CopyFrom(new_value)
        removed.append(node.name or node.op_type)
    for value in out.graph.input:
        users = consumers.get(value.name, [])
        if len(users) != 1 or users[0].op_type not in _SHAPE_ONLY or users[0].output[0] not in shapes:
            continue
        node = users[0]
        target = shapes[node.output[0]]
        for other in out.graph.node:
            for i, name in enumerate(other.input):
                if name == node.output[0]:
                    other.input[i] = value.name
        out.graph.node.remove(node)
        value.type.CopyFrom(target.type)
        removed.append(node.name or node.op_type)
    if removed:
        log.info(f"remove_reshape: removed {removed}")
        del out.graph.value_info[:]
        out = onnx.shape_inference.infer_shapes(out)
    return out
