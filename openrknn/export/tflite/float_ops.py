"""ONNX nodes as TFLite operators on float32 tensors (the steps the NPU model computes in float32),
and the layout-sensitive ops shared with the int8 path (pooling, reshape, transpose, concat)."""
from __future__ import annotations

from typing import Any, Callable

import numpy as np
import onnx
from onnx import helper, numpy_helper

from openrknn.errors import NotSupportedError
from openrknn.export.tflite import layout
from openrknn.export.tflite.flatbuffer import Quant
from openrknn.quant import annotate


def _attrs(node: onnx.NodeProto) -> dict[str, Any]:
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _float_out(ex, name: str, perm: tuple[int, ...] | None = None) -> int:
    label = f"{name}/float" if name in ex.params else name
    ex.f[name] = ex.new_tensor(name, "float32", perm=perm, label=label)
    return ex.f[name]


def _out(ex, y: str, integer: bool, perm: tuple[int, ...] | None = None) -> int:
    """The output tensor of ``y``: int8 with the model's parameters, or float32."""
    if integer:
        ex.q[y] = ex.new_tensor(y, "int8", ex.staged.get(y) or ex.act_quant(y), perm)
        return ex.q[y]
    return _float_out(ex, y, perm)


def _operand(ex, name: str, rank: int, perm: tuple[int, ...]) -> int:
    """A float input of an element-wise op, stored like its rank-``rank`` output."""
    if name in ex.inits and name not in ex.q:
        array = ex.dequantized_init(name)
        return ex.const(f"{name}/{''.join(map(str, perm))}", layout.constant_for(array, rank, perm), "float32")
    if ex.rank(name) == rank:
        return ex.in_perm(name, perm, False)
    if ex.rank(name) > 1 and any(d != 1 for d in ex.shapes[name]):
        raise NotSupportedError(f"broadcasting a {ex.rank(name)}-D tensor '{name}' to rank {rank} "
                                 "is not exported")
    return ex.need_f(name)


def binary(op: str) -> Callable:
    options = {"ADD": "AddOptions", "SUB": "SubOptions", "MUL": "MulOptions", "DIV": "DivOptions"}.get(op)

    def convert(ex, node: onnx.NodeProto, integer: bool = False) -> None:
        y = node.output[0]
        perm = ex.storage(y)
        if integer:   # int8 operands of the output's rank (integer_rescaling_ok)
            inputs = [ex.in_perm(i, perm, True) for i in node.input]
        else:
            inputs = [_operand(ex, i, ex.rank(y), perm) for i in node.input]
        ex.emit(op, inputs, [_out(ex, y, integer)], options)
    return convert


def unary(op: str, options: str | None = None, **fields) -> Callable:
    def convert(ex, node: onnx.NodeProto, integer: bool = False) -> None:
        y = node.output[0]
        source = ex.in_perm(node.input[0], ex.storage(y), integer)
        ex.emit(op, [source], [_out(ex, y, integer)], options, **fields)
    return convert


def _clamp(ex, source: int, y: str, lo: float, hi: float) -> None:
    stage = source
    if np.isfinite(lo):
        stage_out = ex.new_tensor(y, "float32", label=f"{y}/max") if np.isfinite(hi) else _float_out(ex, y)
        ex.emit("MAXIMUM", [stage, ex.const(f"{y}/lo", np.array(lo, np.float32), "float32")], [stage_out])
        stage = stage_out
    if np.isfinite(hi):
        ex.emit("MINIMUM", [stage, ex.const(f"{y}/hi", np.array(hi, np.float32), "float32")], [_float_out(ex, y)])
    if not (np.isfinite(lo) or np.isfinite(hi)):
        ex.emit("RESHAPE", [stage, ex.const(f"{y}/shape", np.array(ex.out.tensors[stage].shape), "int32")],
                [_float_out(ex, y)])


def clip(ex, node: onnx.NodeProto) -> None:
    y = node.output[0]
    lo, hi = annotate.clip_bounds(node, {k: _as_tensor(v) for k, v in ex.inits.items()})
    _clamp(ex, ex.in_perm(node.input[0], ex.storage(y), False), y, lo, hi)


def _as_tensor(array: np.ndarray) -> onnx.TensorProto:
    return numpy_helper.from_array(array)


def hard_sigmoid(ex, node: onnx.NodeProto) -> None:
    y = node.output[0]
    attrs = _attrs(node)
    source = ex.in_perm(node.input[0], ex.storage(y), False)
    scaled = ex.new_tensor(y, "float32", shape=ex.out.tensors[source].shape, label=f"{y}/ax")
    ex.emit("MUL", [source, ex.const(f"{y}/alpha", np.array(attrs.get("alpha", 0.2), np.float32), "float32")],
            [scaled], "MulOptions")
    shifted = ex.new_tensor(y, "float32", shape=ex.out.tensors[source].shape, label=f"{y}/axb")
    ex.emit("ADD", [scaled, ex.const(f"{y}/beta", np.array(attrs.get("beta", 0.5), np.float32), "float32")],
            [shifted], "AddOptions")
    _clamp(ex, shifted, y, 0.0, 1.0)


