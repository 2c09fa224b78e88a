"""Shape layers: Flatten, Reshape, Permute, Crop, Upsample."""
from __future__ import annotations

import numpy as np

from openrknn.errors import ModelLoadError
from openrknn.frontends.caffe.context import CONVERTERS, CaffeContext, CaffeLayer


def _reshape(ctx: CaffeContext, layer: CaffeLayer, x: str, shape: list[int]) -> str:
    return ctx.b.node("Reshape", [x, ctx.b.ints(f"{layer.name}/shape", shape)], layer.name,
                      outputs=ctx.out_name(layer))


@CONVERTERS.register("Flatten")
def flatten(ctx: CaffeContext, layer: CaffeLayer) -> list[str]:
    """Merge axes ``axis..end_axis`` into one."""
    p = layer.msg.flatten_param
    x = ctx.input(layer)
    shape = ctx.shape(x)
    axis, end = p.axis % len(shape), p.end_axis % len(shape)
    merged = int(np.prod(shape[axis:end + 1]))
    return [_reshape(ctx, layer, x, shape[:axis] + [merged] + shape[end + 1:])]


@CONVERTERS.register("Reshape")
def reshape(ctx: CaffeContext, layer: CaffeLayer) -> list[str]:
    """Caffe Reshape: ``0`` copies the input dim, ``-1`` is inferred; ``axis``/``num_axes`` pick the span."""
    p = layer.msg.reshape_param
    x = ctx.input(layer)
    shape = ctx.shape(x)
    axis = p.axis if p.axis >= 0 else len(shape) + 1 + p.axis
    end = len(shape) if p.num_axes == -1 else axis + p.num_axes
    spec = list(p.shape.dim)
    middle = [shape[axis + i] if d == 0 else int(d) for i, d in enumerate(spec)]
    new = shape[:axis] + middle + shape[end:]
    if new.count(-1) > 1:
        raise ModelLoadError(f"layer '{layer.name}' (Reshape): more than one -1 in shape {spec}")
    if -1 in new:
        known = int(np.prod([d for d in new if d != -1]))
        new[new.index(-1)] = int(np.prod(shape)) // max(known, 1)
    if int(np.prod(new)) != int(np.prod(shape)):
        raise ModelLoadError(f"layer '{layer.name}' (Reshape): cannot reshape {shape} to {spec}")
    return [_reshape(ctx, layer, x, new)]


@CONVERTERS.register("Permute")
def permute(ctx: CaffeContext, layer: CaffeLayer) -> list[str]:
    """Transpose; axes missing from ``order`` keep their relative order after the listed ones."""
    x = ctx.input(layer)
    rank = len(ctx.shape(x))
    order = [int(o) for o in layer.msg.permute_param.order]
    if any(o >= rank for o in order) or len(set(order)) != len(order):
        raise ModelLoadError(f"layer '{layer.name}' (Permute): order {order} is not a permutation of {rank} axes")
    order += [a for a in range(rank) if a not in order]
    return [ctx.b.node("Transpose", [x], layer.name, outputs=ctx.out_name(layer), perm=order)]


@CONVERTERS.register("Crop")
def crop(ctx: CaffeContext, layer: CaffeLayer) -> list[str]:
    """Crop bottom 0 to the shape of bottom 1 from ``axis`` on, at ``offset`` (one value or one per axis)."""
    p = layer.msg.crop_param
    x, ref = ctx.input(layer, 0), ctx.input(layer, 1)
    shape, ref_shape = ctx.shape(x), ctx.shape(ref)
    axis = p.axis % len(shape)
    axes = list(range(axis, len(shape)))
    offsets = list(p.offset)
    if len(offsets) not in (0, 1, len(axes)):
        raise ModelLoadError(f"layer '{layer.name}' (Crop): {len(offsets)} offsets for {len(axes)} cropped axes")
    offsets = [0] * len(axes) if not offsets else (offsets * len(axes) if len(offsets) == 1 else offsets)
    ends = [o + ref_shape[a] for o, a in zip(offsets, axes)]
    if any(e > shape[a] for e, a in zip(ends, axes)):
        raise ModelLoadError(f"layer '{layer.name}' (Crop): offset {offsets} + size {ref_shape[axis:]} exceed {shape}")
    b = ctx.b
    inputs = [x, b.ints(f"{layer.name}/starts", offsets), b.ints(f"{layer.name}/ends", ends),
              b.ints(f"{layer.name}/axes", axes)]
    return [b.node("Slice", inputs, layer.name, outputs=ctx.out_name(layer))]


@CONVERTERS.register("Upsample")
def upsample(ctx: CaffeContext, layer: CaffeLayer) -> list[str]:
    """Nearest-neighbour upsampling by ``scale`` (or to ``upsample_h``/``upsample_w``), one bottom only."""
    p = layer.msg.upsample_param
    if len(layer.bottoms) > 1:
        raise ModelLoadError(f"layer '{layer.name}' (Upsample): the SegNet form with a pooling mask (2 bottoms) "
                             "is not supported; only nearest upsampling of one bottom is")
    x = ctx.input(layer)
    n, c, h, w = ctx.shape(x)
    if p.HasField("upsample_h") and p.HasField("upsample_w"):
        size = [n, c, p.upsample_h, p.upsample_w]
    else:
        sh = p.scale_h if p.HasField("scale_h") else p.scale
        sw = p.scale_w if p.HasField("scale_w") else p.scale
        size = [n, c, h * sh, w * sw]
    b = ctx.b
    return [b.node("Resize", [x, "", "", b.ints(f"{layer.name}/sizes", size)], layer.name,
                   outputs=ctx.out_name(layer), mode="nearest", nearest_mode="floor",
                   coordinate_transformation_mode="asymmetric")]
