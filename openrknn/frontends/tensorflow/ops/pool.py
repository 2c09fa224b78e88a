"""MaxPool, AvgPool and Mean.

TensorFlow's AvgPool with SAME padding divides by the number of pixels inside the image, which
is ONNX ``count_include_pad=0``.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from openrknn.frontends.tensorflow.context import Context, Value, attr
from openrknn.frontends.tensorflow.ops import CONVERTERS
from openrknn.frontends.tensorflow.ops.padding import spatial, window_pads


@CONVERTERS.register("MaxPool", "AvgPool")
def pool(ctx: Context, node: Any) -> Value:
    """2-D max / average pooling with SAME or VALID padding."""
    _, x, last, shape = ctx.spatial_input(node)
    hw = shape[1:3] if last else shape[2:4]
    kernel, strides = spatial(node, "ksize", last), spatial(node, "strides", last)
    pads = window_pads(node, hw, kernel, strides, [1, 1], last)
    if node.op == "MaxPool":
        return ctx.emit("MaxPool", [x], node, 4, channels_first=last, kernel_shape=kernel, strides=strides, pads=pads)
    return ctx.emit("AveragePool", [x], node, 4, channels_first=last, kernel_shape=kernel, strides=strides,
                    pads=pads, count_include_pad=0)


@CONVERTERS.register("Mean")
def mean(ctx: Context, node: Any) -> Value:
    """Mean over constant axes (``keep_dims`` honoured); a global average pool in most graphs."""
    x = ctx.input(node, 0)
    raw = np.atleast_1d(ctx.const_input(node, 1, "reduction axes")).astype(np.int64)
    axes = sorted({int(a) % max(x.rank, 1) for a in raw})
    keep = bool(attr(node, "keep_dims", False))
    if x.const is not None:
        return Value(node.name, x.rank if keep else x.rank - len(axes),
                     const=np.mean(x.const, axis=tuple(axes), keepdims=keep))
    if not axes:
        return x
    name, channels_first, onnx_axes = ctx.reduced(x, axes, keep, node.name)
    return ctx.emit("ReduceMean", [name], node, x.rank if keep else x.rank - len(axes),
                    channels_first=channels_first, axes=onnx_axes, keepdims=int(keep))
