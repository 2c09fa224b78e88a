"""Pooling and UpSampling."""
from __future__ import annotations

import math

import numpy as np

from openrknn.errors import ModelLoadError, UnsupportedOpError
from openrknn.frontends.mxnet.context import MxContext, register
from openrknn.frontends.mxnet.symbol import MxNode


@register("Pooling")
def pooling(ctx: MxContext, node: MxNode) -> str:
    """max / avg / sum pooling, global or windowed.

    ``pooling_convention='valid'`` rounds the output size down, ``'full'`` up:
    ``out = 1 + ⌈(in + 2·pad − kernel) / stride⌉`` (ONNX ``ceil_mode``). Average pooling counts
    the padding by default (``count_include_pad=True``), as MXNet does.
    """
    x, g = ctx.input(node), ctx.g
    pool_type = node.get_str("pool_type", "max")
    if pool_type not in ("max", "avg", "sum"):
        raise UnsupportedOpError(f"Pooling(pool_type={pool_type})", node.name, "MXNet", "supported: max, avg, sum")
    if node.get_bool("global_pool", False):
        if pool_type == "sum":
            axes = g.const(f"{node.name}_axes", list(range(2, len(ctx.shape(x)))), np.int64)
            return g.node("ReduceSum", [x, axes], node.name, keepdims=1)
        return g.node("GlobalMaxPool" if pool_type == "max" else "GlobalAveragePool", [x], node.name)
    kernel = node.get_ints("kernel", [])
    if not kernel:
        raise ModelLoadError(f"node '{node.name}' (Pooling) has no 'kernel' and is not global_pool")
    n = len(kernel)
    stride, pad = node.get_ints("stride", [1] * n) or [1] * n, node.get_ints("pad", [0] * n) or [0] * n
    convention = node.get_str("pooling_convention", "valid")
    if convention not in ("valid", "full"):
        raise UnsupportedOpError(f"Pooling(pooling_convention={convention})", node.name, "MXNet",
                                 "supported conventions: valid, full")
    attrs = dict(kernel_shape=kernel, strides=stride, pads=pad * 2, ceil_mode=int(convention == "full"))
    if pool_type == "max":
        return g.node("MaxPool", [x], node.name, **attrs)
    include_pad = node.get_bool("count_include_pad", True) or pool_type == "sum"
    avg = g.node("AveragePool", [x], node.name if pool_type == "avg" else f"{node.name}_avg",
                 count_include_pad=int(include_pad), **attrs)
    if pool_type == "avg":
        return avg
    return g.node("Mul", [avg, ctx.scalar(node, float(np.prod(kernel)), "window")], f"{node.name}_sum",
                  output=node.name)


@register("UpSampling")
def upsampling(ctx: MxContext, node: MxNode) -> str:
    """nearest: each value repeated ``scale``×``scale``; bilinear: MXNet's fixed-weight grouped
    deconvolution (kernel ``2·scale − scale % 2``, stride ``scale``, pad ``⌈(scale − 1)/2⌉``)."""
    scale, g = node.get_int("scale", 1), ctx.g
    sample_type = node.get_str("sample_type", "nearest")
    if node.get_int("num_args", 1) != 1 and sample_type == "nearest":
        raise ModelLoadError(f"node '{node.name}' (UpSampling): num_args={node.attrs['num_args']}; only one "
                             "input is supported")
    x = ctx.input(node)
    if sample_type == "nearest":
        scales = g.const(f"{node.name}_scales", [1.0, 1.0, float(scale), float(scale)])
        return g.node("Resize", [x, "", scales], node.name, mode="nearest",
                      coordinate_transformation_mode="asymmetric", nearest_mode="floor")
    if sample_type != "bilinear":
        raise UnsupportedOpError(f"UpSampling(sample_type={sample_type})", node.name, "MXNet",
                                 "supported: nearest, bilinear")
    weight = ctx.param(node, 1, "bilinear weight")
    kernel, pad = 2 * scale - scale % 2, int(math.ceil((scale - 1) / 2))
    channels = ctx.shape(x)[1]
    if weight.shape != (channels, 1, kernel, kernel):
        raise ModelLoadError(f"node '{node.name}' (UpSampling): bilinear weight shape {list(weight.shape)} is not "
                             f"[{channels}, 1, {kernel}, {kernel}]")
    return g.node("ConvTranspose", [x, ctx.input(node, 1)], node.name, kernel_shape=[kernel, kernel],
                  strides=[scale, scale], pads=[pad] * 4, group=channels)