def pool(ex, node: onnx.NodeProto, integer: bool = False) -> None:
    attrs = _attrs(node)
    x, y = node.input[0], node.output[0]
    kernel = list(attrs["kernel_shape"])
    strides = list(attrs.get("strides", [1, 1]))
    if len(kernel) != 2 or attrs.get("ceil_mode") or any(d != 1 for d in attrs.get("dilations", [1, 1])):
        raise NotSupportedError(f"{node.op_type} '{node.name or y}' (not 2-D, ceil_mode or "
                                 "dilations) is not exported")
    if node.op_type == "AveragePool" and attrs.get("count_include_pad") and any(attrs.get("pads", [0])):
        raise NotSupportedError(f"AveragePool '{node.name or y}' with count_include_pad=1 is not "
                                 "exported (TFLite averages over the valid values)")
    source, padding = ex._padded(node, x, kernel, strides, [1, 1], attrs, integer)
    op = "MAX_POOL_2D" if node.op_type == "MaxPool" else "AVERAGE_POOL_2D"
    out = _out(ex, y, integer, layout.NHWC)
    ex.emit(op, [source], [out], "Pool2DOptions", Padding=padding, StrideW=strides[1], StrideH=strides[0],
            FilterWidth=kernel[1], FilterHeight=kernel[0])


def global_pool(ex, node: onnx.NodeProto, integer: bool = False) -> None:
    y = node.output[0]
    source = ex.in_perm(node.input[0], layout.NHWC, integer)
    op = "MEAN" if node.op_type == "GlobalAveragePool" else "REDUCE_MAX"
    ex.emit(op, [source, ex.const(f"{y}/axes", np.array([1, 2]), "int32")], [_out(ex, y, integer, layout.NHWC)],
            "ReducerOptions", KeepDims=True)


_REDUCERS = {"ReduceMean": "MEAN", "ReduceMax": "REDUCE_MAX", "ReduceMin": "REDUCE_MIN", "ReduceSum": "SUM",
             "ReduceProd": "REDUCE_PROD"}


def reduce_mean(ex, node: onnx.NodeProto, integer: bool = False) -> None:
    """ReduceMean/Max/Min/Sum/Prod over constant axes (any, keepdims 0 or 1)."""
    x, y, attrs = node.input[0], node.output[0], _attrs(node)
    if attrs.get("noop_with_empty_axes"):
        raise NotSupportedError(f"{node.op_type} '{node.name or y}' with noop_with_empty_axes is not exported")
    axes = attrs.get("axes") or (list(ex.inits[node.input[1]]) if len(node.input) > 1 and node.input[1] else None)
    rank = ex.rank(x)
    axes = sorted(int(a) % rank for a in (axes if axes is not None else range(rank)))
    keep = bool(attrs.get("keepdims", 1))
    perm = ex.storage(x)
    source = ex.in_perm(x, perm, integer)
    if keep:
        out_perm = perm
    else:   # the remaining axes keep their storage order, renumbered
        remaining = [p for p in perm if p not in axes]
        out_perm = tuple(sorted(remaining).index(p) for p in remaining)
    ex.emit(_REDUCERS[node.op_type], [source, ex.const(f"{y}/axes", np.array(sorted(layout.storage_axis(a, perm)
                                                                                    for a in axes)), "int32")],
            [_out(ex, y, integer, out_perm)], "ReducerOptions", KeepDims=keep)


