"""Graph normalisations the quantizer relies on: constants as initializers, depthwise equalization.

BatchNorm and per-channel affine folding are the graph passes' (``openrknn.graph.passes``): the
quantizer runs those same passes, so the folded weights it quantizes are the layer's.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import numpy_helper

from openrknn import log
from openrknn.quant.calibrate import merge_channel_range, tensor_values


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


def _fresh(name: str, uses: Counter) -> str:
    return name if uses[name] == 1 else f"{name}__folded"


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


def equalization_scales(lo: np.ndarray, hi: np.ndarray, headroom: float = 1.0) -> np.ndarray:
    """Per-channel factors ``s_c = min(1, headroom · r_c / max(r))``, ``r_c = max(|lo_c|, |hi_c|)``, ≥ 1/MAX_GAIN.

    Dividing channel ``c`` by ``s_c`` raises its range to ``max(r) / headroom``: a per-tensor
    activation scale spends its 256 levels on every channel alike, and a channel can still
    exceed its calibration maximum ``headroom`` times on other pictures before it is clipped.
    """
    r = np.maximum(np.abs(np.asarray(lo, np.float64)), np.abs(np.asarray(hi, np.float64)))
    top = r.max() if r.size else 0.0
    if top <= 0:
        return np.ones_like(r)
    return np.where(r > 0, np.clip(headroom * r / top, 1.0 / MAX_GAIN, 1.0), 1.0)


# Equalization raises narrow channels towards the widest one using calibration maxima; on other
# pictures a channel may exceed its own maximum, and would then be clipped at the tensor's range.
# So each channel keeps HEADROOM× its calibration range, and every rescale is checked on a held-out
# part of the calibration set (every HELD_OUT_EVERY-th sample): it is applied only where the
# tensor's int8 error on the held-out samples, in the original units, goes down.
HEADROOM = 2.0
HELD_OUT_EVERY = 3
_LEVELS = 255


@dataclass
class EqualizationReport:
    """What :func:`equalize_depthwise` did: rescaled tensors, and candidates it left alone."""

    applied: list[str] = field(default_factory=list)
    rejected: list[str] = field(default_factory=list)     # more held-out error with the rescale
    unchecked: bool = False                                  # too few samples to hold some out

    def summary(self) -> str:
        total = len(self.applied) + len(self.rejected)
        text = f"depthwise equalization rescaled {len(self.applied)} of {total} Conv→depthwise pair(s)"
        if self.rejected:
            text += (f"; kept {len(self.rejected)} as they were (no lower int8 error on held-out calibration "
                     f"samples): {', '.join(self.rejected[:6])}{' …' if len(self.rejected) > 6 else ''}")
        if self.unchecked:
            text += f"; fewer than {HELD_OUT_EVERY} samples, so not checked on held-out ones"
        return text


def held_out_indices(count: int) -> set[int]:
    """The calibration samples a rewrite is checked on (every ``HELD_OUT_EVERY``-th; none when fewer)."""
    return set(range(HELD_OUT_EVERY - 1, count, HELD_OUT_EVERY)) if count >= HELD_OUT_EVERY else set()


def _int8_error(value: np.ndarray, lo: float, hi: float, s: np.ndarray | None = None) -> float:
    """Squared error of per-tensor asymmetric int8 on ``value / s`` over [lo, hi], in the units of ``value``."""
    x = value if s is None else value / s.reshape((1, -1) + (1,) * (value.ndim - 2))
    lo, hi = min(lo, 0.0), max(hi, 0.0)
    step = (hi - lo) / _LEVELS if hi > lo else 1.0
    q = np.clip(np.round((x - lo) / step), 0, _LEVELS) * step + lo
    diff = (x - q) if s is None else (x - q) * s.reshape((1, -1) + (1,) * (value.ndim - 2))
    return float(np.sum(np.square(diff, dtype=np.float64)))


def _equalization_plan(model: onnx.ModelProto, tensors: list[str], samples, custom_ops):
    """Scales per tensor (from all samples) and the tensors whose rescale lost on held-out samples."""
    samples = list(samples)
    held = held_out_indices(len(samples))
    fit = [x for i, x in enumerate(samples) if i not in held]
    ranges: dict = {}
    for values in tensor_values(model, tensors, fit, custom_ops):
        for name, value in values.items():
            merge_channel_range(ranges, name, value)
    if not held:
        return {t: equalization_scales(*ranges[t], HEADROOM) for t in ranges}, set(), True
    fit_scales = {t: equalization_scales(*ranges[t], HEADROOM) for t in ranges}
    fit_limits = {}
    for t, (lo, hi) in ranges.items():
        s = fit_scales[t]
        fit_limits[t] = ((float(lo.min()), float(hi.max())), (float((lo / s).min()), float((hi / s).max())))
    errors = {t: [0.0, 0.0] for t in ranges}
    for values in tensor_values(model, tensors, [samples[i] for i in sorted(held)], custom_ops):
        for name, value in values.items():
            if name not in ranges or value.ndim < 2 or value.shape[1] != ranges[name][0].size:
                continue
            (lo0, hi0), (lo1, hi1) = fit_limits[name]
            errors[name][0] += _int8_error(value, lo0, hi0)
            errors[name][1] += _int8_error(value, lo1, hi1, fit_scales[name])
            merge_channel_range(ranges, name, value)
    rejected = {t for t, (plain, equalized) in errors.items() if not equalized < plain}
    return {t: equalization_scales(*ranges[t], HEADROOM) for t in ranges}, rejected, False


def equalize_depthwise(model: onnx.ModelProto, samples, method: str = "channel", custom_ops=None) -> int:
    """Cross-layer equalization of ``Conv → [Relu] → depthwise Conv`` activations (in place).

    With ``s_c`` from :func:`equalization_scales` on the calibration ranges of each channel of the
    tensor between the two layers::

        W1'[c] = W1[c] / s_c,   b1'[c] = b1[c] / s_c,   W2'[c] = W2[c] · s_c

    which leaves the depthwise Conv's output unchanged (the layers between are positively
    homogeneous). Per-channel weight scales absorb the factors exactly, so only per-tensor
    (``layer``) weights are left alone. Each channel keeps ``HEADROOM``× its range, and a rescale
    is applied only where it lowers the int8 error on held-out calibration samples (one ``I`` line
    says which). Returns the number of pairs rescaled. ``custom_ops``: the registry that runs
    custom-op layers.
    """
    if method == "layer":
        return 0
    pairs = depthwise_pairs(model)
    if not pairs:
        return 0
    scales, rejected, unchecked = _equalization_plan(model, [t for _, _, t in pairs], samples, custom_ops)
    graph = model.graph
    inits = {i.name: i for i in graph.initializer}
    uses = Counter(name for node in graph.node for name in node.input)
    report = EqualizationReport(unchecked=unchecked)
    for first, dw, tensor in pairs:
        if tensor not in scales or scales[tensor].size != inits[dw.input[1]].dims[0]:
            continue
        s = scales[tensor]
        if np.all(s == 1.0):
            continue
        if tensor in rejected:
            report.rejected.append(tensor)
            continue
        _scale_rows(graph, inits, uses, first, 1, 1.0 / s)
        if len(first.input) > 2 and first.input[2]:
            _scale_rows(graph, inits, uses, first, 2, 1.0 / s)
        _scale_rows(graph, inits, uses, dw, 1, s)
        report.applied.append(tensor)
    if report.applied or report.rejected:
        log.info(f"quantize: {report.summary()}")
    return len(report.applied)


def _scale_rows(graph: onnx.GraphProto, inits, uses: Counter, node: onnx.NodeProto, index: int,
                factor: np.ndarray) -> None:
    """Multiply row ``c`` (axis 0) of the initializer at ``node.input[index]`` by ``factor[c]``."""
    name = node.input[index]
    array = numpy_helper.to_array(inits[name]).astype(np.float64)
    scaled = (array * factor.reshape([-1] + [1] * (array.ndim - 1))).astype(np.float32)
    new_name = name if uses[name] == 1 else f"{name}__equalized_{node.output[0]}"
    _set_init(graph, inits, new_name, scaled)
    node.input[index] = new_name
