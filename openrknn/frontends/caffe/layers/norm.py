"""BatchNorm (fused with a following Scale), Scale, Bias, LRN and SSD's Normalize."""
from __future__ import annotations

import numpy as np

from openrknn.errors import ModelLoadError
from openrknn.frontends.caffe.context import CONVERTERS, CaffeContext, CaffeLayer

_WITHIN_CHANNEL = 1


@CONVERTERS.register("BatchNorm")
def batch_norm(ctx: CaffeContext, layer: CaffeLayer) -> list[str]:
    """Caffe BatchNorm blobs: mean, variance, scale factor (mean/var are divided by it).

    A Scale layer right after it (reading its top) is folded in as gamma/beta: one
    BatchNormalization node named after the BatchNorm layer.
    """
    x = ctx.input(layer)
    channels = ctx.shape(x)[1]
    eps = layer.msg.batch_norm_param.eps
    mean = ctx.weight(layer, 0, [channels], "mean", fill="normal")
    var = ctx.weight(layer, 1, [channels], "variance", fill="positive")
    if ctx.blob_arrays is not None and ctx.has_blob(layer, 2):
        factor = float(ctx.weight(layer, 2, [1], "scale factor")[0])
        factor = 0.0 if factor == 0 else 1.0 / factor
        mean, var = mean * factor, var * factor
    gamma, beta = np.ones(channels, np.float32), np.zeros(channels, np.float32)
    scale = ctx.take_next(layer, "Scale")
    tops = layer.tops
    if scale is not None:
        gamma, beta = _scale_weights(ctx, scale, channels)
        tops = scale.tops
    b = ctx.b
    inputs = [x] + [b.const(f"{layer.name}/{n}", v) for n, v in
                    (("scale", gamma), ("bias", beta), ("mean", mean), ("var", var))]
    out = b.node("BatchNormalization", inputs, layer.name, outputs=ctx.out_names(layer, tops)[:1], epsilon=eps)
    if scale is not None:
        ctx.tensors[scale.tops[0]] = out
    return [out]


def _scale_weights(ctx: CaffeContext, layer: CaffeLayer, channels: int) -> tuple[np.ndarray, np.ndarray]:
    p = layer.msg.scale_param
    gamma = ctx.weight(layer, 0, [channels], "scale", fill="positive")
    beta = (ctx.weight(layer, 1, [channels], "bias", fill="normal") if p.bias_term
            else np.zeros(channels, np.float32))
    return gamma, beta


def _param_shape(ctx: CaffeContext, layer: CaffeLayer, in_shape: list[int], axis: int, num_axes: int) -> list[int]:
    """Shape of a Scale/Bias parameter spanning ``num_axes`` axes from ``axis``, broadcastable to the input."""
    axis %= len(in_shape)
    end = len(in_shape) if num_axes == -1 else axis + num_axes
    if end > len(in_shape):
        raise ModelLoadError(f"layer '{layer.name}' ({layer.type}): axis {axis} + num_axes {num_axes} exceed "
                             f"the input rank {len(in_shape)}")
    return in_shape[axis:end] + [1] * (len(in_shape) - end)


@CONVERTERS.register("Scale")
def scale(ctx: CaffeContext, layer: CaffeLayer) -> list[str]:
    """``x * scale (+ bias)``; the scale comes from a blob or from a second bottom."""
    p = layer.msg.scale_param
    b = ctx.b
    x = ctx.input(layer)
    shape = ctx.shape(x)
    if len(layer.bottoms) > 1:
        factor = ctx.input(layer, 1)
        f_shape = ctx.shape(factor)
        axis = p.axis % len(shape)
        pshape = f_shape + [1] * (len(shape) - axis - len(f_shape))   # the bias takes the factor's shape
        factor = b.node("Reshape", [factor, b.ints(f"{layer.name}/shape", pshape)], f"{layer.name}/reshape")
    else:
        pshape = _param_shape(ctx, layer, shape, p.axis, p.num_axes)
        factor = b.const(f"{layer.name}/scale", ctx.weight(layer, 0, [d for d in pshape], "scale", fill="positive"))
    last = not p.bias_term
    y = b.node("Mul", [x, factor], layer.name if last else f"{layer.name}/mul",
               outputs=ctx.out_name(layer) if last else None)
    if p.bias_term:
        blob = 0 if len(layer.bottoms) > 1 else 1
        bias = b.const(f"{layer.name}/bias", ctx.weight(layer, blob, pshape, "bias"))
        y = b.node("Add", [y, bias], layer.name, outputs=ctx.out_name(layer))
    return [y]


