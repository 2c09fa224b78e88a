"""Concat, Flatten, Reshape, Crop and the inference identities (Dropout, BlockGrad, ...)."""
from __future__ import annotations

import numpy as np

from openrknn.errors import ModelLoadError
from openrknn.frontends.mxnet.context import MxContext, register
from openrknn.frontends.mxnet.symbol import MxNode


@register("Concat", "concat")
def concat(ctx: MxContext, node: MxNode) -> str:
    """Concatenate all inputs along ``dim`` (default 1)."""
    inputs = [ctx.input(node, i) for i in range(len(node.inputs))]
    return ctx.g.node("Concat", inputs, node.name, axis=node.get_int("dim", 1))


@register("Flatten", "flatten")
def flatten(ctx: MxContext, node: MxNode) -> str:
    """(N, ...) -> (N, -1)."""
    return ctx.g.node("Flatten", [ctx.input(node)], node.name, axis=1)


@register("Dropout", "BlockGrad", "stop_gradient", "_copy", "identity", "MakeLoss")
def identity(ctx: MxContext, node: MxNode) -> str:
    """Inference identity."""
    return ctx.g.node("Identity", [ctx.input(node)], node.name)


def mxnet_reshape(src: list[int], spec: list[int], node: MxNode) -> list[int]:
    """Apply MXNet's Reshape codes: 0 copies a dim, -1 infers one, -2 copies the rest, -3 merges
    two dims, -4 splits one dim into the next two values (one may be -1)."""
    out: list[int] = []
    i = j = 0
    bad = ModelLoadError(f"node '{node.name}' (Reshape): shape {tuple(spec)} does not fit input shape {tuple(src)}")
    while j < len(spec):
        code = spec[j]
        if code == -2:
            out += src[i:]
            i = len(src)
        elif code == -3:
            if i + 1 >= len(src):
                raise bad
            out.append(src[i] * src[i + 1])
            i += 2
        elif code == -4:
            if j + 2 >= len(spec) or i >= len(src):
                raise bad
            a, b = spec[j + 1], spec[j + 2]
            a, b = (src[i] // b if a == -1 else a), (src[i] // a if b == -1 else b)
            out += [a, b]
            i, j = i + 1, j + 2
        else:
            if code == 0 and i >= len(src):
                raise bad
            out.append(src[i] if code == 0 else code)
            i += 1
        j += 1
    total = int(np.prod(src))
    if out.count(-1) == 1:
        known = int(np.prod([d for d in out if d != -1]))
        out[out.index(-1)] = total // known if known else 0
    if out.count(-1) or int(np.prod(out)) != total:
        raise bad
    return out


@register("Reshape", "reshape")
def reshape(ctx: MxContext, node: MxNode) -> str:
    """Reshape to ``shape`` (MXNet codes resolved against the static input shape, ``reverse`` too)."""
    x = ctx.input(node)
    src = ctx.shape(x)
    spec = node.get_ints("shape", node.get_ints("target_shape", []))
    if not spec:
        raise ModelLoadError(f"node '{node.name}' (Reshape) has no 'shape' attribute")
    if node.get_bool("reverse", False):
        shape = mxnet_reshape(src[::-1], spec[::-1], node)[::-1]
    else:
        shape = mxnet_reshape(src, spec, node)
    return ctx.g.node("Reshape", [x, ctx.g.const(f"{node.name}_shape", shape, np.int64)], node.name)


@register("Crop")
def crop(ctx: MxContext, node: MxNode) -> str:
    """Crop height and width to ``h_w`` or to the size of the second input, at ``offset`` or centred."""
    x = ctx.input(node)
    shape = ctx.shape(x)
    if node.get_int("num_args", len(node.inputs)) >= 2:
        h, w = ctx.shape(ctx.input(node, 1))[2:4]
    else:
        h, w = (node.get_ints("h_w", [0, 0]) + [0, 0])[:2]
    if node.get_bool("center_crop", False):
        top, left = (shape[2] - h) // 2, (shape[3] - w) // 2
    else:
        top, left = (node.get_ints("offset", [0, 0]) + [0, 0])[:2]
    if min(h, w, top, left) < 0 or h == 0 or w == 0 or top + h > shape[2] or left + w > shape[3]:
        raise ModelLoadError(f"node '{node.name}' (Crop): a {h}x{w} crop at ({top}, {left}) does not fit the "
                             f"{shape[2]}x{shape[3]} input")
    g = ctx.g
    starts, ends = g.const(f"{node.name}_starts", [top, left], np.int64), g.const(f"{node.name}_ends",
                                                                                 [top + h, left + w], np.int64)
    return g.node("Slice", [x, starts, ends, g.const(f"{node.name}_axes", [2, 3], np.int64)], node.name)
