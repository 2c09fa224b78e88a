"""[convolutional] and [connected]: batch norm is folded into the weights as Darknet computes it."""
from __future__ import annotations

import numpy as np

from openrknn.errors import ModelLoadError
from openrknn.frontends.darknet.cfg import Section
from openrknn.frontends.darknet.context import DarknetContext, Tensor, register
from openrknn.frontends.darknet.layers.activation import apply_activation

BN_EPS = 1e-6  # Darknet normalizes with (x - mean) / (sqrt(var) + .000001)


def fold_batchnorm(weights: np.ndarray, biases: np.ndarray, scales: np.ndarray, mean: np.ndarray,
                   var: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Fold Darknet batch norm into per-filter weights and biases.

    Math: ``y = scale · (W∗x − mean) / (√var + ε) + bias``, so with ``k = scale / (√var + ε)``:
    ``W' = k·W`` and ``b' = bias − k·mean`` (computed in float64).
    """
    k = scales.astype(np.float64) / (np.sqrt(var.astype(np.float64)) + BN_EPS)
    folded = weights.astype(np.float64) * k.reshape((-1,) + (1,) * (weights.ndim - 1))
    return folded.astype(np.float32), (biases - k * mean).astype(np.float32)


def _emit(ctx: DarknetContext, s: Section, x: Tensor, w: np.ndarray, b: np.ndarray, out: Tensor,
          strides: list[int], pads: list[int], groups: int) -> Tensor:
    name = ctx.name(s)
    act = s.get_str("activation", "logistic")
    inputs = [x.name, ctx.g.const(f"{name}_weights", w), ctx.g.const(f"{name}_biases", b)]
    conv = ctx.g.node("Conv", inputs, name, output=f"{name}_conv" if act != "linear" else name,
                      kernel_shape=list(w.shape[2:]), strides=strides, pads=pads, group=groups)
    out.name = conv if act == "linear" else apply_activation(ctx.g, conv, act, s, name)
    return out


@register("convolutional", "conv")
def convolutional(ctx: DarknetContext, s: Section) -> Tensor:
    """Conv (+ folded batch norm) + activation; weights: biases, [scales, mean, var], kernels."""
    x = ctx.last
    filters, size, groups = s.get_int("filters", 1), s.get_int("size", 1), s.get_int("groups", 1)
    stride = s.get_int("stride", 1)
    sy, sx = s.get_int("stride_y", stride), s.get_int("stride_x", stride)
    padding = size // 2 if s.get_int("pad", 0) else s.get_int("padding", 0)
    if s.get_int("dilation", 1) != 1:
        raise ModelLoadError(f"{s.where}: dilation={s.options['dilation']} is not supported (only 1)")
    if min(filters, size, groups, sy, sx) < 1 or x.c % groups or filters % groups:
        raise ModelLoadError(f"{s.where}: filters={filters}, size={size}, stride={sy}x{sx} and groups={groups} "
                             f"must be positive, and groups must divide filters and the {x.c} input channels")
    out_h, out_w = (x.h + 2 * padding - size) // sy + 1, (x.w + 2 * padding - size) // sx + 1
    if out_h < 1 or out_w < 1:
        raise ModelLoadError(f"{s.where}: a {size}x{size} kernel does not fit the {x.h}x{x.w} input")
    biases = ctx.read(s, filters, "biases")
    bn = [ctx.read(s, filters, what) for what in ("scales", "rolling_mean", "rolling_variance")] \
        if s.get_int("batch_normalize", 0) else None
    weights = ctx.read(s, filters * (x.c // groups) * size * size, "weights")
    weights = weights.reshape(filters, x.c // groups, size, size)
    if bn is not None:
        weights, biases = fold_batchnorm(weights, biases, *bn)
    return _emit(ctx, s, x, weights, biases, Tensor("", filters, out_h, out_w), [sy, sx], [padding] * 4, groups)


@register("connected", "conn")
def connected(ctx: DarknetContext, s: Section) -> Tensor:
    """Fully connected layer over the flattened (c, h, w) input, written as a Conv whose kernel
    covers the whole input; weights: biases, weights (outputs × inputs), [scales, mean, var]."""
    x = ctx.last
    outputs = s.get_int("output", 1)
    if outputs < 1:
        raise ModelLoadError(f"{s.where}: output={outputs} must be positive")
    biases = ctx.read(s, outputs, "biases")
    weights = ctx.read(s, outputs * x.c * x.h * x.w, "weights").reshape(outputs, x.c, x.h, x.w)
    if s.get_int("batch_normalize", 0):
        bn = [ctx.read(s, outputs, what) for what in ("scales", "rolling_mean", "rolling_variance")]
        weights, biases = fold_batchnorm(weights, biases, *bn)
    return _emit(ctx, s, x, weights, biases, Tensor("", outputs, 1, 1), [1, 1], [0] * 4, 1)
