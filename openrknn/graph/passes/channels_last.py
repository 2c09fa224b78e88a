"""Channels-last blocks run channel-first: the ``Transpose`` pair around them vanishes.

ConvNeXt (torchvision, timm) writes its blocks as ``Transpose(0,2,3,1) → LayerNorm(last axis) →
Linear → GELU → Linear → Transpose(0,3,1,2)``, and its downsampling / head norms as the same pair
around a LayerNorm alone. rknn-toolkit2 2.5.0 runs such a region on the NCHW tensor: no Transpose
layer, an ``exNorm`` over the channels, each Linear a 1×1 ``Conv`` (the GELU fused:
``ConvExGelu``), and the layer-scale ``Mul`` + residual ``Add`` after the second Linear fused into
it (``ConvAdd``) — measured on probe blocks at opset 13 (decomposed LayerNorm) and 17
(``LayerNormalization``), and on torchvision's convnext_tiny (no Transpose among its 86 layers).

The rewrite is exact: every op of the region acts on the last axis or element-wise, so with the
axes renamed it computes the same values on the channel-first tensor —

* ``ReduceMean`` over NHWC axes → the same axes of NCHW (keepdims);
* ``MatMul(x, W)`` with a constant ``W[Cin, Cout]`` → ``Conv`` with the 1×1 kernel ``Wᵀ``;
* an element-wise constant of shape ``[C]`` (or one value) → ``[C, 1, 1]``;
* ``LayerNormalization`` over the last axis → its definition over axis 1 (``ReduceMean``, ``Sub``,
  ``Pow``, ``Sqrt``, ``Div``, γ, β), the form the layer graph runs as one ``exNorm`` layer.

The constant ``Add``/``Mul`` after a new ``Conv`` (the Linear's bias, ConvNeXt's layer scale) are
then folded into it by ``affine_folding``, and the residual ``Add`` joins it in the layer graph.
A region is rewritten only when it is closed: its data come from the first Transpose alone and
leave only through ``Transpose(0,3,1,2)`` nodes.
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from openrknn import log
from openrknn.graph.names import fresh_name
from openrknn.graph.passes.base import PassResult, attribute, constant_axes, consumers, graph_output_names, initializers, replace_input

_TO_LAST = [0, 2, 3, 1]
_TO_FIRST = [0, 3, 1, 2]
# Element-wise ops: the same on either layout once their constants broadcast along the channels.
_ELEMENTWISE = frozenset({"Add", "Sub", "Mul", "Div", "Pow", "Sqrt", "Erf", "Relu", "Sigmoid", "Tanh", "Reciprocal",
                          "Neg", "Abs", "Exp", "Softplus", "HardSigmoid", "HardSwish", "Gelu", "Clip", "Identity"})
_MAX_REGION_NODES = 64


def lower_channels_last(model: onnx.ModelProto) -> PassResult:
    """Rewrite every closed ``Transpose(0,2,3,1) … Transpose(0,3,1,2)`` region channel-first."""
    graph = model.graph
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 17)
    modified = False
    for first in list(graph.node):
        if first in graph.node and _is_transpose(first, _TO_LAST):
            modified |= _lower_region(graph, first, opset)
    return PassResult(model, modified)


def _is_transpose(node: onnx.NodeProto, perm: list[int]) -> bool:
    return node.op_type == "Transpose" and node.domain in ("", "ai.onnx") and list(attribute(node, "perm") or []) == perm


def _region(graph: onnx.GraphProto, first: onnx.NodeProto, inits) -> tuple[list, list] | None:
    """(region nodes in graph order, closing Transposes) of the channels-last region after
    ``first``, or None when it is not closed or holds an op this pass cannot move."""
    readers = consumers(graph)
    outputs = graph_output_names(graph)
    region: list[onnx.NodeProto] = []
    exits: list[onnx.NodeProto] = []
    known = {first.output[0]}
    frontier = [first.output[0]]
    while frontier:
        tensor = frontier.pop()
        if tensor in outputs:
            return None
        for reader in readers.get(tensor, []):
            if any(reader is n for n in region) or any(reader is n for n in exits):
                continue
            if _is_transpose(reader, _TO_FIRST):
                exits.append(reader)
                continue
            if not _movable(reader, inits) or len(region) >= _MAX_REGION_NODES:
                return None
            region.append(reader)
            for out in reader.output:
                if out:
                    known.add(out)
                    frontier.append(out)
    if not exits or not region:
        return None
    for node in region:   # every data input from inside the region: nothing else is channels-last
        if any(i and i not in known and i not in inits for i in node.input):
            return None
    if any(e.output[0] in outputs for e in exits):
        return None
    position = {id(n): k for k, n in enumerate(graph.node)}
    return sorted(region, key=lambda n: position[id(n)]), exits


def _movable(node: onnx.NodeProto, inits) -> bool:
    if node.domain not in ("", "ai.onnx"):
        return False
    op = node.op_type
    if op in _ELEMENTWISE:
        return all(_channel_constant(inits[i]) is not None for i in node.input if i in inits)
    if op == "ReduceMean":
        return attribute(node, "keepdims", 1) == 1 and _reduce_axes(node, inits) is not None
    if op == "MatMul":
        return node.input[1] in inits and inits[node.input[1]].dims.__len__() == 2 and node.input[0] not in inits
    if op == "LayerNormalization":
        return (attribute(node, "axis", -1) in (-1, 3) and len([o for o in node.output if o]) == 1
                and all(i in inits for i in node.input[1:] if i))
    return False


def _channel_constant(tensor: onnx.TensorProto) -> np.ndarray | None:
    """A constant broadcast along the last axis (one value, or ``[.., 1, C]``) as its channel-first
    form (one value, or ``[C, 1, 1]``); None for anything else."""
    value = numpy_helper.to_array(tensor)
    if value.size == 1:
        return value
    if value.ndim > 4 or any(d != 1 for d in value.shape[:-1]):
        return None
    return value.reshape(-1, 1, 1)


def _reduce_axes(node: onnx.NodeProto, inits) -> list[int] | None:
    axes = constant_axes(node, inits)
    if not axes:
        return None
    return [_TO_LAST[a % 4] for a in axes]


def _lower_region(graph: onnx.GraphProto, first: onnx.NodeProto, opset: int) -> bool:
    inits = initializers(graph)
    found = _region(graph, first, inits)
    if found is None:
        return False
    region, exits = found
    taken = {i.name for i in graph.initializer}
    taken_nodes = {n.name for n in graph.node}

    def constant(hint: str, value: np.ndarray) -> str:
        name = fresh_name(hint, taken)
        graph.initializer.append(numpy_helper.from_array(np.ascontiguousarray(value), name))
        return name

    for node in region:
        op = node.op_type
        if op in _ELEMENTWISE:
            for k, name in enumerate(node.input):
                if name in inits and inits[name].dims and numpy_helper.to_array(inits[name]).size > 1:
                    node.input[k] = constant(f"{name}_nchw", _channel_constant(inits[name]))
        elif op == "ReduceMean":
            axes = _reduce_axes(node, inits)
            _set_reduce_axes(node, axes, opset, constant)
        elif op == "MatMul":
            weight = numpy_helper.to_array(inits[node.input[1]])
            node.op_type = "Conv"
            node.input[1] = constant(f"{node.input[1]}_1x1", weight.T.reshape(weight.shape[1], weight.shape[0], 1, 1))
            _take_bias(graph, node, weight.shape[1], region, inits, constant)
        elif op == "LayerNormalization":
            _decompose_layer_norm(graph, node, inits, opset, constant, taken_nodes)
    region = [n for n in region if any(n is m for m in graph.node)]
    for node in exits:
        replace_input(graph, node.output[0], node.input[0])
        graph.node.remove(node)
    replace_input(graph, first.output[0], first.input[0])
    graph.node.remove(first)
    moved = {o for n in region for o in n.output} | {first.output[0]} | {e.output[0] for e in exits}
    keep = [v for v in graph.value_info if v.name not in moved]   # their channels-last shapes no longer hold
    del graph.value_info[:]
    graph.value_info.extend(keep)
    log.debug(f"channels-last region after '{first.name or first.output[0]}' ({len(region)} nodes) runs "
              f"channel-first: {1 + len(exits)} Transposes removed")
    return True


def _take_bias(graph: onnx.GraphProto, conv: onnx.NodeProto, channels: int, region: list, inits, constant) -> None:
    """The Linear's bias ``Add`` becomes the new Conv's bias, the Conv keeping the MatMul's output
    name (rknn-toolkit2 names the layer's stored tensor after it: ``<MatMul out>_sw_sw``)."""
    readers = [n for n in graph.node if conv.output[0] in n.input]
    if len(readers) != 1 or readers[0].op_type != "Add" or not any(readers[0] is n for n in region):
        return
    add = readers[0]
    bias = [i for i in add.input if i in inits]
    if len(bias) != 1 or len(add.input) != 2:
        return
    value = numpy_helper.to_array(inits[bias[0]]).astype(np.float32)
    if value.size != 1 and (value.size != channels or _channel_constant(inits[bias[0]]) is None):
        return
    conv.input.append(constant(f"{bias[0]}_conv_bias", np.broadcast_to(value.ravel(), (channels,)).copy()))
    replace_input(graph, add.output[0], conv.output[0])
    graph.node.remove(add)


def _set_reduce_axes(node: onnx.NodeProto, axes: list[int], opset: int, constant) -> None:
    if opset >= 18:
        while len(node.input) < 2:
            node.input.append("")
        node.input[1] = constant(f"{node.name or node.output[0]}_axes", np.array(axes, np.int64))
        return
    for attr in node.attribute:
        if attr.name == "axes":
            del attr.ints[:]
            attr.ints.extend(axes)


def _decompose_layer_norm(graph: onnx.GraphProto, node: onnx.NodeProto, inits, opset: int, constant,
                          taken_nodes: set[str]) -> None:
    """``LayerNormalization`` over the last NHWC axis, written out over NCHW's axis 1 in place."""
    base = node.name or node.output[0]
    epsilon = attribute(node, "epsilon", 1e-5)
    x, out = node.input[0], node.output[0]
    scale = numpy_helper.to_array(inits[node.input[1]]).astype(np.float32)
    bias_name = node.input[2] if len(node.input) > 2 and node.input[2] else None
    t = {k: f"{base}_{k}" for k in ("mean", "centred", "square", "var", "var_eps", "std", "normed", "scaled")}

    def reduce_mean(name: str, source: str, target: str) -> onnx.NodeProto:
        if opset >= 18:
            return helper.make_node("ReduceMean", [source, constant(f"{base}_axes", np.array([1], np.int64))],
                                    [target], name=name, keepdims=1)
        return helper.make_node("ReduceMean", [source], [target], name=name, axes=[1], keepdims=1)

    def name(hint: str) -> str:
        return fresh_name(hint, taken_nodes)

    last = t["scaled"] if bias_name else out
    nodes = [reduce_mean(name(f"{base}_ReduceMean"), x, t["mean"]),
             helper.make_node("Sub", [x, t["mean"]], [t["centred"]], name=name(f"{base}_Sub")),
             helper.make_node("Pow", [t["centred"], constant(f"{base}_two", np.array(2.0, np.float32))], [t["square"]],
                              name=name(f"{base}_Pow")),
             reduce_mean(name(f"{base}_ReduceMean_1"), t["square"], t["var"]),
             helper.make_node("Add", [t["var"], constant(f"{base}_epsilon", np.array(epsilon, np.float32))],
                              [t["var_eps"]], name=name(f"{base}_Add")),
             helper.make_node("Sqrt", [t["var_eps"]], [t["std"]], name=name(f"{base}_Sqrt")),
             helper.make_node("Div", [t["centred"], t["std"]], [t["normed"]], name=name(f"{base}_Div")),
             helper.make_node("Mul", [t["normed"], constant(f"{base}_gamma", _channel_constant(
                 numpy_helper.from_array(scale)))], [last], name=name(f"{base}_Mul"))]
    if bias_name:
        bias = numpy_helper.to_array(inits[bias_name]).astype(np.float32)
        nodes.append(helper.make_node("Add", [last, constant(f"{base}_beta", _channel_constant(
            numpy_helper.from_array(bias)))], [out], name=name(f"{base}_Add_1")))
    # the first node keeps the LayerNormalization's name: rknn-toolkit2 names the layer after it
    nodes[0].name = node.name or nodes[0].name
    index = list(graph.node).index(node)
    graph.node.remove(node)
    for k, new in enumerate(nodes):
        graph.node.insert(index + k, new)