def split(ex, node: onnx.NodeProto, integer: bool = False) -> None:
    """Split with constant sizes (or equal parts) as one STRIDED_SLICE per output."""
    x, attrs = node.input[0], _attrs(node)
    axis = attrs.get("axis", 0) % ex.rank(x)
    sizes = attrs.get("split") or (list(ex.inits[node.input[1]]) if len(node.input) > 1 and node.input[1] else None)
    outs = list(node.output)
    if sizes is None:
        if ex.shapes[x][axis] % len(outs):
            raise NotSupportedError(f"Split '{node.name or outs[0]}' into unequal default parts is not exported")
        sizes = [ex.shapes[x][axis] // len(outs)] * len(outs)
    perm = ex.storage(x)
    source = ex.need_q(x) if integer else ex.need_f(x)
    begin = 0
    for out, size in zip(outs, sizes):
        starts, ends = [0] * ex.rank(x), list(ex.shapes[x])
        starts[axis], ends[axis] = begin, begin + int(size)
        begin += int(size)
        if not out:
            continue
        ex.perm[out] = perm
        operands = [ex.const(f"{out}/{n}", np.array([v[p] for p in perm]), "int32")
                    for n, v in (("begin", starts), ("end", ends), ("strides", [1] * ex.rank(x)))]
        ex.emit("STRIDED_SLICE", [source] + operands, [_out(ex, out, integer)], "StridedSliceOptions")


def log_softmax(ex, node: onnx.NodeProto) -> None:
    y = node.output[0]
    axis = _attrs(node).get("axis", -1) % ex.rank(y)
    perm = ex.storage(y)
    if layout.storage_axis(axis, perm) != ex.rank(y) - 1:
        perm = tuple(a for a in range(ex.rank(y)) if a != axis) + (axis,)
    ex.emit("LOG_SOFTMAX", [ex.in_perm(node.input[0], perm, False)], [_float_out(ex, y, perm)])


def reshape(ex, node: onnx.NodeProto, integer: bool = False) -> None:
    x, y = node.input[0], node.output[0]
    source = ex.in_perm(x, layout.identity(ex.rank(x)), integer)
    plain = layout.identity(ex.rank(y))
    if integer:
        ex.q[y] = out = ex.new_tensor(y, "int8", ex.act_quant(y), plain)
    else:
        out = _float_out(ex, y, plain)
    ex.emit("RESHAPE", [source, ex.const(f"{y}/shape", np.array(ex.shapes[y]), "int32")], [out])


def transpose(ex, node: onnx.NodeProto, integer: bool = False) -> None:
    x, y = node.input[0], node.output[0]
    perm_onnx = tuple(_attrs(node).get("perm", tuple(reversed(range(ex.rank(x))))))
    source = ex.need_q(x) if integer else ex.need_f(x)
    order = layout.transpose_perm(perm_onnx, ex.storage(x), ex.storage(y))
    out = ex._output(y) if integer else _float_out(ex, y)
    ex.emit("TRANSPOSE", [source, ex.const(f"{y}/perm", np.array(order), "int32")], [out])


def concat(ex, node: onnx.NodeProto, integer: bool = False) -> None:
    y = node.output[0]
    perm = ex.storage(y)
    inputs = [ex.in_perm(i, perm, integer) if i not in ex.inits else
              ex.const(i, np.transpose(ex.dequantized_init(i), perm), "float32") for i in node.input]
    out = ex._output(y) if integer else _float_out(ex, y)
    ex.emit("CONCATENATION", inputs, [out], "ConcatenationOptions",
            Axis=layout.storage_axis(_attrs(node)["axis"], perm))


def pad(ex, node: onnx.NodeProto, integer: bool = False) -> None:
    y, attrs = node.output[0], _attrs(node)
    mode = attrs.get("mode", b"constant")
    pads = attrs.get("pads") or (list(ex.inits[node.input[1]]) if len(node.input) > 1 else None)
    mode = mode.decode() if isinstance(mode, bytes) else mode
    if mode not in ("constant", "reflect") or pads is None:
        raise NotSupportedError(f"Pad '{node.name or y}' (mode {mode}, or pads not constant) is not exported: "
                                "TFLite pads with a constant (PAD) or by reflection (MIRROR_PAD)")
    rank, perm = ex.rank(y), ex.storage(y)
    amounts = np.array([[pads[a], pads[a + rank]] for a in perm], np.int32)
    if mode == "reflect":   # ONNX reflect leaves the edge out: MIRROR_PAD's REFLECT
        inputs = [ex.in_perm(node.input[0], perm, integer), ex.const(f"{y}/pads", amounts, "int32")]
        ex.emit("MIRROR_PAD", inputs, [_out(ex, y, integer)], "MirrorPadOptions", Mode=0)
        return
    value = float(ex.inits[node.input[2]]) if len(node.input) > 2 and node.input[2] else 0.0
    inputs = [ex.in_perm(node.input[0], perm, integer), ex.const(f"{y}/pads", amounts, "int32")]
    if value and integer:   # the fill value in the shared int8 parameters
        quant = ex.act_quant(y)
        q = np.clip(np.rint(value / quant.scale[0]) + quant.zero_point[0], -128, 127)
        inputs.append(ex.const(f"{y}/pad_value", np.array(q), "int8", quant))
    elif value:
        inputs.append(ex.const(f"{y}/pad_value", np.array(value, np.float32), "float32"))
    ex.emit("PADV2" if value else "PAD", inputs, [_out(ex, y, integer)])


def softmax(ex, node: onnx.NodeProto, integer: bool = False) -> None:
    y = node.output[0]
    axis = _attrs(node).get("axis", -1) % ex.rank(y)
    perm = ex.storage(y)
    if layout.storage_axis(axis, perm) != ex.rank(y) - 1:
        perm = tuple(a for a in range(ex.rank(y)) if a != axis) + (axis,)
    source = ex.in_perm(node.input[0], perm, integer)
    ex.emit("SOFTMAX", [source], [_out(ex, y, integer, perm)], "SoftmaxOptions", Beta=1.0)


def conv(ex, node: onnx.NodeProto) -> None:
    """A Conv read only by float layers: float32 on the dequantized weights."""
    if ex.conv_1d(node, False, lambda two_d: conv(ex, two_d)):
        return
    attrs = _attrs(node)
    x, w, y = node.input[0], node.input[1], node.output[0]
    weight = ex.dequantized_init(w)
    group = int(attrs.get("group", 1))
    depthwise = group > 1 and weight.shape[1] == 1 and group == ex.shapes[x][1]
    if weight.ndim != 4 or (group > 1 and not depthwise):
        raise NotSupportedError(f"Conv '{node.name or y}' (group={group}, {weight.ndim - 2}-D) "
                                 "is not exported")
    strides, dilations = list(attrs.get("strides", [1, 1])), list(attrs.get("dilations", [1, 1]))
    source, padding = ex._padded(node, x, weight.shape[2:], strides, dilations, attrs, integer=False)
    bias = ex.dequantized_init(node.input[2]) if len(node.input) > 2 and node.input[2] else np.zeros(
        weight.shape[0], np.float32)
    bias_index = ex.const(f"{y}/bias_f", bias.ravel(), "float32")
    out = _float_out(ex, y, layout.NHWC)
    common = dict(Padding=padding, StrideW=strides[1], StrideH=strides[0], DilationWFactor=dilations[1],
                  DilationHFactor=dilations[0])
    if depthwise:
        filters = ex.const(f"{w}/float", np.transpose(weight, (1, 2, 3, 0)), "float32")
        ex.emit("DEPTHWISE_CONV_2D", [source, filters, bias_index], [out], "DepthwiseConv2DOptions",
                DepthMultiplier=weight.shape[0] // ex.shapes[x][1], **common)
    else:
        filters = ex.const(f"{w}/float", np.transpose(weight, (0, 2, 3, 1)), "float32")
        ex.emit("CONV_2D", [source, filters, bias_index], [out], "Conv2DOptions", **common)


def conv_transpose(ex, node: onnx.NodeProto) -> None:
    """ConvTranspose (group 1, no padding: the decoder's upsampling) as a float TRANSPOSE_CONV."""
    attrs = _attrs(node)
    x, w, y = node.input[0], node.input[1], node.output[0]
    weight = ex.dequantized_init(w)   # [C_in, C_out, kh, kw]
    if weight.ndim != 4 or attrs.get("group", 1) != 1 or any(attrs.get("pads", [0])) \
            or any(attrs.get("output_padding", [0])) or any(d != 1 for d in attrs.get("dilations", [1, 1])):
        raise NotSupportedError(f"ConvTranspose '{node.name or y}' with groups, pads, output_padding or dilations is "
                                "not exported")
    strides = list(attrs.get("strides", [1, 1]))
    shape = layout.stored_shape(ex.shapes[y], layout.NHWC)
    bias = ex.dequantized_init(node.input[2]) if len(node.input) > 2 and node.input[2] else np.zeros(
        weight.shape[1], np.float32)
    inputs = [ex.const(f"{y}/output_shape", np.array(shape), "int32"),
              ex.const(f"{w}/float", np.transpose(weight, (1, 2, 3, 0)), "float32"),
              ex.in_perm(x, layout.NHWC, False), ex.const(f"{y}/bias_f", bias.ravel(), "float32")]
    ex.emit("TRANSPOSE_CONV", inputs, [_float_out(ex, y, layout.NHWC)], "TransposeConvOptions", Padding=1,
            StrideW=strides[1], StrideH=strides[0])


def batch_norm(ex, node: onnx.NodeProto) -> None:
    """BatchNormalization (inference) as a per-channel MUL and ADD."""
    x, y = node.input[0], node.output[0]
    scale, bias, mean, var = (ex.dequantized_init(i).astype(np.float64) for i in node.input[1:5])
    factor = scale / np.sqrt(var + _attrs(node).get("epsilon", 1e-5))
    shape = (1, -1) + (1,) * (ex.rank(y) - 2)
    perm = ex.storage(y)
    multiplier = layout.constant_for(factor.astype(np.float32).reshape(shape), ex.rank(y), perm)
    offset = layout.constant_for((bias - mean * factor).astype(np.float32).reshape(shape), ex.rank(y), perm)
    scaled = ex.new_tensor(y, "float32", shape=layout.stored_shape(ex.shapes[y], perm), label=f"{y}/scaled")
    ex.emit("MUL", [ex.in_perm(x, perm, False), ex.const(f"{y}/bn_scale", multiplier, "float32")], [scaled],
            "MulOptions")
    ex.emit("ADD", [scaled, ex.const(f"{y}/bn_offset", offset, "float32")], [_float_out(ex, y)], "AddOptions")


def resize(ex, node: onnx.NodeProto, integer: bool = False) -> None:
    """Resize of the two spatial axes: nearest (integer factors) or linear, as RESIZE_* on NHWC."""
    attrs = _attrs(node)
    x, y = node.input[0], node.output[0]
    mode = attrs.get("mode", b"nearest")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    transform = attrs.get("coordinate_transformation_mode", b"half_pixel")
    transform = transform.decode() if isinstance(transform, bytes) else transform
    before, after = ex.shapes[x], ex.shapes[y]
    if len(before) != 4 or before[:2] != after[:2]:
        raise NotSupportedError(f"Resize '{node.name or y}' of other than the two spatial axes is not exported")
    size = ex.const(f"{y}/size", np.array(after[2:]), "int32")
    source = ex.in_perm(x, layout.NHWC, integer)
    out = _out(ex, y, integer, layout.NHWC)
    if mode == "nearest" and all(a % b == 0 for a, b in zip(after[2:], before[2:])) \
            and transform in ("half_pixel", "asymmetric", "pytorch_half_pixel"):
        ex.emit("RESIZE_NEAREST_NEIGHBOR", [source, size], [out], "ResizeNearestNeighborOptions")
    elif mode == "linear" and transform in ("half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric"):
        ex.emit("RESIZE_BILINEAR", [source, size], [out], "ResizeBilinearOptions",
                AlignCorners=transform == "align_corners", HalfPixelCenters="half_pixel" in transform)
    else:
        raise NotSupportedError(f"Resize '{node.name or y}' (mode {mode}, {transform}) has no TFLite equivalent")


def power(ex, node: onnx.NodeProto) -> None:
    """Pow by a constant: ``x·x`` for the exponent 2 (what LayerNorm's variance uses), else POW."""
    x, y = node.input[0], node.output[0]
    exponent = ex.inits.get(node.input[1])
    if exponent is not None and exponent.size == 1 and float(exponent.ravel()[0]) == 2.0:
        source = ex.in_perm(x, ex.storage(y), False)
        ex.emit("MUL", [source, source], [_float_out(ex, y)], "MulOptions")
        return
    binary("POW")(ex, node)


def slice_(ex, node: onnx.NodeProto, integer: bool = False) -> None:
    """Slice with constant starts/ends/axes/steps as STRIDED_SLICE over the stored axes."""
    x, y = node.input[0], node.output[0]
    consts = ([ex.inits.get(i) if i else None for i in node.input[1:5]] + [None] * 4)[:4]   # axes/steps optional
    if any(c is None for c, i in zip(consts, node.input[1:5]) if i) or consts[0] is None or consts[1] is None:
        raise NotSupportedError(f"Slice '{node.name or y}' with computed bounds is not exported")
    shape, rank = ex.shapes[x], ex.rank(x)
    starts, ends = consts[0].astype(np.int64), consts[1].astype(np.int64)
    axes = consts[2].astype(np.int64) % rank if consts[2] is not None else np.arange(len(starts))
    steps = consts[3].astype(np.int64) if consts[3] is not None else np.ones(len(starts), np.int64)
    begin, end, stride = [0] * rank, list(shape), [1] * rank
    for a, b, e, st in zip(axes, starts, ends, steps):
        if st < 0:
            raise NotSupportedError(f"Slice '{node.name or y}' with a negative step is not exported")
        begin[a] = int(np.clip(b + shape[a] if b < 0 else b, 0, shape[a]))
        end[a] = int(np.clip(e + shape[a] if e < 0 else e, 0, shape[a]))
        stride[a] = int(st)
    perm = ex.storage(x)
    ex.perm[y] = perm
    operands = [ex.const(f"{y}/{n}", np.array([v[p] for p in perm]), "int32")
                for n, v in (("begin", begin), ("end", end), ("strides", stride))]
    source = ex.need_q(x) if integer else ex.need_f(x)
    ex.emit("STRIDED_SLICE", [source] + operands, [_out(ex, y, integer)], "StridedSliceOptions")


def gemm(ex, node: onnx.NodeProto) -> None:
    """Gemm / MatMul with a constant weight as a float FULLY_CONNECTED; of two tensors, BATCH_MATMUL."""
    attrs = _attrs(node)
    x, w, y = node.input[0], node.input[1], node.output[0]
    if w not in ex.inits:
        return batch_matmul(ex, node)
    if attrs.get("transA") or ex.inits[w].ndim != 2:
        raise NotSupportedError(f"{node.op_type} '{node.name or y}' with transA or a {ex.inits[w].ndim}-D weight is "
                                "not exported")
    weight = ex.dequantized_init(w)
    matrix = weight if attrs.get("transB") else weight.T
    if attrs.get("alpha", 1.0) != 1.0 or attrs.get("beta", 1.0) != 1.0:
        raise NotSupportedError(f"Gemm '{node.name or y}' with alpha/beta is not exported")
    inputs = [ex.in_perm(x, layout.identity(ex.rank(x)), False), ex.const(f"{w}/float", matrix, "float32")]
    if len(node.input) > 2 and node.input[2]:
        inputs.append(ex.const(f"{y}/bias_f", ex.dequantized_init(node.input[2]).ravel(), "float32"))
    ex.emit("FULLY_CONNECTED", inputs, [_float_out(ex, y, layout.identity(ex.rank(y)))], "FullyConnectedOptions",
            KeepNumDims=ex.rank(x) > 2)


def batch_matmul(ex, node: onnx.NodeProto) -> None:
    """MatMul of two activations (attention), float32."""
    y = node.output[0]
    plain = [ex.in_perm(i, layout.identity(ex.rank(i)), False) for i in node.input[:2]]
    ex.emit("BATCH_MATMUL", plain, [_float_out(ex, y, layout.identity(ex.rank(y)))], "BatchMatMulOptions")


def depth_to_space(ex, node: onnx.NodeProto, integer: bool = False) -> None:
    """DepthToSpace (DCR: TFLite's channel order on NHWC) / SpaceToDepth as DEPTH_TO_SPACE / SPACE_TO_DEPTH."""
    attrs = _attrs(node)
    x, y = node.input[0], node.output[0]
    mode = attrs.get("mode", b"DCR")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    if node.op_type == "DepthToSpace" and mode != "DCR":
        raise NotSupportedError(f"DepthToSpace '{node.name or y}' with mode {mode}: TFLite's DEPTH_TO_SPACE orders the "
                                "channels as mode DCR")
    op = "DEPTH_TO_SPACE" if node.op_type == "DepthToSpace" else "SPACE_TO_DEPTH"
    options = "DepthToSpaceOptions" if op == "DEPTH_TO_SPACE" else "SpaceToDepthOptions"
    source = ex.in_perm(x, layout.NHWC, integer)
    ex.emit(op, [source], [_out(ex, y, integer, layout.NHWC)], options, BlockSize=int(attrs["blocksize"]))


def cast(ex, node: onnx.NodeProto) -> None:
    """Cast to float: the export keeps every non-integer-stored tensor in float32 (graph inputs too),
    so a copy; other target types are not exported."""
    y = node.output[0]
    if _attrs(node).get("to") != onnx.TensorProto.FLOAT:
        raise NotSupportedError(f"Cast '{node.name or y}' to {onnx.TensorProto.DataType.Name(_attrs(node)['to'])}: "
                                "the export computes in float32 and int8 only")
    source = ex.in_perm(node.input[0], ex.storage(y), False)
    ex.emit("RESHAPE", [source, ex.const(f"{y}/shape", np.array(ex.out.tensors[source].shape), "int32")],
            [_float_out(ex, y)])


def gather(ex, node: onnx.NodeProto, integer: bool = False) -> None:
    """Gather with constant indices as GATHER over the plain (ONNX-ordered) layout."""
    x, indices, y = node.input[0], node.input[1], node.output[0]
    if indices not in ex.inits:
        raise NotSupportedError(f"Gather '{node.name or y}' with computed indices is not exported")
    axis = _attrs(node).get("axis", 0) % ex.rank(x)
    index = np.where(ex.inits[indices] < 0, ex.inits[indices] + ex.shapes[x][axis], ex.inits[indices])
    source = ex.in_perm(x, layout.identity(ex.rank(x)), integer)
    ex.emit("GATHER", [source, ex.const(f"{y}/indices", index.astype(np.int32), "int32")],
            [_out(ex, y, integer, layout.identity(ex.rank(y)))], "GatherOptions", Axis=axis)


def lstm(ex, node: onnx.NodeProto) -> None:
    """A forward LSTM (default activations, constant weights) unrolled over its time steps:
    FULLY_CONNECTED for the gates, LOGISTIC/TANH, MUL/ADD for the cell, in float32."""
    attrs = _attrs(node)
    names = list(node.input) + [""] * (8 - len(node.input))
    x, w, r, b, lengths, h0, c0, peep = names[:8]
    y = node.name or node.output[0]
    direction = attrs.get("direction", b"forward")
    if direction not in (b"forward", "forward") or attrs.get("activations") or attrs.get("clip") or peep \
            or lengths or attrs.get("input_forget") or attrs.get("layout"):
        raise NotSupportedError(f"LSTM '{y}': only forward LSTMs with the default activations, no clip, peepholes "
                                "or sequence lengths are exported")
    if w not in ex.inits or r not in ex.inits or (b and b not in ex.inits):
        raise NotSupportedError(f"LSTM '{y}' with computed weights is not exported")
    hidden = int(attrs["hidden_size"])
    steps, batch, _ = ex.shapes[x]
    bias = ex.dequantized_init(b)[0] if b else np.zeros(8 * hidden, np.float32)
    w_in = ex.const(f"{y}/W", ex.dequantized_init(w)[0], "float32")
    w_rec = ex.const(f"{y}/R", ex.dequantized_init(r)[0], "float32")
    b_in = ex.const(f"{y}/B", (bias[:4 * hidden] + bias[4 * hidden:]).astype(np.float32), "float32")
    b_zero = ex.const(f"{y}/B0", np.zeros(4 * hidden, np.float32), "float32")

    def tensor(label: str, shape: list[int]) -> int:
        return ex.new_tensor(y, "float32", shape=shape, label=f"{y}/{label}")

    def reshaped(source: int, shape: list[int], label: str, out: int | None = None) -> int:
        out = tensor(label, shape) if out is None else out
        ex.emit("RESHAPE", [source, ex.const(f"{y}/{label}/shape", np.array(shape), "int32")], [out])
        return out

    def state(name: str, label: str) -> int:
        if not name:
            return ex.const(f"{y}/{label}", np.zeros((batch, hidden), np.float32), "float32")
        return reshaped(ex.in_perm(name, layout.identity(3), False), [batch, hidden], label)

    def part(source: int, begin: list[int], end: list[int], label: str, shape: list[int]) -> int:
        out = tensor(label, shape)
        operands = [ex.const(f"{y}/{label}/{k}", np.array(v), "int32")
                    for k, v in (("begin", begin), ("end", end), ("strides", [1] * len(begin)))]
        ex.emit("STRIDED_SLICE", [source] + operands, [out], "StridedSliceOptions")
        return out

    def binary_op(op: str, a: int, c: int, label: str) -> int:
        out = tensor(label, [batch, hidden])
        ex.emit(op, [a, c], [out], f"{op.capitalize()}Options")
        return out

    def unary_op(op: str, a: int, label: str) -> int:
        out = tensor(label, [batch, hidden])
        ex.emit(op, [a], [out])
        return out

    sequence = ex.in_perm(x, layout.identity(3), False)
    h, c = state(h0, "h0"), state(c0, "c0")
    outputs = []
    for t in range(steps):
        x_t = reshaped(part(sequence, [t, 0, 0], [t + 1, batch, ex.shapes[x][2]], f"x{t}",
                            [1, batch, ex.shapes[x][2]]), [batch, ex.shapes[x][2]], f"x{t}/2d")
        gates_x, gates_h, gates = (tensor(f"{k}{t}", [batch, 4 * hidden]) for k in ("gx", "gh", "g"))
        ex.emit("FULLY_CONNECTED", [x_t, w_in, b_in], [gates_x], "FullyConnectedOptions")
        ex.emit("FULLY_CONNECTED", [h, w_rec, b_zero], [gates_h], "FullyConnectedOptions")
        ex.emit("ADD", [gates_x, gates_h], [gates], "AddOptions")
        i, o, f, g = (part(gates, [0, k * hidden], [batch, (k + 1) * hidden], f"{n}{t}", [batch, hidden])
                      for k, n in enumerate("iofc"))
        i, o, f = (unary_op("LOGISTIC", v, f"{n}{t}/act") for v, n in ((i, "i"), (o, "o"), (f, "f")))
        g = unary_op("TANH", g, f"c{t}/act")
        c = binary_op("ADD", binary_op("MUL", f, c, f"fc{t}"), binary_op("MUL", i, g, f"ig{t}"), f"cell{t}")
        h = binary_op("MUL", o, unary_op("TANH", c, f"tanh_cell{t}"), f"h{t}")
        outputs.append(reshaped(h, [1, 1, batch, hidden], f"y{t}"))
    outs = list(node.output) + [""] * (3 - len(node.output))
    if outs[0]:
        plain = layout.identity(4)
        if len(outputs) == 1:
            reshaped(outputs[0], [1, 1, batch, hidden], "y", _float_out(ex, outs[0], plain))
        else:
            ex.emit("CONCATENATION", outputs, [_float_out(ex, outs[0], plain)], "ConcatenationOptions", Axis=0)
    for name, value in ((outs[1], h), (outs[2], c)):
        if name:
            reshaped(value, [1, batch, hidden], name, _float_out(ex, name, layout.identity(3)))


FLOAT_CONVERTERS: dict[str, Callable] = {
    "Add": binary("ADD"), "Sub": binary("SUB"), "Mul": binary("MUL"), "Div": binary("DIV"),
    "Max": binary("MAXIMUM"), "Min": binary("MINIMUM"),
    "Relu": unary("RELU"), "Sigmoid": unary("LOGISTIC"), "Tanh": unary("TANH"), "HardSwish": unary("HARD_SWISH"),
    "LeakyRelu": lambda ex, node, integer=False: unary("LEAKY_RELU", "LeakyReluOptions",
                                                       Alpha=float(_attrs(node).get("alpha", 0.01)))(ex, node, integer),
    "PRelu": binary("PRELU"), "Pad": pad, "Clip": clip, "HardSigmoid": hard_sigmoid,
    "MaxPool": pool, "AveragePool": pool, "GlobalAveragePool": global_pool, "GlobalMaxPool": global_pool,
    "ReduceMean": reduce_mean,
    "Reshape": reshape, "Flatten": reshape, "Squeeze": reshape, "Unsqueeze": reshape, "Identity": reshape,
    "Dropout": reshape, "Transpose": transpose, "Concat": concat, "Softmax": softmax,
    "Conv": conv, "Gemm": gemm, "MatMul": gemm, "ConvTranspose": conv_transpose, "Resize": resize,
    "BatchNormalization": batch_norm, "Pow": power, "Sqrt": unary("SQRT"), "Slice": slice_, "Exp": unary("EXP"),
    "DepthToSpace": depth_to_space, "SpaceToDepth": depth_to_space, "Cast": cast, "Gather": gather, "LSTM": lstm,
    "ReduceMax": reduce_mean, "ReduceMin": reduce_mean, "ReduceSum": reduce_mean, "ReduceProd": reduce_mean,
    "Split": split, "LogSoftmax": log_softmax, "Abs": unary("ABS"), "Neg": unary("NEG"), "Log": unary("LOG"),
    "Sin": unary("SIN"), "Cos": unary("COS"), "Ceil": unary("CEIL"), "Floor": unary("FLOOR"), "Round": unary("ROUND"),
    "Sign": unary("SIGN"), "Elu": unary("ELU"),
}

# int8 TFLite kernels that only move or select values: exact when input and output share parameters
INTEGER_WHEN_SHARED: dict[str, Callable] = {
    "MaxPool": pool, "AveragePool": pool, "Pad": pad, "Resize": resize, "Slice": slice_,
    "DepthToSpace": depth_to_space, "SpaceToDepth": depth_to_space, "GlobalMaxPool": global_pool, "Gather": gather,
    "Split": split, "ReduceMax": reduce_mean, "ReduceMin": reduce_mean,
}
# int8 TFLite kernels that rescale between any parameters (fixed-point requantization)
INTEGER_RESCALING: dict[str, Callable] = {
    "Add": binary("ADD"), "Sub": binary("SUB"), "Mul": binary("MUL"), "HardSwish": unary("HARD_SWISH"),
    "Sigmoid": unary("LOGISTIC"), "Softmax": softmax, "GlobalAveragePool": global_pool, "ReduceMean": reduce_mean,
    "Tanh": unary("TANH"), "LeakyRelu": FLOAT_CONVERTERS["LeakyRelu"],
}
# LiteRT's int8 LOGISTIC / SOFTMAX write only these output parameters, TANH only these
_FIXED_OUTPUT = {"Sigmoid": (1 / 256, -128), "Softmax": (1 / 256, -128), "Tanh": (1 / 128, 0)}


def integer_rescaling_ok(ex, node: onnx.NodeProto) -> bool:
    """Whether ``node`` can run as its int8 TFLite kernel: int8 data inputs of the output's rank
    (scalars and other broadcasts stay float) and, for the kernels with fixed output parameters, those."""
    y = node.output[0]
    data = [i for i in node.input if i]
    if node.op_type in ("Add", "Sub", "Mul"):
        if len(data) != 2 or any(i in ex.inits or ex.rank(i) != ex.rank(y) for i in data):
            return False
        if any(ex.shapes[i] != ex.shapes[y] for i in data) and ex.rank(y) > 4:
            return False
    fixed = _FIXED_OUTPUT.get(node.op_type)
    if fixed is not None:
        p = ex.params[y]
        scale, zero = float(p.scale.ravel()[0]), int(p.zero_point.ravel()[0])
        if not (np.isclose(scale, fixed[0], rtol=1e-6) and zero == fixed[1]):
            return False
    return True


# kernels that round their result (a staged output coarser than the model's would cost steps)
_ROUNDING = {"AveragePool", "Resize", "GlobalAveragePool", "Sigmoid", "Softmax", "Tanh"}


def staged_quant(ex, node: onnx.NodeProto, data: list[str]):
    """The int8 parameters an int8 kernel can write ``node``'s result in before an int8 → int8
    QUANTIZE to the model's parameters (None: keep the float steps): the input's for kernels
    that keep the input's parameters, the fixed ones of LOGISTIC/SOFTMAX/TANH. Rounding kernels
    only when that grid is at least as fine as the output's (then at most one extra step)."""
    op, y = node.op_type, node.output[0]
    if len([o for o in node.output if o]) != 1:
        return None
    out_scale = float(ex.params[y].scale.ravel()[0])
    if op in _FIXED_OUTPUT and len(data) == 1:
        scale, zero = _FIXED_OUTPUT[op]
        quant = Quant(np.array([scale], np.float32), np.array([zero], np.int64))
    elif op in INTEGER_WHEN_SHARED and len(data) == 1 and op != "Pad":
        quant = ex.act_quant(data[0])
        scale = float(quant.scale[0])
    else:
        return None
    if op in _ROUNDING and scale > out_scale * (1 + 1e-6):
        return None
    return quant