"""[route], [shortcut] and [upsample]."""
from __future__ import annotations

import numpy as np

from openrknn.errors import ModelLoadError
from openrknn.frontends.darknet.cfg import Section
from openrknn.frontends.darknet.context import DarknetContext, Tensor, register
from openrknn.frontends.darknet.layers.activation import apply_activation


def _channel_group(ctx: DarknetContext, s: Section, x: Tensor, groups: int, group_id: int) -> Tensor:
    if x.c % groups:
        raise ModelLoadError(f"{s.where}: groups={groups} does not divide the {x.c} channels of its input")
    width = x.c // groups
    g, name = ctx.g, ctx.name(s)
    consts = [g.const(f"{name}_{what}", [v], np.int64) for what, v in
              (("start", group_id * width), ("end", (group_id + 1) * width), ("axis", 1))]
    sliced = g.node("Slice", [x.name, *consts], f"{name}_group")
    return Tensor(sliced, width, x.h, x.w)


@register("route")
def route(ctx: DarknetContext, s: Section) -> Tensor:
    """Concatenate earlier layers along channels; ``groups``/``group_id`` keep one channel group
    of each (yolov4-tiny)."""
    refs = s.get_ints("layers")
    groups, group_id = s.get_int("groups", 1), s.get_int("group_id", 0)
    if not refs or groups < 1 or not 0 <= group_id < groups:
        raise ModelLoadError(f"{s.where}: needs layers=..., and 0 <= group_id < groups (got groups={groups}, "
                             f"group_id={group_id})")
    parts = [ctx.layer(s, ref) for ref in refs]
    if any((p.h, p.w) != (parts[0].h, parts[0].w) for p in parts):
        sizes = ", ".join(f"{p.c}x{p.h}x{p.w}" for p in parts)
        raise ModelLoadError(f"{s.where}: the routed layers have different sizes ({sizes})")
    if groups > 1:
        parts = [_channel_group(ctx, s, p, groups, group_id) for p in parts]
    if len(parts) == 1:
        return Tensor(parts[0].name, parts[0].c, parts[0].h, parts[0].w)
    name = ctx.g.node("Concat", [p.name for p in parts], ctx.name(s), axis=1)
    return Tensor(name, sum(p.c for p in parts), parts[0].h, parts[0].w)


@register("shortcut")
def shortcut(ctx: DarknetContext, s: Section) -> Tensor:
    """Residual sum ``act(previous + from...)`` of layers of the same shape."""
    x = ctx.last
    refs = s.get_ints("from")
    if s.get_str("weights_type", "none") != "none":
        raise ModelLoadError(f"{s.where}: weights_type={s.options['weights_type']} (weighted shortcut) "
                             "is not supported; only plain sums")
    others = [ctx.layer(s, ref) for ref in refs]
    for other in others:
        if (other.c, other.h, other.w) != (x.c, x.h, x.w):
            raise ModelLoadError(f"{s.where}: cannot add layer of shape {other.c}x{other.h}x{other.w} to "
                                 f"the previous layer's {x.c}x{x.h}x{x.w}; only equal shapes are supported")
    name, act = ctx.name(s), s.get_str("activation", "linear")
    total = x.name
    for i, other in enumerate(others):
        last = i == len(others) - 1 and act == "linear"
        total = ctx.g.node("Add", [total, other.name], name if i == 0 else f"{name}_add{i}",
                           output=name if last else f"{name}_sum{i}")
    if act != "linear":
        total = apply_activation(ctx.g, total, act, s, name)
    return Tensor(total, x.c, x.h, x.w)


@register("upsample")
def upsample(ctx: DarknetContext, s: Section) -> Tensor:
    """Nearest-neighbour upsampling by ``stride`` (each value repeated stride×stride), times ``scale``."""
    x = ctx.last
    stride, scale = s.get_int("stride", 2), s.get_float("scale", 1.0)
    if stride < 1:
        raise ModelLoadError(f"{s.where}: stride={stride} (downsampling) is not supported; use a positive stride")
    g, name = ctx.g, ctx.name(s)
    scales = g.const(f"{name}_scales", [1.0, 1.0, float(stride), float(stride)])
    out = g.node("Resize", [x.name, "", scales], name, output=name if scale == 1.0 else f"{name}_resize",
                 mode="nearest", coordinate_transformation_mode="asymmetric", nearest_mode="floor")
    if scale != 1.0:
        out = g.node("Mul", [out, g.const(f"{name}_scale", np.float32(scale))], f"{name}_scale", output=name)
    return Tensor(out, x.c, x.h * stride, x.w * stride)
