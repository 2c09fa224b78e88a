"""Element-wise activations moved before the data layers they read, as rknn-toolkit2 2.5.0 moves them.

YOLOv5's detect head is ``Conv → Reshape(1,3,85,H,W) → Transpose → Sigmoid``; rknn-toolkit2
prints ``ConvSigmoid`` and the data layers after it (measured, yolov5n/s rk3588 int8).

A ReLU or a Clip with constant bounds that reads a Reshape runs before it, whatever computed the
Reshape's input (probes, rk3588 int8: an untrained GroupNorm's ``InstanceNormalization → Reshape
→ Relu`` prints ``exNorm``, ``Relu``, ``Reshape`` and stores the Relu's output as
``<reshape output>_sw``; ``MaxPool → Reshape → Relu → Reshape`` prints ``MaxPool``, ``Relu``, the
Reshape pair gone). The activation's input is then the producer's output, which takes the
activation's quantization (``quant/annotate``: a Relu layer of its own gives its input its parameters).

An element-wise activation commutes with any Reshape/Transpose: the move is exact. The
activation's output name stays the chain's last tensor.
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


def hoist_activations_over_reshapes(model: onnx.ModelProto) -> PassResult:
    """Move every Relu / constant-bound Clip that reads single-use Reshapes before them."""
    graph = model.graph
    modified = False
    for activation in [n for n in graph.node if n.op_type in _RESHAPE_ACTIVATIONS and n.domain in _ONNX]:
        if _constant_bounds(graph, activation):
            modified |= _hoist_one(graph, activation, stop=_not_a_reshape, data=frozenset({"Reshape"}), suffix="_sw")
    return PassResult(model, modified)


_RESHAPE_ACTIVATIONS = frozenset({"Relu", "Clip"})


def _constant_bounds(graph: onnx.GraphProto, node: onnx.NodeProto) -> bool:
    constants = {i.name for i in graph.initializer}
    return all(not name or name in constants for name in node.input[1:])


def _not_a_reshape(node: onnx.NodeProto) -> bool:
    return not (node.op_type == "Reshape" and node.domain in _ONNX)


def _is_conv(node: onnx.NodeProto) -> bool:
    return node.op_type == "Conv" and node.domain in _ONNX


def _hoist_one(graph: onnx.GraphProto, activation: onnx.NodeProto, stop=_is_conv, data: frozenset[str] = _DATA,
               suffix: str | None = None) -> bool:
    """Move ``activation`` (an element-wise activation) before the single-use ``data`` nodes it reads,
    up to the node ``stop`` accepts. Its new output is named after the chain's first input
    (``<input>_sigmoid``), or with ``suffix`` after the tensor it read (rknn-toolkit2's ``_sw``)."""
    producer = {o: n for n in graph.node for o in n.output}
    readers = consumers(graph)
    outputs = graph_output_names(graph)
    chain: list[onnx.NodeProto] = []
    tensor = activation.input[0]
    while True:
        node = producer.get(tensor)
        if node is None or len(readers.get(tensor, [])) != 1 or tensor in outputs:
            return False
        if stop(node):
            break
        if node.op_type not in data or node.domain not in _ONNX:
            return False
        chain.insert(0, node)
        tensor = node.input[0]
    if not chain:
        return False   # already next to its Conv
    names = {o for n in graph.node for o in n.output} | {i.name for i in graph.initializer}
    activated = fresh_name(f"{activation.input[0]}{suffix}" if suffix else f"{tensor}_sigmoid", names)
    result = activation.output[0]
    activation.input[0], activation.output[0] = tensor, activated
    chain[0].input[0] = activated
    chain[-1].output[0] = result   # the chain's inner tensors keep their names
    graph.node.remove(activation)     # it now runs before the chain: keep the graph in topological order
    graph.node.insert(list(graph.node).index(chain[0]), activation)
    return True
