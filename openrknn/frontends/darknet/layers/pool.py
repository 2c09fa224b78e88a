"""[maxpool] and [avgpool]."""
from __future__ import annotations

from openrknn.errors import ModelLoadError
from openrknn.frontends.darknet.cfg import Section
from openrknn.frontends.darknet.context import DarknetContext, Tensor, register


@register("maxpool", "max")
def maxpool(ctx: DarknetContext, s: Section) -> Tensor:
    """Max pooling with Darknet's padding: ``padding`` (default ``size - 1``) split as
    ``padding // 2`` before and the rest after, so ``out = (in + padding - size) // stride + 1``.

    A stride-1 size-2 pool (yolov3-tiny) therefore pads one row/column at the end and keeps
    the spatial size.
    """
    x = ctx.last
    stride = s.get_int("stride", 1)
    sy, sx = s.get_int("stride_y", stride), s.get_int("stride_x", stride)
    size = s.get_int("size", stride)
    padding = s.get_int("padding", size - 1)
    if s.get_int("maxpool_depth", 0):
        raise ModelLoadError(f"{s.where}: maxpool_depth=1 (pooling across channels) is not supported")
    before, after = padding // 2, padding - padding // 2
    if min(size, sy, sx) < 1 or before < 0 or after >= size:
        raise ModelLoadError(f"{s.where}: size={size}, stride={sy}x{sx}, padding={padding} is not a valid "
                             "pooling window (padding must be below size)")
    out_h, out_w = (x.h + padding - size) // sy + 1, (x.w + padding - size) // sx + 1
    if out_h < 1 or out_w < 1:
        raise ModelLoadError(f"{s.where}: a {size}x{size} window does not fit the {x.h}x{x.w} input")
    name = ctx.g.node("MaxPool", [x.name], ctx.name(s), kernel_shape=[size, size], strides=[sy, sx],
                      pads=[before, before, after, after])
    return Tensor(name, x.c, out_h, out_w)


@register("avgpool", "avg")
def avgpool(ctx: DarknetContext, s: Section) -> Tensor:
    """Darknet's avgpool is a global average over height and width."""
    x = ctx.last
    name = ctx.g.node("GlobalAveragePool", [x.name], ctx.name(s))
    return Tensor(name, x.c, 1, 1)
