"""Activation, LeakyReLU, softmax / SoftmaxOutput and element-wise unary math."""
from __future__ import annotations

import numpy as np

from openrknn.errors import UnsupportedOpError
from openrknn.frontends.mxnet.context import MxContext, register
from openrknn.frontends.mxnet.symbol import MxNode

_ACT = {"relu": "Relu", "sigmoid": "Sigmoid", "tanh": "Tanh", "softrelu": "Softplus", "softsign": "Softsign"}
_UNARY = {"log": "Log", "exp": "Exp", "sqrt": "Sqrt", "abs": "Abs", "negative": "Neg", "sigmoid": "Sigmoid",
          "tanh": "Tanh", "relu": "Relu", "floor": "Floor", "ceil": "Ceil"}


@register("Activation")
def activation(ctx: MxContext, node: MxNode) -> str:
    """act_type relu / sigmoid / tanh / softrelu (``ln(1+eˣ)``) / softsign."""
    act = node.get_str("act_type", "relu")
    if act not in _ACT:
        raise UnsupportedOpError(f"Activation(act_type={act})", node.name, "MXNet",
                                 f"supported act_type: {', '.join(_ACT)}")
    return ctx.g.node(_ACT[act], [ctx.input(node)], node.name)


@register("LeakyReLU")
def leaky_relu(ctx: MxContext, node: MxNode) -> str:
    """act_type leaky (``max(x, slope·x)``, slope 0.25), prelu (learned γ per channel), elu, selu,
    gelu (``x·Φ(x)``) and rrelu (slope ``(lower + upper)/2`` at inference)."""
    act, x, g = node.get_str("act_type", "leaky"), ctx.input(node), ctx.g
    if act == "leaky":
        return g.node("LeakyRelu", [x], node.name, alpha=node.get_float("slope", 0.25))
    if act == "rrelu":
        alpha = (node.get_float("lower_bound", 0.125) + node.get_float("upper_bound", 0.334)) / 2
        return g.node("LeakyRelu", [x], node.name, alpha=alpha)
    if act == "elu":
        return g.node("Elu", [x], node.name, alpha=node.get_float("slope", 0.25))
    if act == "selu":
        return g.node("Selu", [x], node.name)
    if act == "prelu":
        gamma = ctx.param(node, 1, "gamma")
        rank = len(ctx.shape(x))
        slope = g.const(f"{node.name}_gamma", gamma.reshape((-1,) + (1,) * max(rank - 2, 0)))
        return g.node("PRelu", [x, slope], node.name)
    if act == "gelu":
        scaled = g.node("Mul", [x, ctx.scalar(node, 1 / np.sqrt(2.0), "inv_sqrt2")], f"{node.name}_scale")
        erf = g.node("Erf", [scaled], f"{node.name}_erf")
        cdf = g.node("Add", [erf, ctx.scalar(node, 1.0, "one")], f"{node.name}_cdf")
        half = g.node("Mul", [x, ctx.scalar(node, 0.5, "half")], f"{node.name}_half")
        return g.node("Mul", [half, cdf], node.name)
    raise UnsupportedOpError(f"LeakyReLU(act_type={act})", node.name, "MXNet",
                             "supported act_type: leaky, prelu, elu, selu, gelu, rrelu")


def _with_temperature(ctx: MxContext, node: MxNode, x: str) -> str:
    t = node.get_float("temperature", 1.0)
    if t == 1.0:
        return x
    return ctx.g.node("Mul", [x, ctx.scalar(node, 1.0 / t, "inv_temperature")], f"{node.name}_temperature")


@register("softmax", "log_softmax")
def softmax(ctx: MxContext, node: MxNode) -> str:
    """softmax / log_softmax over ``axis`` (default -1), with ``temperature``."""
    x = _with_temperature(ctx, node, ctx.input(node))
    op = "Softmax" if node.op == "softmax" else "LogSoftmax"
    return ctx.g.node(op, [x], node.name, axis=node.get_int("axis", -1))


@register("SoftmaxOutput", "SoftmaxActivation")
def softmax_output(ctx: MxContext, node: MxNode) -> str:
    """The inference half of SoftmaxOutput (the label input is ignored): softmax over the last
    axis (preserve_shape), over axis 1 (multi_output, or SoftmaxActivation mode=channel), or over
    all but the first axis (default)."""
    x, g = ctx.input(node), ctx.g
    shape = ctx.shape(x)
    if node.get_bool("preserve_shape", False):
        return g.node("Softmax", [x], node.name, axis=-1)
    if node.get_bool("multi_output", False) or node.get_str("mode", "instance") == "channel" or len(shape) == 2:
        return g.node("Softmax", [x], node.name, axis=1)
    flat = g.node("Flatten", [x], f"{node.name}_flatten", axis=1)
    soft = g.node("Softmax", [flat], f"{node.name}_softmax", axis=1)
    return g.node("Reshape", [soft, g.const(f"{node.name}_shape", shape, np.int64)], node.name)


@register(*_UNARY)
def unary(ctx: MxContext, node: MxNode) -> str:
    """Element-wise math: log, exp, sqrt, abs, negative, sigmoid, tanh, relu, floor, ceil."""
    return ctx.g.node(_UNARY[node.op], [ctx.input(node)], node.name)
