"""Convolutions, bias, batch norm and matrix multiplication.

Filters are constants in a frozen graph: Conv2D's ``HWIO`` becomes ONNX ``OIHW``;
DepthwiseConv2dNative's ``[H, W, C, M]`` becomes ``[C·M, 1, H, W]`` with ``group = C`` (output
channel ``c·M + m``, TensorFlow's order).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from openrknn.errors import ModelLoadError
from openrknn.frontends.tensorflow.context import Context, Value, attr, channels_last, tensor_key
from openrknn.frontends.tensorflow.ops import CONVERTERS
from openrknn.frontends.tensorflow.ops.padding import spatial, window_pads


def _conv(ctx: Context, node: Any, weight: np.ndarray, group: int) -> Value:
    _, x, last, shape = ctx.spatial_input(node)
    hw = shape[1:3] if last else shape[2:4]
    kernel = list(weight.shape[2:])
    strides, dilations = spatial(node, "strides", last), spatial(node, "dilations", last)
    pads = window_pads(node, hw, kernel, strides, dilations, last)
    w = ctx.const_name(weight, f"{node.name}/filter")
    return ctx.emit("Conv", [x, w], node, 4, channels_first=last, kernel_shape=kernel, strides=strides,
                    dilations=dilations, pads=pads, group=group)


@CONVERTERS.register("Conv2D")
def conv2d(ctx: Context, node: Any) -> Value:
    """Conv2D (SAME/VALID/EXPLICIT padding, dilations, grouped when ``C_in`` is a multiple of I)."""
    filt = ctx.const_input(node, 1, "filter")
    shape = ctx.tf_shape(ctx.input(node, 0))
    cin = shape[3] if channels_last(node) else shape[1]
    if filt.ndim != 4 or cin % filt.shape[2]:
        raise ModelLoadError(f"{ctx.source}: node '{node.name}' (Conv2D): filter {list(filt.shape)} does not fit "
                             f"{cin} input channels")
    return _conv(ctx, node, np.transpose(filt, (3, 2, 0, 1)), cin // filt.shape[2])


@CONVERTERS.register("DepthwiseConv2dNative")
def depthwise(ctx: Context, node: Any) -> Value:
    """DepthwiseConv2dNative as a grouped Conv with ``group = C``."""
    filt = ctx.const_input(node, 1, "filter")
    if filt.ndim != 4:
        raise ModelLoadError(f"{ctx.source}: node '{node.name}': depthwise filter must be 4-D, got {list(filt.shape)}")
    kh, kw, c, m = filt.shape
    weight = np.transpose(filt, (2, 3, 0, 1)).reshape(c * m, 1, kh, kw)
    return _conv(ctx, node, weight, c)


@CONVERTERS.register("BiasAdd", "BiasAddV1")
def bias_add(ctx: Context, node: Any) -> Value:
    """BiasAdd; folded into the bias of the Conv that feeds it when that Conv has no other use."""
    value = ctx.input(node, 0)
    bias = ctx.const_input(node, 1, "bias").astype(np.float32)
    producer = ctx.producers.get(value.name)
    data_in = [i for i in node.input if not i.startswith("^")][0]
    if (producer is not None and producer.op_type == "Conv" and len(producer.input) == 2
            and ctx.uses.get(tensor_key(data_in), 0) == 1 and value.rank == 4
            and (value.channels_first or not channels_last(node))):
        producer.input.append(ctx.const_name(bias, f"{node.name}/bias"))
        return value
    channel_axis_is_last = channels_last(node) and not value.channels_first
    shaped = bias if channel_axis_is_last or value.rank < 3 else bias.reshape(-1, *([1] * (value.rank - 2)))
    b = ctx.const_name(shaped, f"{node.name}/bias")
    x = value.name if value.channels_first else ctx.as_tf(value, node.name)
    return ctx.emit("Add", [x, b], node, value.rank, channels_first=value.channels_first)


@CONVERTERS.register("FusedBatchNorm", "FusedBatchNormV2", "FusedBatchNormV3")
def fused_batch_norm(ctx: Context, node: Any) -> list[Value]:
    """Inference FusedBatchNorm as BatchNormalization (``is_training`` must be false)."""
    if attr(node, "is_training", False):
        raise ModelLoadError(f"{ctx.source}: node '{node.name}' ({node.op}) has is_training=True; export the "
                             "graph for inference (training=False) before freezing it")
    params = [ctx.const_input(node, i, what).astype(np.float32)
              for i, what in ((1, "scale"), (2, "offset"), (3, "mean"), (4, "variance"))]
    _, x, last, _ = ctx.spatial_input(node)
    names = [ctx.const_name(p, f"{node.name}/{what}") for p, what in zip(params, ("scale", "offset", "mean", "var"))]
    y = ctx.emit("BatchNormalization", [x, *names], node, 4, channels_first=last,
                 epsilon=float(attr(node, "epsilon", 1e-4)))
    return [y]


@CONVERTERS.register("MatMul")
def matmul(ctx: Context, node: Any) -> Value:
    """MatMul with ``transpose_a`` / ``transpose_b``."""
    a_val, b_val = ctx.input(node, 0), ctx.input(node, 1)
    a = ctx.as_tf(a_val, node.name)
    if attr(node, "transpose_a", False):
        a = ctx.b.node("Transpose", [a], name=f"{node.name}/transpose_a", perm=[1, 0])
    if b_val.const is not None:
        weight = b_val.const.T if attr(node, "transpose_b", False) else b_val.const
        b = ctx.const_name(weight.astype(np.float32), f"{node.name}/weights")
    else:
        b = ctx.as_tf(b_val, node.name)
        if attr(node, "transpose_b", False):
            b = ctx.b.node("Transpose", [b], name=f"{node.name}/transpose_b", perm=[1, 0])
    return ctx.emit("MatMul", [a, b], node, 2)
