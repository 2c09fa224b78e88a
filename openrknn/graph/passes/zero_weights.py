"""Convolutions whose weights are all zero, folded as rknn-toolkit2 2.5.0 folds them.

timm zero-initialises the last BatchNorm of every residual branch (``zero_init_last``), so an
exported random-weight ResNet-D has branch Convs with all-zero folded weights: each computes its
bias, whatever its input. Measured on probe graphs and on timm's resnet18d (rk3588, int8, every
``optimization_level``; see docs/fidelity.md), rknn-toolkit2's loader does, in this order:

1. ``fold_constant``: a Conv whose weight initializer is all zero becomes a constant (its bias
   broadcast to the output shape); the branch feeding it goes. A weight read through an
   ``Identity`` (torch's exporter deduplicates equal initializers that way) is folded only in a
   later round, after step 2 has run;
2. ``remove_invalid_add``: ``Add(x, c)`` with ``c`` all zero (not widening ``x``) goes;
   ``eliminate_add_redundancy_const_dim``: a ``c`` that is constant along every axis but the
   channel one shrinks to ``[1, C, 1, 1]`` (a new Add named ``<x>_add``; after a Conv it is then
   folded into the Conv's bias, ``fuse_add_into_conv``);
3. the late constants of step 1 stay full-size operands of their Add (``AddRelu`` reading two
   ``N×C×H×W`` tensors). So do the branches whose zero comes from an unfolded BatchNorm,
   ``Conv → BatchNormalization(γ = 0)``: rknn-toolkit2 folds the BN into the Conv after step 2,
   and the Conv, now all zero, in its second ``fold_constant`` (the constant is β).

Each step is exact in float: a zero-weight Conv outputs its bias for every finite input, adding
zero is the identity, and a constant broadcast along H and W is the same per-channel constant.
The ``Relu(Relu(x))`` left behind is :mod:`openrknn.graph.passes.repeated_relus`' business.
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import numpy_helper

from openrknn.graph.names import fresh_name
from openrknn.graph.passes.base import PassResult, bypass_node, consumers, graph_output_names, initializers
from openrknn.graph.passes.constant_folding import static_shapes
from openrknn.graph.passes.eliminate import remove_dead_nodes

_ONNX = ("", "ai.onnx")


def fold_zero_weight_convs(model: onnx.ModelProto) -> PassResult:
    """Replace all-zero-weight Convs by their constant output and simplify the Adds reading them."""
    graph = model.graph
    inits = initializers(graph)
    aliases = {n.output[0]: n.input[0] for n in graph.node
               if n.op_type == "Identity" and n.domain in _ONNX and n.input and n.input[0] in inits}
    zero = [n for n in graph.node if n.op_type == "Conv" and n.domain in _ONNX and len(n.input) > 1
            and _all_zero(_constant(n.input[1], inits, aliases))]
    zero_norms = _zero_scale_norms(graph, inits, aliases)
    if not zero and not zero_norms:
        return PassResult(model, False)
    shapes = static_shapes(model)
    outputs = graph_output_names(graph)
    early: list[str] = []
    modified = False
    for conv, norm in zero_norms:
        out = norm.output[0]
        beta = numpy_helper.to_array(_constant(norm.input[2], inits, aliases))
        if out in outputs or conv.output[0] in outputs or out not in shapes:
            continue
        graph.node.remove(conv)
        graph.node.remove(norm)
        graph.initializer.append(numpy_helper.from_array(_broadcast_bias(beta, shapes[out]), out))
        modified = True
    for conv in zero:
        out = conv.output[0]
        bias = _bias(conv, inits, aliases)
        if out in outputs or out not in shapes or bias is None:
            continue
        graph.node.remove(conv)
        graph.initializer.append(numpy_helper.from_array(_broadcast_bias(bias, shapes[out]), out))
        if conv.input[1] in inits:   # read directly: folded before the Add rules run
            early.append(out)
        modified = True
    for constant in early:
        for add in [n for n in consumers(graph).get(constant, []) if n.op_type == "Add" and n.domain in _ONNX]:
            _simplify_constant_add(graph, add, constant, shapes)
    if modified:
        remove_dead_nodes(model)   # the branch that fed the folded Conv (also at level 0)
    return PassResult(model, modified)


def _zero_scale_norms(graph: onnx.GraphProto, inits: dict[str, onnx.TensorProto],
                      aliases: dict[str, str]) -> list[tuple[onnx.NodeProto, onnx.NodeProto]]:
    """(Conv, BatchNormalization) pairs where the BN alone reads the Conv and its scale γ is all zero."""
    producer = {o: n for n in graph.node for o in n.output}
    readers = consumers(graph)
    pairs = []
    for norm in graph.node:
        if norm.op_type != "BatchNormalization" or norm.domain not in _ONNX or len(norm.input) < 5 \
                or len(norm.output) != 1 or not _all_zero(_constant(norm.input[1], inits, aliases)) \
                or _constant(norm.input[2], inits, aliases) is None:
            continue
        conv = producer.get(norm.input[0])
        if conv is not None and conv.op_type == "Conv" and conv.domain in _ONNX and len(readers[norm.input[0]]) == 1:
            pairs.append((conv, norm))
    return pairs


def _all_zero(init: onnx.TensorProto | None) -> bool:
    if init is None:
        return False
    value = numpy_helper.to_array(init)
    return value.size > 0 and value.dtype.kind == "f" and not np.any(value != 0)


def _bias(conv: onnx.NodeProto, inits: dict[str, onnx.TensorProto], aliases: dict[str, str]) -> np.ndarray | None:
    """The Conv's bias (zeros when it has none), or None when it is not a constant."""
    weight = numpy_helper.to_array(_constant(conv.input[1], inits, aliases))
    if len(conv.input) < 3 or not conv.input[2]:
        return np.zeros(weight.shape[0], weight.dtype)
    init = _constant(conv.input[2], inits, aliases)
    return None if init is None else numpy_helper.to_array(init)


