"""[yolo]/[region] (raw outputs), [softmax], [dropout] and [cost]."""
from __future__ import annotations

import numpy as np

from openrknn import log
from openrknn.errors import ModelLoadError
from openrknn.frontends.darknet.cfg import Section
from openrknn.frontends.darknet.context import DarknetContext, Tensor, register


@register("yolo", "region")
def yolo(ctx: DarknetContext, s: Section) -> Tensor:
    """Detection head: its input becomes a graph output before any decoding (logistic, anchors,
    boxes), as RKNN-Toolkit exposes it; the application decodes it."""
    x = ctx.last
    num, classes = s.get_int("num", 1), s.get_int("classes", 20)
    if s.kind == "yolo":
        expected = len(s.get_ints("mask", list(range(num)))) * (classes + 5)
    else:
        expected = num * (classes + s.get_int("coords", 4) + 1)
    if x.c != expected:
        log.warning(f"load_darknet: {s.where} expects {expected} channels for its anchors and {classes} classes, "
                    f"its input has {x.c}; the raw output is exposed anyway")
    ctx.outputs.append(x)
    return Tensor(x.name, x.c, x.h, x.w)


@register("softmax", "soft")
def softmax(ctx: DarknetContext, s: Section) -> Tensor:
    """Softmax over the flattened (c·h·w) input, per group of ``groups``, with ``temperature``."""
    x = ctx.last
    groups, temperature = s.get_int("groups", 1), s.get_float("temperature", 1.0)
    size = x.c * x.h * x.w
    if groups < 1 or size % groups or temperature <= 0:
        raise ModelLoadError(f"{s.where}: groups={groups} must divide the {size} inputs and temperature must be > 0")
    g, name, src = ctx.g, ctx.name(s), x.name
    if temperature != 1.0:
        src = g.node("Mul", [src, g.const(f"{name}_inv_t", np.float32(1.0 / temperature))], f"{name}_temperature")
    if groups == 1 and x.h == x.w == 1:
        return Tensor(g.node("Softmax", [src], name, axis=1), x.c, 1, 1)
    flat = g.node("Reshape", [src, g.const(f"{name}_grouped", [1, groups, size // groups], np.int64)],
                  f"{name}_flatten")
    soft = g.node("Softmax", [flat], name, output=f"{name}_grouped", axis=2)
    out = g.node("Reshape", [soft, g.const(f"{name}_shape", [1, x.c, x.h, x.w], np.int64)], f"{name}_reshape",
                 output=name)
    return Tensor(out, x.c, x.h, x.w)


@register("dropout")
def dropout(ctx: DarknetContext, s: Section) -> Tensor:
    """Identity at inference."""
    x = ctx.last
    return Tensor(x.name, x.c, x.h, x.w)


@register("cost")
def cost(ctx: DarknetContext, s: Section) -> Tensor:
    """Training-only loss layer: passes its input through."""
    log.warning(f"load_darknet: {s.where} is a training-only cost layer; passed through")
    x = ctx.last
    return Tensor(x.name, x.c, x.h, x.w)
