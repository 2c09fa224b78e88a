"""Fold a per-channel constant ``Mul`` / ``Add`` / ``Sub`` after a Conv into its weights and bias.

Frameworks that keep batch normalisation unfused (Keras graphs frozen by TensorFlow) emit
``Conv → Mul(γ') → Add(β')``. With ``c`` broadcasting as one value per output channel:

    (W·x + b) · c = (W·c)·x + b·c          (W scaled along its output-channel axis)
    (W·x + b) ± c =  W·x + (b ± c)
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import numpy_helper

from openrknn.graph.passes.base import (PassResult, consumers, fold_into_producer, graph_output_names, initializers,
                                        replace_initializer)

_FOLDABLE = ("Mul", "Add", "Sub")


def fold_channel_affine(model: onnx.ModelProto) -> PassResult:
    """Fold every foldable constant Mul/Add/Sub that is the only reader of a Conv output."""
    graph = model.graph
    modified = False
    for node in [n for n in graph.node if n.op_type in _FOLDABLE and n.domain in ("", "ai.onnx")]:
        if _fold_one(graph, node):
            modified = True
    return PassResult(model, modified)


def _fold_one(graph: onnx.GraphProto, node: onnx.NodeProto) -> bool:
    inits = initializers(graph)
    data = [i for i in node.input if i not in inits]
    if len(node.input) != 2 or len(data) != 1 or (node.op_type == "Sub" and node.input[1] in data):
        return False
    producer = next((n for n in graph.node if data[0] in n.output), None)
    if producer is None or producer.op_type != "Conv" or producer.input[1] not in inits:
        return False
    if len(consumers(graph).get(data[0], [])) != 1 or data[0] in graph_output_names(graph):
        return False
    weight = numpy_helper.to_array(inits[producer.input[1]]).astype(np.float64)
    channels = weight.shape[0]
    constant = _per_channel(numpy_helper.to_array(inits[next(i for i in node.input if i in inits)]),
                            channels, weight.ndim)
    if constant is None:
        return False
    has_bias = len(producer.input) > 2 and bool(producer.input[2])
    if has_bias and producer.input[2] not in inits:
        return False
    bias = numpy_helper.to_array(inits[producer.input[2]]).astype(np.float64) if has_bias else np.zeros(channels)
    if node.op_type == "Mul":
        weight = weight * constant.reshape((-1,) + (1,) * (weight.ndim - 1))
        bias = bias * constant
        replace_initializer(graph, producer, 1, producer.name + "_affine_w", weight.astype(np.float32))
    else:
        bias = bias + constant if node.op_type == "Add" else bias - constant
    fold_into_producer(graph, producer, node, bias, producer.name + "_affine_b")
    return True


def _per_channel(value: np.ndarray, channels: int, rank: int) -> np.ndarray | None:
    """``value`` as one float per output channel if it broadcasts that way onto an N×C×… tensor."""
    if value.dtype.kind != "f" or value.ndim > rank:
        return None
    shape = (1,) * (rank - value.ndim) + value.shape
    if any(d != 1 for i, d in enumerate(shape) if i != 1) or shape[1] not in (1, channels):
        return None
    return np.broadcast_to(value.reshape(-1).astype(np.float64), (channels,)).copy()
