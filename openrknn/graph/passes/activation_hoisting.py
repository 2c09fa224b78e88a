"""A Sigmoid after a Conv's Reshape/Transpose runs with the Conv, as rknn-toolkit2 2.5.0 runs it.

YOLOv5's detect head is ``Conv → Reshape(1,3,85,H,W) → Transpose → Sigmoid``; rknn-toolkit2
prints ``ConvSigmoid`` and the data layers after it (measured, yolov5n/s rk3588 int8). A Sigmoid
is element-wise, so it commutes with any Reshape/Transpose: applying it to the Conv's output and
moving the data after it is exact. The Sigmoid's output name stays the chain's last tensor.
"""
from __future__ import annotations

import onnx

from openrknn.graph.names import fresh_name
from openrknn.graph.passes.base import PassResult, consumers, graph_output_names

_ONNX = ("", "ai.onnx")
_DATA = frozenset({"Reshape", "Transpose"})


def hoist_sigmoids(model: onnx.ModelProto) -> PassResult:
    """Move every Sigmoid that reads a Conv through single-use Reshape/Transpose nodes next to the Conv."""
    graph = model.graph
    modified = False
    for sigmoid in [n for n in graph.node if n.op_type == "Sigmoid" and n.domain in _ONNX]:
        modified |= _hoist_one(graph, sigmoid)
    return PassResult(model, modified)


def _hoist_one(graph: onnx.GraphProto, sigmoid: onnx.NodeProto) -> bool:
    producer = {o: n for n in graph.node for o in n.output}
    readers = consumers(graph)
    outputs = graph_output_names(graph)
    chain: list[onnx.NodeProto] = []
    tensor = sigmoid.input[0]
    while True:
        node = producer.get(tensor)
        if node is None or len(readers.get(tensor, [])) != 1 or tensor in outputs:
            return False
        if node.op_type == "Conv" and node.domain in _ONNX:
            break
        if node.op_type not in _DATA or node.domain not in _ONNX:
            return False
        chain.insert(0, node)
        tensor = node.input[0]
    if not chain:
        return False   # already next to its Conv
    names = {o for n in graph.node for o in n.output} | {i.name for i in graph.initializer}
    activated = fresh_name(f"{tensor}_sigmoid", names)
    result = sigmoid.output[0]
    sigmoid.input[0], sigmoid.output[0] = tensor, activated
    chain[0].input[0] = activated
    chain[-1].output[0] = result   # the chain's inner tensors keep their names
    graph.node.remove(sigmoid)     # it now runs before the chain: keep the graph in topological order
    graph.node.insert(list(graph.node).index(chain[0]), sigmoid)
    return True
