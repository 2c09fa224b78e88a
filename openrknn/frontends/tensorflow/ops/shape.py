"""Pad, ConcatV2, Reshape, Squeeze, ExpandDims and Tile (shapes and axes must be constants)."""
from __future__ import annotations

from typing import Any

import numpy as np

from openrknn.errors import ModelLoadError
from openrknn.frontends.tensorflow.context import CF_AXIS, NHWC_TO_NCHW, Context, Value, attr
from openrknn.frontends.tensorflow.ops import CONVERTERS


@CONVERTERS.register("Pad", "PadV2", "MirrorPad")
def pad(ctx: Context, node: Any) -> Value:
    """Constant (Pad, PadV2) or REFLECT (MirrorPad) padding; paddings follow a channels-first input."""
    x = ctx.input(node, 0)
    paddings = ctx.const_input(node, 1, "paddings").astype(np.int64).reshape(-1, 2)
    fill = float(ctx.const_input(node, 2, "constant value")) if node.op == "PadV2" else 0.0
    mode = "constant"
    if node.op == "MirrorPad":
        if str(attr(node, "mode", "REFLECT")).upper() != "REFLECT":
            raise ModelLoadError(f"{ctx.source}: node '{node.name}' (MirrorPad): mode '{attr(node, 'mode')}' is not "
                                 "supported; only REFLECT has an ONNX equivalent")
        mode = "reflect"
    if x.const is not None and mode == "constant":
        return Value(node.name, x.rank, const=np.pad(x.const, paddings, constant_values=fill))
    if x.channels_first:
        paddings, name = paddings[list(NHWC_TO_NCHW)], x.name
    else:
        name = ctx.as_tf(x, node.name)
    pads = ctx.const_name(np.concatenate([paddings[:, 0], paddings[:, 1]]), f"{node.name}/pads", dtype=np.int64)
    inputs = [name, pads]
    if fill:
        inputs.append(ctx.const_name(np.float32(fill), f"{node.name}/value"))
    return ctx.emit("Pad", inputs, node, x.rank, channels_first=x.channels_first, mode=mode)


@CONVERTERS.register("ConcatV2", "Concat")
def concat(ctx: Context, node: Any) -> Value:
    """Concatenation; stays channels-first when a 4-D operand already is."""
    values = ctx.data_inputs(node)
    axis_value, values = (values[0], values[1:]) if node.op == "Concat" else (values[-1], values[:-1])
    if axis_value.const is None:
        raise ModelLoadError(f"{ctx.source}: node '{node.name}' ({node.op}) needs a constant axis")
    rank = max(v.rank for v in values)
    axis = int(axis_value.const) % rank
    if all(v.const is not None for v in values):
        return Value(node.name, rank, const=np.concatenate([v.const for v in values], axis=axis))
    channels_first = rank == 4 and all(v.rank == 4 for v in values) and any(v.channels_first for v in values)
    names = [ctx.as_cf(v, f"{node.name}/in{i}") if channels_first else ctx.as_tf(v, f"{node.name}/in{i}")
             for i, v in enumerate(values)]
    return ctx.emit("Concat", names, node, rank, channels_first=channels_first,
                    axis=CF_AXIS[axis] if channels_first else axis)


@CONVERTERS.register("Reshape")
def reshape(ctx: Context, node: Any) -> Value:
    """Reshape to a constant shape (in TensorFlow's memory order)."""
    x = ctx.input(node, 0)
    shape = ctx.const_input(node, 1, "shape").astype(np.int64).reshape(-1)
    if x.const is not None:
        return Value(node.name, len(shape), const=x.const.reshape(shape))
    target = ctx.const_name(shape, f"{node.name}/shape", dtype=np.int64)
    return ctx.emit("Reshape", [ctx.as_tf(x, node.name), target], node, len(shape))


@CONVERTERS.register("Squeeze")
def squeeze(ctx: Context, node: Any) -> Value:
    """Squeeze the listed axes (every size-1 axis when none are listed)."""
    x = ctx.input(node, 0)
    listed = list(attr(node, "squeeze_dims", []) or attr(node, "axis", []) or [])
    shape = ctx.tf_shape(x)
    axes = sorted({int(a) % x.rank for a in listed}) if listed else [i for i, d in enumerate(shape) if d == 1]
    if x.const is not None:
        return Value(node.name, x.rank - len(axes), const=np.squeeze(x.const, axis=tuple(axes)))
    if not axes:
        return x
    name, channels_first, onnx_axes = ctx.reduced(x, axes, False, node.name)
    target = ctx.const_name(np.asarray(onnx_axes, np.int64), f"{node.name}/axes", dtype=np.int64)
    return ctx.emit("Squeeze", [name, target], node, x.rank - len(axes), channels_first=channels_first)


@CONVERTERS.register("ExpandDims")
def expand_dims(ctx: Context, node: Any) -> Value:
    """Insert one size-1 axis at a constant position."""
    x = ctx.input(node, 0)
    axis = int(np.asarray(ctx.const_input(node, 1, "axis")).reshape(-1)[0]) % (x.rank + 1)
    if x.const is not None:
        return Value(node.name, x.rank + 1, const=np.expand_dims(x.const, axis))
    target = ctx.const_name(np.asarray([axis], np.int64), f"{node.name}/axes", dtype=np.int64)
    return ctx.emit("Unsqueeze", [ctx.as_tf(x, node.name), target], node, x.rank + 1)


@CONVERTERS.register("Tile")
def tile(ctx: Context, node: Any) -> Value:
    """Tile by constant multiples (folds for constants)."""
    x = ctx.input(node, 0)
    multiples = ctx.const_input(node, 1, "multiples").astype(np.int64).reshape(-1)
    if x.const is not None:
        return Value(node.name, x.rank, const=np.tile(x.const, multiples))
    repeats = ctx.const_name(multiples, f"{node.name}/multiples", dtype=np.int64)
    return ctx.emit("Tile", [ctx.as_tf(x, node.name), repeats], node, x.rank)
