"""Layers joining or splitting blobs: Eltwise, Concat, Slice, Split."""
from __future__ import annotations

import numpy as np

from openrknn.errors import ModelLoadError
from openrknn.frontends.caffe.context import CONVERTERS, CaffeContext, CaffeLayer

_PROD, _SUM, _MAX = 0, 1, 2


@CONVERTERS.register("Eltwise")
def eltwise(ctx: CaffeContext, layer: CaffeLayer) -> list[str]:
    """PROD (Mul), SUM with optional per-input coefficients (Mul by constants, then Sum) or MAX."""
    p = layer.msg.eltwise_param
    b = ctx.b
    xs = ctx.inputs(layer)
    if len(xs) < 2:
        raise ModelLoadError(f"layer '{layer.name}' (Eltwise) needs at least 2 bottoms, has {len(xs)}")
    if p.operation == _PROD:
        op = "Mul"
    elif p.operation == _MAX:
        op = "Max"
    else:
        op = "Sum"
        coeffs = list(p.coeff)
        if coeffs and len(coeffs) != len(xs):
            raise ModelLoadError(f"layer '{layer.name}' (Eltwise): {len(coeffs)} coeff for {len(xs)} bottoms")
        if any(c != 1 for c in coeffs):
            xs = [x if c == 1 else b.node("Mul", [x, b.const(f"{layer.name}/coeff{i}", np.float32(c))],
                                          f"{layer.name}/coeff{i}")
                  for i, (x, c) in enumerate(zip(xs, coeffs))]
    if op == "Mul":  # Mul is binary in ONNX
        y = xs[0]
        for i, x in enumerate(xs[1:], start=1):
            last = i == len(xs) - 1
            y = b.node("Mul", [y, x], layer.name if last else f"{layer.name}/mul{i}",
                       outputs=ctx.out_name(layer) if last else None)
        return [y]
    return [b.node(op, xs, layer.name, outputs=ctx.out_name(layer))]


@CONVERTERS.register("Concat")
def concat(ctx: CaffeContext, layer: CaffeLayer) -> list[str]:
    """Concatenate along ``axis`` (legacy ``concat_dim``)."""
    p = layer.msg.concat_param
    axis = p.concat_dim if p.HasField("concat_dim") else p.axis
    xs = ctx.inputs(layer)
    if len(xs) == 1:
        return [ctx.b.node("Identity", xs, layer.name, outputs=ctx.out_name(layer))]
    return [ctx.b.node("Concat", xs, layer.name, outputs=ctx.out_name(layer), axis=axis)]


@CONVERTERS.register("Slice")
def slice_layer(ctx: CaffeContext, layer: CaffeLayer) -> list[str]:
    """Split along ``axis`` at ``slice_point`` (or into equal parts, one per top)."""
    p = layer.msg.slice_param
    axis = p.slice_dim if p.HasField("slice_dim") else p.axis
    x = ctx.input(layer)
    dim = ctx.shape(x)[axis]
    points = list(p.slice_point)
    n = len(layer.tops)
    if points:
        if len(points) != n - 1:
            raise ModelLoadError(f"layer '{layer.name}' (Slice): {len(points)} slice_point for {n} tops")
        bounds = [0] + points + [dim]
    else:
        if dim % n:
            raise ModelLoadError(f"layer '{layer.name}' (Slice): axis size {dim} does not split into {n} equal parts")
        bounds = [i * dim // n for i in range(n + 1)]
    sizes = [hi - lo for lo, hi in zip(bounds[:-1], bounds[1:])]
    if any(s <= 0 for s in sizes):
        raise ModelLoadError(f"layer '{layer.name}' (Slice): slice points {points} do not fit axis size {dim}")
    if n == 1:
        return [ctx.b.node("Identity", [x], layer.name, outputs=ctx.out_name(layer))]
    outs = ctx.b.node("Split", [x, ctx.b.ints(f"{layer.name}/split", sizes)], layer.name,
                      outputs=ctx.out_names(layer), axis=axis)
    return list(outs)


@CONVERTERS.register("Split")
def split(ctx: CaffeContext, layer: CaffeLayer) -> list[str]:
    """Caffe Split copies its bottom to every top: no node is needed."""
    x = ctx.input(layer)
    return [x] * len(layer.tops)
