"""Element-wise layers: ReLU, PReLU, ELU, Sigmoid, TanH, AbsVal, BNLL, Power, Dropout, Softmax."""
from __future__ import annotations

import numpy as np

from openrknn.frontends.caffe.context import CONVERTERS, CaffeContext, CaffeLayer

_SIMPLE = {"Sigmoid": "Sigmoid", "TanH": "Tanh", "AbsVal": "Abs", "BNLL": "Softplus", "Dropout": "Identity"}


@CONVERTERS.register(*_SIMPLE)
def simple(ctx: CaffeContext, layer: CaffeLayer) -> list[str]:
    """One-to-one element-wise ops (Dropout is the identity at inference)."""
    return [ctx.b.node(_SIMPLE[layer.type], [ctx.input(layer)], layer.name, outputs=ctx.out_name(layer))]


@CONVERTERS.register("ReLU")
def relu(ctx: CaffeContext, layer: CaffeLayer) -> list[str]:
    """``max(x, 0) + negative_slope * min(x, 0)``."""
    slope = layer.msg.relu_param.negative_slope
    if slope:
        return [ctx.b.node("LeakyRelu", [ctx.input(layer)], layer.name, outputs=ctx.out_name(layer), alpha=slope)]
    return [ctx.b.node("Relu", [ctx.input(layer)], layer.name, outputs=ctx.out_name(layer))]


@CONVERTERS.register("ELU")
def elu(ctx: CaffeContext, layer: CaffeLayer) -> list[str]:
    """``x if x > 0 else alpha * (exp(x) - 1)``."""
    alpha = layer.msg.elu_param.alpha
    return [ctx.b.node("Elu", [ctx.input(layer)], layer.name, outputs=ctx.out_name(layer), alpha=alpha)]


@CONVERTERS.register("PReLU")
def prelu(ctx: CaffeContext, layer: CaffeLayer) -> list[str]:
    """Per-channel (or shared) learned slope, blob shape (C,) or (1,)."""
    x = ctx.input(layer)
    shape = ctx.shape(x)
    channels = 1 if layer.msg.prelu_param.channel_shared else shape[1]
    slope = ctx.weight(layer, 0, [channels], "slope", fill="positive") * (0.25 if ctx.blob_arrays is None else 1)
    slope = slope.reshape([channels] + [1] * (len(shape) - 2))
    return [ctx.b.node("PRelu", [x, ctx.b.const(f"{layer.name}/slope", slope)], layer.name,
                       outputs=ctx.out_name(layer))]


@CONVERTERS.register("Power")
def power(ctx: CaffeContext, layer: CaffeLayer) -> list[str]:
    """``(shift + scale * x) ** power``; trivial factors are left out."""
    p = layer.msg.power_param
    b = ctx.b
    y = ctx.input(layer)
    steps = []
    if p.scale != 1:
        steps.append(("Mul", p.scale))
    if p.shift != 0:
        steps.append(("Add", p.shift))
    if p.power != 1:
        steps.append(("Pow", p.power))
    if not steps:
        return [b.node("Identity", [y], layer.name, outputs=ctx.out_name(layer))]
    for i, (op, value) in enumerate(steps):
        last = i == len(steps) - 1
        const = b.const(f"{layer.name}/{op.lower()}", np.float32(value))
        y = b.node(op, [y, const], layer.name if last else f"{layer.name}/{op.lower()}",
                   outputs=ctx.out_name(layer) if last else None)
    return [y]


@CONVERTERS.register("Softmax")
def softmax(ctx: CaffeContext, layer: CaffeLayer) -> list[str]:
    """Softmax over ``axis`` (ONNX opset-13 semantics: a single axis, like Caffe)."""
    return [ctx.b.node("Softmax", [ctx.input(layer)], layer.name, outputs=ctx.out_name(layer),
                       axis=layer.msg.softmax_param.axis)]