def _constant(name: str, inits: dict[str, onnx.TensorProto], aliases: dict[str, str]) -> onnx.TensorProto | None:
    """The initializer ``name`` is, directly or through an Identity."""
    return inits[name] if name in inits else inits.get(aliases.get(name, ""))


def _broadcast_bias(bias: np.ndarray, shape: list[int]) -> np.ndarray:
    per_channel = bias.reshape((1, -1) + (1,) * (len(shape) - 2))
    return np.ascontiguousarray(np.broadcast_to(per_channel, shape)).astype(bias.dtype)


def _simplify_constant_add(graph: onnx.GraphProto, add: onnx.NodeProto, constant: str,
                           shapes: dict[str, list[int]]) -> None:
    """``Add(x, c)``: gone when ``c`` is zero, ``c`` one value per channel when it is constant along H, W."""
    if len(add.input) != 2 or add.input[0] == add.input[1]:
        return
    data = add.input[1] if add.input[0] == constant else add.input[0]
    if data in initializers(graph) or data not in shapes:
        return
    value = numpy_helper.to_array(initializers(graph)[constant])
    if list(np.broadcast_shapes(tuple(shapes[data]), value.shape)) != shapes[data]:
        return   # the constant widens x: not an elementwise no-op
    if not np.any(value != 0):
        bypass_node(graph, add, data)   # a graph output keeps its name (``x``'s producer writes it)
        return
    per_channel = value[(slice(None), slice(None)) + (slice(0, 1),) * (value.ndim - 2)]
    if value.ndim < 3 or not np.array_equal(np.broadcast_to(per_channel, value.shape), value):
        return
    name = fresh_name(f"{constant}_channel", {i.name for i in graph.initializer})
    graph.initializer.append(numpy_helper.from_array(np.ascontiguousarray(per_channel), name))
    add.input[list(add.input).index(constant)] = name
    add.name = fresh_name(f"{data}_add", {n.name for n in graph.node})   # rknn-toolkit2's new node

