"""CONV_2D, DEPTHWISE_CONV_2D, TRANSPOSE_CONV and FULLY_CONNECTED.

TFLite stores filters as ``[Cout, KH, KW, Cin]`` (depthwise: ``[1, KH, KW, Cin·mult]``); ONNX
wants ``[Cout, Cin/group, KH, KW]`` (ConvTranspose: ``[Cin, Cout, KH, KW]``). ``SAME`` padding
is made explicit from the static shapes with TensorFlow's rule::

    out = ceil(in / s);  total = max((out − 1)·s + (k − 1)·d + 1 − in, 0)
    begin = total // 2;  end = total − begin
"""
from __future__ import annotations

import numpy as np

from openrknn.errors import ModelLoadError
from openrknn.frontends.onnx_builder import same_pads
from openrknn.frontends.tflite.context import NCHW, NATIVE, Context, converter
from openrknn.frontends.tflite.reader import Operator

_SAME = 0


def _bias(ctx: Context, op: Operator, k: int) -> list[str]:
    idx = op.input(k)
    if idx < 0:
        return []
    return [ctx.get(idx)]


def _emit_conv(ctx: Context, op: Operator, weight_order: tuple[int, ...], group: int) -> None:
    """A TFLite 2-D convolution (weights ``[*, kh, kw, *]``) as an NCHW ONNX Conv."""
    o = op.options
    x_shape, w_shape = ctx.shape(op.inputs[0]), ctx.shape(op.inputs[1])
    kernel, strides = w_shape[1:3], [o.StrideH(), o.StrideW()]
    dilations = [o.DilationHFactor(), o.DilationWFactor()]
    pads = same_pads(x_shape[1:3], kernel, strides, dilations) if o.Padding() == _SAME else [0, 0, 0, 0]
    inputs = [ctx.get(op.inputs[0], NCHW), ctx.get_permuted(op.inputs[1], weight_order)]
    ctx.emit(op, "Conv", inputs + _bias(ctx, op, 2), NCHW, o.FusedActivationFunction(),
             kernel_shape=kernel, strides=strides, dilations=dilations, pads=pads, group=group)


@converter("CONV_2D")
def conv_2d(ctx: Context, op: Operator) -> None:
    x_shape, w_shape = ctx.shape(op.inputs[0]), ctx.shape(op.inputs[1])   # weights [O, kh, kw, I/group]
    _emit_conv(ctx, op, (0, 3, 1, 2), x_shape[3] // w_shape[3] if w_shape[3] else 1)


@converter("DEPTHWISE_CONV_2D")
def depthwise_conv_2d(ctx: Context, op: Operator) -> None:
    _emit_conv(ctx, op, (3, 0, 1, 2), ctx.shape(op.inputs[0])[3])   # weights [1, kh, kw, C·multiplier]


@converter("TRANSPOSE_CONV")
def transpose_conv(ctx: Context, op: Operator) -> None:
    o = op.options
    out_shape = [int(v) for v in ctx.int_const(op.inputs[0], "output shape", op)]
    w_idx, x_idx = op.inputs[1], op.inputs[2]
    fused = o.FusedActivationFunction() if hasattr(o, "FusedActivationFunction") else 0
    emit_transpose_conv(ctx, op, x_idx, w_idx, op.input(3), out_shape, o.Padding() == _SAME,
                        [o.StrideH(), o.StrideW()], fused)


def emit_transpose_conv(ctx: Context, op: Operator, x_idx: int, w_idx: int, b_idx: int, out_shape: list[int],
                        same: bool, strides: list[int], fused: int = 0) -> None:
    """ConvTranspose producing exactly ``out_shape`` (NHWC), cropping like TFLite does."""
    x_shape, w_shape = ctx.shape(x_idx), ctx.shape(w_idx)
    kernel = w_shape[1:3]
    pads_begin, pads_end, extra = [], [], []
    for n, k, s, out in zip(x_shape[1:3], kernel, strides, out_shape[1:3]):
        full = (n - 1) * s + k
        total = max(full - out, 0) if same else 0
        pads_begin.append(total // 2)
        pads_end.append(total - total // 2)
        extra.append(max(out - (full - total), 0))
    if any(e >= s for e, s in zip(extra, strides)) and not same:
        raise ModelLoadError(f"load_tflite: {op.name} '{ctx.op_label(op)}' asks for output {out_shape}, which "
                             f"a stride-{strides} transposed convolution of {x_shape} cannot produce")
    inputs = [ctx.get(x_idx, NCHW), ctx.get_permuted(w_idx, (3, 0, 1, 2))]
    if b_idx >= 0:
        inputs.append(ctx.get(b_idx))
    ctx.emit(op, "ConvTranspose", inputs, NCHW, fused, kernel_shape=kernel, strides=strides,
             pads=pads_begin + pads_end, output_padding=extra)


@converter("FULLY_CONNECTED")
def fully_connected(ctx: Context, op: Operator) -> None:
    o = op.options
    x_idx, w_idx = op.inputs[0], op.inputs[1]
    w_shape, out_shape = ctx.shape(w_idx), ctx.shape(op.outputs[0])
    if o is not None and o.WeightsFormat() != 0:
        raise ModelLoadError(f"load_tflite: FULLY_CONNECTED '{ctx.op_label(op)}' uses shuffled weights "
                             "(weights_format SHUFFLED4x16INT8), which only the TFLite int8 kernels read")
    x = ctx.get(x_idx, NATIVE)
    if len(ctx.shape(x_idx)) != 2:
        flat = ctx.unique(f"{ctx.op_label(op)}_flat")
        shape = ctx.add_const(np.array([-1, w_shape[1]], np.int64), f"{flat}_shape")
        ctx.node("Reshape", [x, shape], [flat])
        x = flat
    inputs = [x, ctx.get_permuted(w_idx, None)] + _bias(ctx, op, 2)
    fused = o.FusedActivationFunction() if o is not None else 0
    if len(out_shape) == 2:
        ctx.emit(op, "Gemm", inputs, NATIVE, fused, transB=1)
        return
    gemm = ctx.unique(f"{ctx.op_label(op)}_gemm")
    ctx.node("Gemm", inputs, [gemm], transB=1)
    shape = ctx.add_const(np.array(out_shape, np.int64), f"{gemm}_shape")
    ctx.emit(op, "Reshape", [gemm, shape], NATIVE, fused)
