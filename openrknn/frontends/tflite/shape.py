"""Data movement: RESHAPE, SQUEEZE, EXPAND_DIMS, TRANSPOSE, CONCATENATION, SPLIT(_V), SLICE,
STRIDED_SLICE and PAD/PADV2/MIRROR_PAD.

Ops that only move whole axes (concat, split, slice, pad, transpose) follow the layout their
input already has, with axes and per-axis values re-ordered; ops that reinterpret the element
order (reshape, squeeze) work on the native layout.
"""
from __future__ import annotations

import numpy as np

from openrknn.errors import ModelLoadError
from openrknn.frontends.tflite.context import NATIVE, NCHW, TO_NCHW, TO_NHWC, Context, converter, nchw_axis
from openrknn.frontends.tflite.reader import Operator

_INT_MAX = np.iinfo(np.int64).max
_INT_MIN = np.iinfo(np.int64).min


def _i64(ctx: Context, values: list[int] | np.ndarray, hint: str) -> str:
    return ctx.add_const(np.asarray(values, np.int64), hint)


def _per_axis(values: list[int], layout: str) -> list[int]:
    """Per-axis values of a native rank-4 tensor, re-ordered for its NCHW copy."""
    return [values[a] for a in TO_NCHW] if layout == NCHW and len(values) == 4 else list(values)


@converter("RESHAPE", "EXPAND_DIMS")
def reshape(ctx: Context, op: Operator) -> None:
    """RESHAPE and EXPAND_DIMS: a Reshape to the (static) output shape."""
    shape = ctx.shape(op.outputs[0])
    ctx.emit(op, "Reshape", [ctx.get(op.inputs[0]), _i64(ctx, shape, f"{ctx.op_label(op)}_shape")], NATIVE)


@converter("SQUEEZE")
def squeeze(ctx: Context, op: Operator) -> None:
    in_shape = ctx.shape(op.inputs[0])
    dims = [int(d) % len(in_shape) for d in (op.options.SqueezeDimsAsNumpy() if op.options is not None
                                             and op.options.SqueezeDimsLength() else [])]
    axes = dims or [a for a, n in enumerate(in_shape) if n == 1]
    ctx.emit(op, "Squeeze", [ctx.get(op.inputs[0]), _i64(ctx, axes, f"{ctx.op_label(op)}_axes")], NATIVE)


@converter("TRANSPOSE")
def transpose(ctx: Context, op: Operator) -> None:
    perm = [int(p) for p in ctx.int_const(op.inputs[1], "permutation", op)]
    x, layout = ctx.get_any(op.inputs[0])
    if layout == NCHW:      # read the NCHW copy directly: nhwc = nchw.transpose(TO_NHWC)
        perm = [TO_NHWC[p] for p in perm]
    ctx.emit(op, "Transpose", [x], NATIVE, perm=perm)


@converter("CONCATENATION")
def concatenation(ctx: Context, op: Operator) -> None:
    rank = ctx.rank(op.outputs[0])
    dynamic = [i for i in op.inputs if not ctx.is_const(i)]
    layout = NCHW if rank == 4 and any(ctx.layout(i) == NCHW for i in dynamic) else NATIVE
    names = [ctx.get(i, layout) for i in op.inputs]
    axis = nchw_axis(op.options.Axis(), rank, layout)
    ctx.emit(op, "Concat", names, layout, op.options.FusedActivationFunction(), axis=axis)


def _split(ctx: Context, op: Operator, x_idx: int, axis: int) -> None:
    x, layout = ctx.get_any(x_idx)
    rank = ctx.rank(x_idx)
    axis = axis % rank
    sizes = [ctx.shape(o)[axis] for o in op.outputs]
    outputs = [ctx.out(o, layout) for o in op.outputs]
    ctx.node("Split", [x, _i64(ctx, sizes, f"{ctx.op_label(op)}_sizes")], outputs,
             axis=nchw_axis(axis, rank, layout))


@converter("SPLIT")
def split(ctx: Context, op: Operator) -> None:
    _split(ctx, op, op.inputs[1], int(ctx.int_const(op.inputs[0], "axis", op).ravel()[0]))


