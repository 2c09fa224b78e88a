"""Graph normalisations the quantizer relies on: constants as initializers, depthwise equalization.

BatchNorm and per-channel affine folding are the graph passes' (``openrknn.graph.passes``): the
quantizer runs those same passes, so the folded weights it quantizes are the layer's.
"""
from __future__ import annotations

from collections import Counter

import numpy as np
import onnx
from onnx import numpy_helper


def constants_to_initializers(model: onnx.ModelProto) -> None:
    """Turn ``Constant`` nodes with a tensor value into initializers of the same name (in place)."""
    keep = []
    for node in model.graph.node:
        array = _constant_value(node) if node.op_type == "Constant" and node.domain in ("", "ai.onnx") else None
        if array is None:
            keep.append(node)
            continue
        model.graph.initializer.append(numpy_helper.from_array(array, node.output[0]))
    del model.graph.node[:]
    model.graph.node.extend(keep)


def _constant_value(node: onnx.NodeProto) -> np.ndarray | None:
    for attr in node.attribute:
        if attr.name == "value":
            return numpy_helper.to_array(attr.t)
        if attr.name == "value_float":
            return np.array(attr.f, np.float32)
        if attr.name == "value_floats":
            return np.array(list(attr.floats), np.float32)
        if attr.name == "value_int":
            return np.array(attr.i, np.int64)
        if attr.name == "value_ints":
            return np.array(list(attr.ints), np.int64)
    return None


def _set_init(graph: onnx.GraphProto, inits, name: str, array: np.ndarray) -> None:
    tensor = numpy_helper.from_array(array, name)
    if name in inits:
        inits[name].CopyFrom(tensor)
    else:
        graph.initializer.append(tensor)
        inits[name] = graph.initializer[-1]


# Layers a positive per-channel factor passes through unchanged: f(x / s) = f(x) / s for s > 0.
_HOMOGENEOUS = frozenset({"Relu", "LeakyRelu", "Identity"})
MAX_GAIN = 256.0


def depthwise_pairs(model: onnx.ModelProto) -> list[tuple[onnx.NodeProto, onnx.NodeProto, str]]:
    """``(producer Conv, depthwise Conv, tensor)`` triples that equalization may rescale.

    The producer's output reaches the depthwise Conv's input ``tensor`` directly or through
    positively homogeneous layers (Relu, LeakyRelu, Identity); every tensor on the way has one
    reader and is no graph output, and both Convs have constant weights (and bias).
    """
    graph = model.graph
    inits = {i.name: i for i in graph.initializer}
    uses = Counter(name for node in graph.node for name in node.input)
    outputs = {o.name for o in graph.output}
    producer = {o: n for n in graph.node for o in n.output}
    pairs = []
    for dw in graph.node:
        if dw.op_type != "Conv" or dw.input[1] not in inits or not _is_depthwise(dw, inits[dw.input[1]]):
            continue
        tensor, node = dw.input[0], producer.get(dw.input[0])
        while node is not None and node.op_type in _HOMOGENEOUS and uses[node.output[0]] == 1 \
                and node.output[0] not in outputs:
            node = producer.get(node.input[0])
        chain_ok = node is not None and node.op_type == "Conv" and all(
            uses[t] == 1 and t not in outputs for t in _chain(node, dw, producer))
        if chain_ok and all(n in inits for n in node.input[1:] if n) \
                and inits[node.input[1]].dims[0] == inits[dw.input[1]].dims[0]:
            pairs.append((node, dw, tensor))
    return pairs


def _is_depthwise(node: onnx.NodeProto, weight: onnx.TensorProto) -> bool:
    group = next((a.i for a in node.attribute if a.name == "group"), 1)
    return group > 1 and len(weight.dims) >= 3 and weight.dims[1] == 1 and weight.dims[0] == group


def _chain(first: onnx.NodeProto, last: onnx.NodeProto, producer: dict) -> list[str]:
    """Tensors from ``first``'s output to ``last``'s input (walking back from ``last``)."""
    names, tensor = [], last.input[0]
    while True:
        names.append(tensor)
        node = producer[tensor]
        if node is first:
            return names
        tensor = node.input[0]


def equalization_scales(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Per-channel factors ``s_c = r_c / max(r)``, ``r_c = max(|lo_c|, |hi_c|)``, within ``[1/MAX_GAIN, 1]``.

    Dividing channel ``c`` by ``s_c`` gives every channel the range of the widest one, so a
    per-tensor activation scale spends its 256 levels on every channel alike.
    """
    r = np.maximum(np.abs(np.asarray(lo, np.float64)), np.abs(np.asarray(hi, np.float64)))
    top = r.max() if r.size else 0.0
    if top <= 0:
        return np.ones_like(r)
    return np.where(r > 0, np.clip(r / top, 1.0 / MAX_GAIN, 1.0), 1.0)


def equalize_depthwise(model: onnx.ModelProto, samples, method: str = "channel", custom_ops=None) -> int:
    """Cross-layer equalization of ``Conv → [Relu] → depthwise Conv`` activations (in place).

    With ``s_c`` from :func:`equalization_scales` on the calibration ranges of each channel of the
    tensor between the two layers::

        W1'[c] = W1[c] / s_c,   b1'[c] = b1[c] / s_c,   W2'[c] = W2[c] · s_c

    which leaves the depthwise Conv's output unchanged (the layers between are positively
    homogeneous). Per-channel weight scales absorb the factors exactly, so only per-tensor
    (``layer``) weights are left alone. One pass over ``samples``, reading only those tensors.
    Returns the number of pairs rescaled. ``custom_ops``: the registry that runs custom-op layers.
    """
    if method == "layer":
        return 0
    pairs = depthwise_pairs(model)
    if not pairs:
        return 0
    from openrknn.quant.calibrate import channel_ranges
    ranges = channel_ranges(model, [t for _, _, t in pairs], samples, custom_ops)
    graph = model.graph
    inits = {i.name: i for i in graph.initializer}
    uses = Counter(name for node in graph.node for name in node.input)
    count = 0
    for first, dw, tensor in pairs:
        if tensor not in ranges or ranges[tensor][0].size != inits[dw.input[1]].dims[0]:
            continue
        s = equalization_scales(*ranges[tensor])
        if np.all(s == 1.0):
            continue
        _scale_rows(graph, inits, uses, first, 1, 1.0 / s)
        if len(first.input) > 2 and first.input[2]:
            _scale_rows(graph, inits, uses, first, 2, 1.0 / s)
        _scale_rows(graph, inits, uses, dw, 1, s)
        count += 1
    return count


def _scale_rows(graph: onnx.GraphProto, inits, uses: Counter, node: onnx.NodeProto, index: int,
                factor: np.ndarray) -> None:
    """Multiply row ``c`` (axis 0) of the initializer at ``node.input[index]`` by ``factor[c]``."""
    name = node.input[index]
    array = numpy_helper.to_array(inits[name]).astype(np.float64)
    scaled = (array * factor.reshape([-1] + [1] * (array.ndim - 1))).astype(np.float32)
    new_name = name if uses[name] == 1 else f"{name}__equalized_{node.output[0]}"
    _set_init(graph, inits, new_name, scaled)
    node.input[index] = new_name
