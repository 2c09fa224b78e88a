"""Merge parallel convolutions summed by an ``Add`` into one convolution (RepVGG / MobileOne form).

rknn-toolkit2 2.5.0 runs ``Conv_k×k(x) + Conv_1×1(x)`` as one Conv and keeps an identity
BatchNorm branch as a ``BatchNormalization`` layer whose output the merged Conv adds
(``ConvAddRelu``; measured on timm's repvgg_a0 in its training form). With "same" padding and
one stride the two convolutions are one linear map:

    W = W_k + pad(W_1),   b = b_k + b_1      (the 1×1 kernel padded to k×k at the centre)

Values change only by float re-association, like BatchNorm folding.

Only stride-1 pairs are merged: rknn-toolkit2 runs a strided pair (RepVGG's and MobileOne's
down-sampling blocks) as two layers, ``Conv`` then ``ConvAdd[Relu]`` (measured on timm's repvgg_a0
and on probes with either branch exported first). It fuses the ``Add`` into the branch the exporter
wrote *first* and runs the other one before it, storing that one's output as int8. openrknn's layer
grouping fuses an ``Add`` into the Conv that runs last, so the pass moves the other branch in front
and marks it (``openrknn.branch_runs_first``), which keeps the order stable when passes repeat.

An identity branch summed with a stride-1 same-input Conv goes into the Conv as an identity kernel
when it is the input itself or a *default* ``BatchNormalization`` (γ = 1, β = 0, mean 0, variance 1,
an untrained MobileOne/RepVGG block): rknn-toolkit2 drops such a BN and runs the whole block as one
``ConvRelu`` (measured on timm's mobileone_s0 and on probes: 1×1 ×4, depthwise 3×3 ×4 + 1×1,
dense 3×3 + 1×1). A BN with trained values stays a ``BatchNormalization`` layer. The fold is exact:
the BN's own scale 1/√(1+ε) goes into the kernel's centre tap.
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import numpy_helper

from openrknn.graph.passes.base import PassResult, attribute, consumers, graph_output_names, initializers

RUNS_FIRST_KEY = "openrknn.branch_runs_first"   # on the branch of a strided pair that runs alone


def merge_parallel_branches(model: onnx.ModelProto) -> PassResult:
    """Merge every ``Add`` of two same-input stride-1 Conv branches; order strided pairs as
    rknn-toolkit2 runs them."""
    graph = model.graph
    modified = False
    for add in [n for n in graph.node if n.op_type == "Add" and n.domain in ("", "ai.onnx")]:
        if _merge_one(graph, add):
            modified = True
    return PassResult(model, modified)


def _sole_use(graph: onnx.GraphProto, name: str, reader: onnx.NodeProto) -> bool:
    return consumers(graph).get(name, []) == [reader] and name not in graph_output_names(graph)


def _same_conv(node: onnx.NodeProto, inits) -> tuple[np.ndarray, np.ndarray] | None:
    """(weight, bias) of a 2-D Conv with constant weights and "same" padding, else None."""
    if node.op_type != "Conv" or node.input[1] not in inits or attribute(node, "auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET"):
        return None
    w = numpy_helper.to_array(inits[node.input[1]]).astype(np.float64)
    if w.ndim != 4 or w.shape[2] % 2 == 0 or w.shape[3] % 2 == 0:
        return None
    pads = list(attribute(node, "pads", [0, 0, 0, 0]))
    if pads != [w.shape[2] // 2, w.shape[3] // 2] * 2 or any(d != 1 for d in attribute(node, "dilations", [1, 1])):
        return None
    if len(node.input) > 2 and node.input[2]:
        if node.input[2] not in inits:
            return None
        b = numpy_helper.to_array(inits[node.input[2]]).astype(np.float64)
    else:
        b = np.zeros(w.shape[0])
    return w, b


def _padded(w: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    dh, dw = (shape[2] - w.shape[2]) // 2, (shape[3] - w.shape[3]) // 2
    return np.pad(w, ((0, 0), (0, 0), (dh, dh), (dw, dw)))


def _merge_one(graph: onnx.GraphProto, add: onnx.NodeProto) -> bool:
    if len(add.input) != 2 or add.input[0] == add.input[1]:
        return False
    inits = initializers(graph)
    producer = {o: n for n in graph.node for o in n.output}
    for k in (0, 1):   # an identity branch: the Conv's own input, or a default BN of it
        conv = producer.get(add.input[k])
        if conv is not None and conv.op_type == "Conv" and add.input[1 - k] in (conv.input[0], *_bn_outputs_of(graph, conv.input[0])):
            weights = _same_conv(conv, inits)
            if weights is None or not _sole_use(graph, add.input[k], add):
                return False
            return _fold_identity_branch(graph, add, conv, weights, inits)
    a, b = producer.get(add.input[0]), producer.get(add.input[1])
    if a is None or b is None or not all(_sole_use(graph, t, add) for t in add.input):
        return False
    if a.op_type != "Conv":
        a, b = b, a
    first = _same_conv(a, inits) if a.op_type == "Conv" else None
    if first is None or b.input[0] != a.input[0]:
        return False
    group = attribute(a, "group", 1)
    strides = list(attribute(a, "strides", [1, 1]))
    second = _same_conv(b, inits)
    if (second is None or attribute(b, "group", 1) != group or list(attribute(b, "strides", [1, 1])) != strides
            or second[0].shape[:2] != first[0].shape[:2]):
        return False
    if any(s != 1 for s in strides):
        return _order_strided_pair(graph, a, b)
    shape = tuple(max(x, y) for x, y in zip(first[0].shape, second[0].shape))
    weight = _padded(first[0], shape) + _padded(second[0], shape)
    bias = first[1] + second[1]
    names = {i.name for i in graph.initializer}
    w_name, b_name = _fresh(f"{a.name or a.output[0]}_merged_w", names), _fresh(f"{a.name or a.output[0]}_merged_b", names)
    graph.initializer.extend([numpy_helper.from_array(weight.astype(np.float32), w_name),
                              numpy_helper.from_array(bias.astype(np.float32), b_name)])
    while len(a.input) < 3:
        a.input.append("")
    a.input[1], a.input[2] = w_name, b_name
    # the merged kernel's padding and size, also on a 1×1 Conv written without those attributes
    for attr in [x for x in a.attribute if x.name in ("pads", "kernel_shape")]:
        a.attribute.remove(attr)
    a.attribute.extend([onnx.helper.make_attribute("pads", [shape[2] // 2, shape[3] // 2] * 2),
                        onnx.helper.make_attribute("kernel_shape", [shape[2], shape[3]])])
    a.output[0] = add.output[0]
    graph.node.remove(b)
    graph.node.remove(add)
    return True


def _bn_outputs_of(graph: onnx.GraphProto, x: str) -> list[str]:
    return [n.output[0] for n in graph.node if n.op_type == "BatchNormalization" and n.input and n.input[0] == x]


def _default_batchnorm_affine(node: onnx.NodeProto, inits) -> tuple[np.ndarray, np.ndarray] | None:
    """(scale, shift) of a BatchNormalization with γ = 1, β = 0, mean 0, variance 1, else None."""
    if node.op_type != "BatchNormalization" or len(node.input) < 5 or len(node.output) > 1:
        return None
    if not all(name in inits for name in node.input[1:5]):
        return None
    gamma, beta, mean, var = (numpy_helper.to_array(inits[n]).astype(np.float64) for n in node.input[1:5])
    if not (np.all(gamma == 1) and np.all(beta == 0) and np.all(mean == 0) and np.all(var == 1)):
        return None
    scale = gamma / np.sqrt(var + attribute(node, "epsilon", 1e-5))
    return scale, beta - mean * scale


def _fold_identity_branch(graph: onnx.GraphProto, add: onnx.NodeProto, conv: onnx.NodeProto,
                          weights: tuple[np.ndarray, np.ndarray], inits) -> bool:
    """``Add(Conv(x), x)`` or ``Add(Conv(x), BN(x))`` with a default BN: one Conv whose kernel
    carries the identity (see the module docstring). True when the graph changed."""
    other = add.input[1] if add.input[0] == conv.output[0] else add.input[0]
    x = conv.input[0]
    w, b = weights
    if any(s != 1 for s in attribute(conv, "strides", [1, 1])) or w.shape[0] != w.shape[1] * attribute(conv, "group", 1):
        return False
    bn = None
    if other == x:
        scale, shift = np.ones(w.shape[0]), np.zeros(w.shape[0])
    else:
        bn = next((n for n in graph.node if other in n.output), None)
        affine = _default_batchnorm_affine(bn, inits) if bn is not None and bn.input[0] == x else None
        if affine is None or not _sole_use(graph, other, add):
            return False
        scale, shift = affine
    in_per_group = w.shape[1]
    w = w.copy()
    channels = np.arange(w.shape[0])
    w[channels, channels % in_per_group, w.shape[2] // 2, w.shape[3] // 2] += scale
    names = {i.name for i in graph.initializer}
    w_name = _fresh(f"{conv.name or conv.output[0]}_identity_w", names)
    b_name = _fresh(f"{conv.name or conv.output[0]}_identity_b", names)
    graph.initializer.extend([numpy_helper.from_array(w.astype(np.float32), w_name),
                              numpy_helper.from_array((b + shift).astype(np.float32), b_name)])
    while len(conv.input) < 3:
        conv.input.append("")
    conv.input[1], conv.input[2] = w_name, b_name
    conv.output[0] = add.output[0]
    if bn is not None:
        graph.node.remove(bn)
    graph.node.remove(add)
    return True


def _order_strided_pair(graph: onnx.GraphProto, a: onnx.NodeProto, b: onnx.NodeProto) -> bool:
    """Put the branch the exporter wrote second in front of the first one (once: it is marked), so
    the ``Add`` fuses into the first-written branch, as in rknn-toolkit2. True when the graph changed."""
    if any(p.key == RUNS_FIRST_KEY for node in (a, b) for p in node.metadata_props):
        return False
    nodes = list(graph.node)
    first, second = sorted((a, b), key=lambda n: next(i for i, m in enumerate(nodes) if m is n))
    moved = onnx.NodeProto()
    moved.CopyFrom(second)
    moved.metadata_props.add(key=RUNS_FIRST_KEY, value="1")
    position = next(i for i, m in enumerate(nodes) if m is first)
    graph.node.remove(second)
    graph.node.insert(position, moved)
    return True


def _fresh(name: str, taken: set[str]) -> str:
    candidate, k = name, 1
    while candidate in taken:
        candidate, k = f"{name}_{k}", k + 1
    taken.add(candidate)
    return candidate
