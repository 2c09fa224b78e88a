"""Graph normalisations the quantizer relies on: constants as initializers, BatchNorm folded into Conv.

On the NPU a Conv, its BatchNorm and its activation are one layer with one output tensor, so
the folded weights are what gets quantized. Both rewrites keep every surviving tensor name.
"""
from __future__ import annotations

from collections import Counter

import numpy as np
import onnx
from onnx import numpy_helper

from openrknn.quant.calibrate import channel_ranges


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


# Layers whose constant inputs get integer parameters of their own (weights, int32 bias).
_PARAMETERISED = frozenset({"Conv", "ConvTranspose", "Gemm", "MatMul"})


def unshare_parameters(model: onnx.ModelProto) -> int:
    """Give every weighted layer its own copy of each constant it reads (in place); returns the copies.

    Quantization parameters belong to a (tensor, consumer) pair: an int32 bias is in units of the
    reader's ``s_x·s_w``, and bias correction or folding adds a per-layer term to it. A detection
    head applied to every pyramid level, or equal biases that the exporter merged into one
    initializer (read directly or through ``Identity`` aliases), would otherwise hand every reader
    but one parameters made for another input. After this rewrite each constant input of a
    Conv/ConvTranspose/Gemm/MatMul has exactly one reader, so everything keyed by a tensor name
    (``quant_params``, the hybrid cfg, the .rknn header, the TFLite export) is keyed per consumer.
    The first reader keeps the original name; the others read ``{name}__{their output}``.
    Shared weights quantize to the same scales (same values), unless a reader's bias needs more.
    """
    graph = model.graph
    inits = {i.name: i for i in graph.initializer}
    outputs = {o.name for o in graph.output}
    aliases = {n.output[0]: n.input[0] for n in graph.node
               if n.op_type == "Identity" and n.domain in ("", "ai.onnx") and n.input and n.input[0] in inits
               and n.output[0] not in outputs}
    readers: dict[str, int] = {}
    others: set[str] = set()   # constants also read by a layer that keeps them float
    for node in graph.node:
        parameterised = node.op_type in _PARAMETERISED and node.domain in ("", "ai.onnx")
        for name in node.input:
            name = aliases.get(name, name)
            readers[name] = readers.get(name, 0) + 1
            if not parameterised:
                others.add(name)
    seen: set[str] = set()
    copies = 0
    for node in graph.node:
        if node.op_type not in _PARAMETERISED or node.domain not in ("", "ai.onnx"):
            continue
        for index, name in enumerate(node.input):
            source = aliases.get(name, name)
            if source not in inits:
                continue
            if readers[source] == 1 or (source not in seen and source not in others):   # the first keeps the name
                seen.add(source)
                node.input[index] = source
                continue
            copy_name = f"{source}__{node.output[0]}"
            while copy_name in inits:
                copy_name += "_"
            copy = onnx.TensorProto()
            copy.CopyFrom(inits[source])
            copy.name = copy_name
            graph.initializer.append(copy)
            inits[copy_name] = graph.initializer[-1]
            node.input[index] = copy_name
            copies += 1
    if aliases:   # Identity nodes of constants nobody reads any more
        still_read = {name for node in graph.node for name in node.input}
        keep = [n for n in graph.node if not (n.op_type == "Identity" and n.output[0] in aliases
                                              and n.output[0] not in still_read)]
        del graph.node[:]
        graph.node.extend(keep)
    return copies


def fold_batchnorm(model: onnx.ModelProto) -> int:
    """Fold ``Conv → BatchNormalization`` pairs (constant parameters, single use); returns the count."""
    graph = model.graph
    inits = {i.name: i for i in graph.initializer}
    uses = Counter(name for node in graph.node for name in node.input)
    outputs = {o.name for o in graph.output}
    producer = {o: n for n in graph.node for o in n.output}
    removed, folded = set(), 0
    for bn in graph.node:
        if bn.op_type != "BatchNormalization" or len(bn.output) != 1 and any(bn.output[1:]):
            continue
        conv = producer.get(bn.input[0])
        if (conv is None or conv.op_type != "Conv" or uses[bn.input[0]] != 1 or bn.input[0] in outputs
                or not all(n in inits for n in list(bn.input[1:5]) + list(conv.input[1:]))):
            continue
        _fold_pair(graph, conv, bn, inits, uses)
        removed.add(id(bn))
        folded += 1
    if removed:
        keep = [n for n in graph.node if id(n) not in removed]
        del graph.node[:]
        graph.node.extend(keep)
    return folded


