"""``config(model_pruning=True)``: lossless removal of convolution channels whose weights are all zero.

An output channel *k* of a Conv (group 1) whose kernel and bias are all zero is the constant 0.
When that Conv feeds, through at most one zero-preserving activation (f(0)=0), only other group-1
Convs, channel *k* contributes nothing downstream: it is removed from the producer's output and from
every consumer's input. The model's results are unchanged (seed 002 §5.8 "lossless pruning").
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx
from onnx import numpy_helper

_ZERO_PRESERVING = {"Relu", "LeakyRelu", "HardSwish", "Tanh", "Elu", "Selu", "Softsign"}


@dataclass
class PruningReport:
    removed_channels: int = 0
    weight_bytes_before: int = 0
    weight_bytes_after: int = 0
    flops_before: float = 0.0
    flops_after: float = 0.0


def _attr(node: onnx.NodeProto, name: str, default):
    for a in node.attribute:
        if a.name == name:
            return onnx.helper.get_attribute_value(a)
    return default


def _conv_flops(model: onnx.ModelProto) -> float:
    shapes = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim]
              for v in list(model.graph.value_info) + list(model.graph.output)}
    inits = {i.name: i for i in model.graph.initializer}
    total = 0.0
    for node in model.graph.node:
        if node.op_type == "Conv" and node.input[1] in inits and node.output[0] in shapes:
            kernel = int(np.prod(inits[node.input[1]].dims))
            out = shapes[node.output[0]]
            total += 2.0 * kernel * (int(np.prod(out[2:])) if len(out) > 2 else 1)
    return total


def _zero_preserving(node: onnx.NodeProto, inits: dict) -> bool:
    if node.op_type in _ZERO_PRESERVING:
        return True
    if node.op_type == "Clip":
        bounds = [numpy_helper.to_array(inits[i]) if i in inits else None for i in node.input[1:3]]
        lo = bounds[0] if bounds and bounds[0] is not None else -np.inf
        hi = bounds[1] if len(bounds) > 1 and bounds[1] is not None else np.inf
        return bool(lo <= 0 <= hi)
    return False


def prune_zero_channels(model: onnx.ModelProto) -> tuple[onnx.ModelProto, PruningReport]:
    """Return the pruned model (a copy) and what was removed."""
    model = onnx.shape_inference.infer_shapes(model)
    report = PruningReport(flops_before=_conv_flops(model))
    report.weight_bytes_before = sum(numpy_helper.to_array(i).nbytes for i in model.graph.initializer)
    out = onnx.ModelProto()
    out.CopyFrom(model)
    inits = {i.name: i for i in out.graph.initializer}
    consumers: dict[str, list[onnx.NodeProto]] = {}
    for node in out.graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    outputs = {o.name for o in out.graph.output}
    for node in list(out.graph.node):
        if node.op_type == "Conv" and _attr(node, "group", 1) == 1 and node.input[1] in inits:
            report.removed_channels += _prune_conv(node, inits, consumers, outputs)
    if report.removed_channels:
        del out.graph.value_info[:]
        out = onnx.shape_inference.infer_shapes(out)
    report.weight_bytes_after = sum(numpy_helper.to_array(i).nbytes for i in out.graph.initializer)
    report.flops_after = _conv_flops(out)
    return out, report


def _prune_conv(node: onnx.NodeProto, inits: dict, consumers: dict, outputs: set[str]) -> int:
    weight = numpy_helper.to_array(inits[node.input[1]])
    bias = numpy_helper.to_array(inits[node.input[2]]) if len(node.input) > 2 and node.input[2] in inits else None
    dead = np.all(weight.reshape(weight.shape[0], -1) == 0, axis=1)
    if bias is not None:
        dead &= bias == 0
    if not dead.any() or dead.all():
        return 0
    users = _channel_users(node.output[0], inits, consumers, outputs)
    if users is None:
        return 0
    keep = np.flatnonzero(~dead)
    if any(_shared(inits, n.input[1], consumers) for n in users) or _shared(inits, node.input[1], consumers):
        return 0
    _replace(inits, node.input[1], weight[keep])
    if bias is not None:
        _replace(inits, node.input[2], bias[keep])
    for user in users:
        _replace(inits, user.input[1], numpy_helper.to_array(inits[user.input[1]])[:, keep])
    return int(dead.sum())


def _channel_users(tensor: str, inits: dict, consumers: dict, outputs: set[str]) -> list[onnx.NodeProto] | None:
    """The group-1 Convs reading ``tensor`` as data (through one zero-preserving activation), else None."""
    if tensor in outputs:
        return None
    direct = consumers.get(tensor, [])
    if len(direct) == 1 and _zero_preserving(direct[0], inits):
        activation = direct[0]
        if activation.output[0] in outputs:
            return None
        tensor = activation.output[0]
        direct = consumers.get(tensor, [])
    if not direct:
        return None
    for user in direct:
        if user.op_type != "Conv" or _attr(user, "group", 1) != 1 or user.input[0] != tensor:
            return None
        if user.input[1] not in inits or tensor in user.input[1:]:
            return None
    return direct


def _shared(inits: dict, name: str, consumers: dict) -> bool:
    return len(consumers.get(name, [])) > 1


def _replace(inits: dict, name: str, array: np.ndarray) -> None:
    inits[name].CopyFrom(numpy_helper.from_array(np.ascontiguousarray(array), name))