@CONVERTERS.register("Bias")
def bias(ctx: CaffeContext, layer: CaffeLayer) -> list[str]:
    """``x + bias`` (blob broadcast from ``axis``)."""
    p = layer.msg.bias_param
    x = ctx.input(layer)
    pshape = _param_shape(ctx, layer, ctx.shape(x), p.axis, p.num_axes)
    value = ctx.b.const(f"{layer.name}/bias", ctx.weight(layer, 0, pshape, "bias"))
    return [ctx.b.node("Add", [x, value], layer.name, outputs=ctx.out_name(layer))]


@CONVERTERS.register("LRN")
def lrn(ctx: CaffeContext, layer: CaffeLayer) -> list[str]:
    """ACROSS_CHANNELS: ONNX LRN. WITHIN_CHANNEL: ``x / (1 + alpha/n^2 * sum_{n x n} x^2) ** beta``."""
    p = layer.msg.lrn_param
    b = ctx.b
    x = ctx.input(layer)
    if p.norm_region != _WITHIN_CHANNEL:
        return [b.node("LRN", [x], layer.name, outputs=ctx.out_name(layer), size=p.local_size, alpha=p.alpha,
                       beta=p.beta, bias=p.k)]
    n, half = p.local_size, (p.local_size - 1) // 2
    sq = b.node("Mul", [x, x], f"{layer.name}/square")
    avg = b.node("AveragePool", [sq], f"{layer.name}/pool", kernel_shape=[n, n], pads=[half] * 4, count_include_pad=1)
    scaled = b.node("Mul", [avg, b.const(f"{layer.name}/alpha", np.float32(p.alpha))], f"{layer.name}/alpha")
    base = b.node("Add", [scaled, b.const(f"{layer.name}/one", np.float32(1.0))], f"{layer.name}/add")
    denom = b.node("Pow", [base, b.const(f"{layer.name}/beta", np.float32(p.beta))], f"{layer.name}/pow")
    return [b.node("Div", [x, denom], layer.name, outputs=ctx.out_name(layer))]


@CONVERTERS.register("Normalize")
def normalize(ctx: CaffeContext, layer: CaffeLayer) -> list[str]:
    """SSD L2 normalisation: ``x / sqrt(sum x^2 + eps) * scale`` over channels (or C,H,W)."""
    p = layer.msg.norm_param
    b = ctx.b
    x = ctx.input(layer)
    shape = ctx.shape(x)
    axes = list(range(1, len(shape))) if p.across_spatial else [1]
    channels = 1 if p.channel_shared else shape[1]
    sumsq = b.node("ReduceSumSquare", [x], f"{layer.name}/sumsq", axes=axes, keepdims=1)  # opset 17: axes attribute
    plus = b.node("Add", [sumsq, b.const(f"{layer.name}/eps", np.float32(p.eps))], f"{layer.name}/eps")
    norm = b.node("Sqrt", [plus], f"{layer.name}/sqrt")
    unit = b.node("Div", [x, norm], f"{layer.name}/div")
    fill_value = p.scale_filler.value if p.HasField("scale_filler") else 1.0
    if ctx.blob_arrays is None:
        factor = np.full([channels], fill_value or 1.0, np.float32)
    else:
        factor = ctx.weight(layer, 0, [channels], "scale")
    factor = factor.reshape([channels] + [1] * (len(shape) - 2))
    return [b.node("Mul", [unit, b.const(f"{layer.name}/scale", factor)], layer.name, outputs=ctx.out_name(layer))]