def _fold_pair(graph: onnx.GraphProto, conv: onnx.NodeProto, bn: onnx.NodeProto, inits, uses) -> None:
    eps = next((a.f for a in bn.attribute if a.name == "epsilon"), 1e-5)
    scale, bias, mean, var = (numpy_helper.to_array(inits[n]).astype(np.float64) for n in bn.input[1:5])
    weight = numpy_helper.to_array(inits[conv.input[1]]).astype(np.float64)
    old_bias = numpy_helper.to_array(inits[conv.input[2]]).astype(np.float64) if len(conv.input) > 2 and conv.input[2] \
        else np.zeros(weight.shape[0])
    factor = scale / np.sqrt(var + eps)
    new_w = (weight * factor.reshape([-1] + [1] * (weight.ndim - 1))).astype(np.float32)
    new_b = ((old_bias - mean) * factor + bias).astype(np.float32)
    w_name, b_name = _fresh(conv.input[1], uses), f"{bn.output[0]}__bias"
    _set_init(graph, inits, w_name, new_w)
    _set_init(graph, inits, b_name, new_b)
    while len(conv.input) < 3:
        conv.input.append("")
    conv.input[1], conv.input[2] = w_name, b_name
    conv.output[0] = bn.output[0]


def _fresh(name: str, uses: Counter) -> str:
    return name if uses[name] == 1 else f"{name}__folded"


def _set_init(graph: onnx.GraphProto, inits, name: str, array: np.ndarray) -> None:
    tensor = numpy_helper.from_array(array, name)
    if name in inits:
        inits[name].CopyFrom(tensor)
    else:
        graph.initializer.append(tensor)
        inits[name] = graph.initializer[-1]


def fold_affine(model: onnx.ModelProto) -> int:
    """Fold constant per-channel ``Mul``/``Add`` after a Conv into its weights and bias, repeatedly."""
    total = 0
    while True:
        count = fold_bias_add(model, "Mul") + fold_bias_add(model, "Add")
        total += count
        if not count:
            return total


def fold_bias_add(model: onnx.ModelProto, op_type: str = "Add") -> int:
    """Fold ``Conv → Add|Mul(constant per-channel vector)`` into the Conv; returns the count.

    ``Add``: ``b' = b + v``. ``Mul``: ``W'[c] = W[c]·v[c]``, ``b' = b·v``.
    """
    graph = model.graph
    inits = {i.name: i for i in graph.initializer}
    uses = Counter(name for node in graph.node for name in node.input)
    outputs = {o.name for o in graph.output}
    producer = {o: n for n in graph.node for o in n.output}
    removed = set()
    for add in graph.node:
        if add.op_type != op_type or len(add.input) != 2:
            continue
        const = next((i for i in add.input if i in inits), None)
        data = next((i for i in add.input if i not in inits), None)
        conv = producer.get(data) if data else None
        if (const is None or conv is None or conv.op_type != "Conv" or uses[data] != 1 or data in outputs
                or conv.input[1] not in inits or (len(conv.input) > 2 and conv.input[2] and conv.input[2] not in inits)):
            continue
        channels = inits[conv.input[1]].dims[0]
        vector = _channel_vector(numpy_helper.to_array(inits[const]), channels, len(inits[conv.input[1]].dims))
        if vector is None:
            continue
        old = numpy_helper.to_array(inits[conv.input[2]]) if len(conv.input) > 2 and conv.input[2] else \
            np.zeros(channels, np.float32)
        while len(conv.input) < 3:
            conv.input.append("")
        b_name = f"{add.output[0]}__bias"
        if op_type == "Mul":
            weight = numpy_helper.to_array(inits[conv.input[1]])
            w_name = f"{add.output[0]}__weight"
            scaled = weight * vector.reshape([-1] + [1] * (weight.ndim - 1))
            _set_init(graph, inits, w_name, scaled.astype(np.float32))
            conv.input[1] = w_name
            new_bias = np.asarray(old, np.float32) * vector
        else:
            new_bias = np.asarray(old, np.float32) + vector
        _set_init(graph, inits, b_name, new_bias.astype(np.float32))
        conv.input[2] = b_name
        conv.output[0] = add.output[0]
        removed.add(id(add))
    if removed:
        keep = [n for n in graph.node if id(n) not in removed]
        del graph.node[:]
        graph.node.extend(keep)
    return len(removed)


def _channel_vector(array: np.ndarray, channels: int, rank: int) -> np.ndarray | None:
    """The per-channel vector of a constant broadcast against an NC... tensor, or None."""
    if array.size == 1:
        return np.full(channels, float(array.ravel()[0]), np.float32)
    shape = list(array.shape)
    if array.size != channels or len(shape) > rank:
        return None
    shape = [1] * (rank - len(shape)) + shape
    if shape[1] != channels:
        return None
    return array.ravel().astype(np.float32)


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
