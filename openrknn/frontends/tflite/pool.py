"""AVERAGE_POOL_2D, MAX_POOL_2D and the reductions (MEAN, SUM, REDUCE_MAX/MIN/PROD).

TFLite's ``SAME`` average pooling divides by the number of real (unpadded) elements, which is
ONNX ``AveragePool`` with ``count_include_pad=0``.
"""
from __future__ import annotations

import numpy as np

from openrknn.frontends.tflite.context import NCHW, NHWC_AXIS_IN_NCHW, Context, converter
from openrknn.frontends.onnx_builder import same_pads
from openrknn.frontends.tflite.reader import Operator

_POOLS = {"AVERAGE_POOL_2D": "AveragePool", "MAX_POOL_2D": "MaxPool"}
_REDUCES = {"MEAN": "ReduceMean", "SUM": "ReduceSum", "REDUCE_MAX": "ReduceMax", "REDUCE_MIN": "ReduceMin",
            "REDUCE_PROD": "ReduceProd"}
_AXES_AS_INPUT = {"ReduceSum"}   # opset 17: only ReduceSum takes its axes as an input


@converter(*_POOLS)
def pool_2d(ctx: Context, op: Operator) -> None:
    o = op.options
    kernel, strides = [o.FilterHeight(), o.FilterWidth()], [o.StrideH(), o.StrideW()]
    size = ctx.shape(op.inputs[0])[1:3]
    pads = same_pads(size, kernel, strides, [1, 1]) if o.Padding() == 0 else [0, 0, 0, 0]
    attrs = {"count_include_pad": 0} if op.name == "AVERAGE_POOL_2D" else {}
    ctx.emit(op, _POOLS[op.name], [ctx.get(op.inputs[0], NCHW)], NCHW, o.FusedActivationFunction(),
             kernel_shape=kernel, strides=strides, pads=pads, **attrs)


@converter(*_REDUCES)
def reduce(ctx: Context, op: Operator) -> None:
    x_idx = op.inputs[0]
    rank = ctx.rank(x_idx)
    axes = sorted({int(a) % rank for a in np.atleast_1d(ctx.int_const(op.inputs[1], "axes", op))})
    keep = bool(op.options.KeepDims()) if op.options is not None else False
    layout = ctx.layout(x_idx) if rank == 4 else "NATIVE"
    if layout == NCHW and not keep:
        kept_native = [a for a in range(4) if a not in axes]
        kept_nchw = [a for a in (0, 3, 1, 2) if a not in axes]
        if kept_native != kept_nchw:   # the result's dimension order would differ: reduce in NHWC
            layout = "NATIVE"
    x = ctx.get(x_idx, layout)
    onnx_axes = [NHWC_AXIS_IN_NCHW[a] if layout == NCHW else a for a in axes]
    out_layout = layout if keep else "NATIVE"
    op_type = _REDUCES[op.name]
    if op_type in _AXES_AS_INPUT:
        axes_name = ctx.add_const(np.array(onnx_axes, np.int64), f"{ctx.op_label(op)}_axes")
        ctx.emit(op, op_type, [x, axes_name], out_layout, keepdims=int(keep))
    else:
        ctx.emit(op, op_type, [x], out_layout, axes=onnx_axes, keepdims=int(keep))