@converter("SPLIT_V")
def split_v(ctx: Context, op: Operator) -> None:
    _split(ctx, op, op.inputs[0], int(ctx.int_const(op.inputs[2], "axis", op).ravel()[0]))


@converter("SLICE")
def slice_(ctx: Context, op: Operator) -> None:
    x, layout = ctx.get_any(op.inputs[0])
    begin = [int(v) for v in ctx.int_const(op.inputs[1], "begin", op)]
    size = [int(v) for v in ctx.int_const(op.inputs[2], "size", op)]
    end = [_INT_MAX if s < 0 else b + s for b, s in zip(begin, size)]
    label = ctx.op_label(op)
    ctx.emit(op, "Slice", [x, _i64(ctx, _per_axis(begin, layout), f"{label}_starts"),
                           _i64(ctx, _per_axis(end, layout), f"{label}_ends")], layout)


@converter("STRIDED_SLICE")
def strided_slice(ctx: Context, op: Operator) -> None:
    o = op.options
    if o.EllipsisMask() or o.NewAxisMask():
        raise ModelLoadError(f"load_tflite: STRIDED_SLICE '{ctx.op_label(op)}' uses an ellipsis or new-axis "
                             "mask, which is not supported; slice with explicit begin/end instead")
    begin = [int(v) for v in ctx.int_const(op.inputs[1], "begin", op)]
    end = [int(v) for v in ctx.int_const(op.inputs[2], "end", op)]
    strides = [int(v) for v in ctx.int_const(op.inputs[3], "strides", op)] if op.input(3) >= 0 else [1] * len(begin)
    if o.Offset():
        end = [b + e for b, e in zip(begin, end)]
    starts, ends, shrink = [], [], []
    for i, (b, e, s) in enumerate(zip(begin, end, strides)):
        if o.ShrinkAxisMask() >> i & 1:
            starts.append(b)
            ends.append(_INT_MAX if b == -1 else b + 1)
            strides[i] = 1
            shrink.append(i)
            continue
        starts.append((0 if s > 0 else _INT_MAX) if o.BeginMask() >> i & 1 else b)
        ends.append((_INT_MAX if s > 0 else _INT_MIN) if o.EndMask() >> i & 1 else e)
    label = ctx.op_label(op)
    inputs = [ctx.get(op.inputs[0]), _i64(ctx, starts, f"{label}_starts"), _i64(ctx, ends, f"{label}_ends"),
              _i64(ctx, list(range(len(starts))), f"{label}_axes"), _i64(ctx, strides, f"{label}_steps")]
    if not shrink:
        ctx.emit(op, "Slice", inputs, NATIVE)
        return
    sliced = ctx.unique(f"{label}_slice")
    ctx.node("Slice", inputs, [sliced])
    ctx.emit(op, "Squeeze", [sliced, _i64(ctx, shrink, f"{label}_shrink")], NATIVE)


@converter("PAD", "PADV2", "MIRROR_PAD")
def pad(ctx: Context, op: Operator) -> None:
    x, layout = ctx.get_any(op.inputs[0])
    paddings = ctx.int_const(op.inputs[1], "paddings", op).reshape(-1, 2)
    begins = _per_axis([int(v) for v in paddings[:, 0]], layout)
    ends = _per_axis([int(v) for v in paddings[:, 1]], layout)
    label = ctx.op_label(op)
    inputs = [x, _i64(ctx, begins + ends, f"{label}_pads")]
    mode = "constant"
    if op.name == "MIRROR_PAD":
        if op.options is not None and op.options.Mode() != 0:
            raise ModelLoadError(f"load_tflite: MIRROR_PAD '{label}' uses SYMMETRIC mode; ONNX Pad has only "
                                 "REFLECT ('reflect') and edge padding")
        mode = "reflect"
    elif op.name == "PADV2" and op.input(2) >= 0:
        value = np.asarray(ctx.const(op.inputs[2]), np.float32).reshape(())
        inputs.append(ctx.add_const(value, f"{label}_value"))
    ctx.emit(op, "Pad", inputs, layout, mode=mode)
