"""Pooling (MAX/AVE, global) with Caffe's output-size rounding."""
from __future__ import annotations

from openrknn.errors import ModelLoadError
from openrknn.frontends.caffe.context import CONVERTERS, CaffeContext, CaffeLayer
from openrknn.frontends.onnx_builder import pool2d, pooled_size

_MAX, _AVE = 0, 1
_CEIL = 0


@CONVERTERS.register("Pooling")
def pooling(ctx: CaffeContext, layer: CaffeLayer) -> list[str]:
    """Caffe: ``out = ceil((in + 2p - k) / s) + 1``, minus one if the last window starts at or past ``in + p``
    (checked only when some padding is set).

    MAX ignores padding; AVE divides by the window clipped to ``[-p, in + p)``.
    """
    p = layer.msg.pooling_param
    x = ctx.input(layer)
    if p.pool not in (_MAX, _AVE):
        raise ModelLoadError(f"layer '{layer.name}' (Pooling): STOCHASTIC pooling is not supported; use MAX or AVE")
    _, _, h, w = ctx.shape(x)
    if p.global_pooling:
        op = "GlobalMaxPool" if p.pool == _MAX else "GlobalAveragePool"
        return [ctx.b.node(op, [x], layer.name, outputs=ctx.out_name(layer))]
    kernel = [p.kernel_h, p.kernel_w] if p.HasField("kernel_h") else [p.kernel_size] * 2
    stride = [p.stride_h, p.stride_w] if p.HasField("stride_h") else [p.stride] * 2
    pad = [p.pad_h, p.pad_w] if (p.HasField("pad_h") or p.HasField("pad_w")) else [p.pad] * 2
    if 0 in kernel or 0 in stride:
        raise ModelLoadError(f"layer '{layer.name}' (Pooling): kernel and stride must be > 0 (got {kernel}, {stride})")
    ceil = p.ceil_mode if p.HasField("ceil_mode") else p.round_mode == _CEIL
    out_hw = [pooled_size(i, k, s, q, ceil, clip_last=False) for i, k, s, q in zip((h, w), kernel, stride, pad)]
    if any(pad):  # Caffe drops a last window that starts in the padding, on both axes once any pad is set
        out_hw = [o - 1 if (o - 1) * s >= i + q else o for o, s, i, q in zip(out_hw, stride, (h, w), pad)]
    method = "max" if p.pool == _MAX else "avg"
    return [pool2d(ctx.b, x, layer.name, method, kernel, stride, pad, out_hw, output=ctx.out_name(layer)[0])]
