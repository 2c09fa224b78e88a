"""Convolution, Deconvolution and InnerProduct."""
from __future__ import annotations

from openrknn.errors import ModelLoadError
from openrknn.frontends.caffe.context import CONVERTERS, CaffeContext, CaffeLayer


def _pair(repeated, h: int | None, w: int | None, default: int, what: str, layer: CaffeLayer) -> list[int]:
    if h is not None and w is not None:
        return [int(h), int(w)]
    values = list(repeated)
    if not values:
        return [default, default]
    if len(values) > 2:
        raise ModelLoadError(f"layer '{layer.name}' ({layer.type}): only 2-D {what} is supported, got {values}")
    return [int(values[0]), int(values[-1])]


def conv_geometry(layer: CaffeLayer) -> tuple[list[int], list[int], list[int], list[int]]:
    """Kernel, stride, pad and dilation (each [h, w]) of a convolution_param."""
    p = layer.msg.convolution_param
    opt = lambda f: getattr(p, f) if p.HasField(f) else None  # noqa: E731
    kernel = _pair(p.kernel_size, opt("kernel_h"), opt("kernel_w"), 0, "kernel", layer)
    if 0 in kernel:
        raise ModelLoadError(f"layer '{layer.name}' ({layer.type}): convolution_param has no kernel_size")
    stride = _pair(p.stride, opt("stride_h"), opt("stride_w"), 1, "stride", layer)
    has_hw_pad = p.HasField("pad_h") or p.HasField("pad_w")
    pad = [p.pad_h, p.pad_w] if has_hw_pad else _pair(p.pad, None, None, 0, "pad", layer)
    dilation = _pair(p.dilation, None, None, 1, "dilation", layer)
    return kernel, stride, pad, dilation


@CONVERTERS.register("Convolution", "Deconvolution")
def convolution(ctx: CaffeContext, layer: CaffeLayer) -> list[str]:
    """Conv / ConvTranspose; Caffe weights are (out, in/g, kh, kw) and (in, out/g, kh, kw) like ONNX."""
    p = layer.msg.convolution_param
    x = ctx.input(layer)
    channels = ctx.shape(x)[1]
    kernel, stride, pad, dilation = conv_geometry(layer)
    group = p.group or 1
    if not p.HasField("num_output") or channels % group or p.num_output % group:
        raise ModelLoadError(f"layer '{layer.name}' ({layer.type}): num_output ({p.num_output}) and input channels "
                             f"({channels}) must both be multiples of group ({group})")
    deconv = layer.type == "Deconvolution"
    shape = [channels, p.num_output // group] if deconv else [p.num_output, channels // group]
    inputs = [x, ctx.b.const(f"{layer.name}/weight", ctx.weight(layer, 0, shape + kernel, "weights"))]
    if p.bias_term:
        inputs.append(ctx.b.const(f"{layer.name}/bias", ctx.weight(layer, 1, [p.num_output], "bias")))
    op = "ConvTranspose" if deconv else "Conv"
    out = ctx.b.node(op, inputs, layer.name, outputs=ctx.out_name(layer), kernel_shape=kernel, strides=stride,
                     pads=pad * 2, dilations=dilation, group=group)
    return [out]


@CONVERTERS.register("InnerProduct")
def inner_product(ctx: CaffeContext, layer: CaffeLayer) -> list[str]:
    """Flatten from ``axis`` then Gemm (weights (N, K), or (K, N) with ``transpose``)."""
    p = layer.msg.inner_product_param
    x = ctx.input(layer)
    in_shape = ctx.shape(x)
    axis = p.axis % len(in_shape)
    k = 1
    for d in in_shape[axis:]:
        k *= d
    if axis != 1 or len(in_shape) != 2:
        x = ctx.b.node("Flatten", [x], f"{layer.name}/flatten", axis=axis)
    w_shape = [k, p.num_output] if p.transpose else [p.num_output, k]
    inputs = [x, ctx.b.const(f"{layer.name}/weight", ctx.weight(layer, 0, w_shape, "weights"))]
    if p.bias_term:
        inputs.append(ctx.b.const(f"{layer.name}/bias", ctx.weight(layer, 1, [p.num_output], "bias")))
    out = ctx.b.node("Gemm", inputs, layer.name, outputs=ctx.out_name(layer), transB=0 if p.transpose else 1)
    if axis != 1:
        new_shape = in_shape[:axis] + [p.num_output]
        out = ctx.b.node("Reshape", [out, ctx.b.ints(f"{layer.name}/shape", new_shape)], f"{layer.name}/reshape")
    return [out]
