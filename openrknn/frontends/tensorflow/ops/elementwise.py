"""Element-wise arithmetic, activations, Softmax and Identity.

Binary ops follow numpy broadcasting in TensorFlow layout. When one operand is a channels-first
4-D tensor, a constant operand is padded to rank 4 and permuted the same way, so the op runs in
NCHW without a Transpose; constant-only ops fold in numpy.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from openrknn.frontends.tensorflow.context import NHWC_TO_NCHW, Context, Value, attr
from openrknn.frontends.tensorflow.ops import CONVERTERS

_BINARY: dict[str, tuple[str, Callable[[Any, Any], Any]]] = {
    "Add": ("Add", np.add), "AddV2": ("Add", np.add), "Sub": ("Sub", np.subtract),
    "Mul": ("Mul", np.multiply), "RealDiv": ("Div", np.divide),
    "Maximum": ("Max", np.maximum), "Minimum": ("Min", np.minimum),
}
_UNARY: dict[str, tuple[str, Callable[[Any], Any]]] = {
    "Relu": ("Relu", lambda x: np.maximum(x, 0)),
    "Sigmoid": ("Sigmoid", lambda x: 1.0 / (1.0 + np.exp(-x))),
    "Tanh": ("Tanh", np.tanh),
    "Sqrt": ("Sqrt", np.sqrt),
    "Exp": ("Exp", np.exp),
    "Neg": ("Neg", np.negative),
}


def _fits_channels_first(value: Value) -> bool:
    if value.const is not None:
        return value.const.ndim <= 4
    return value.rank == 4


def _operand(ctx: Context, value: Value, channels_first: bool, hint: str) -> str:
    if value.const is not None:
        array = np.asarray(value.const, np.float32)
        if channels_first and array.ndim > 0:
            array = np.transpose(array.reshape((1,) * (4 - array.ndim) + array.shape), NHWC_TO_NCHW)
        return ctx.const_name(array, value.name or hint)
    return ctx.as_cf(value, hint) if channels_first else ctx.as_tf(value, hint)


@CONVERTERS.register(*_BINARY)
def binary(ctx: Context, node: Any) -> Value:
    """Add/AddV2/Sub/Mul/RealDiv/Maximum/Minimum with broadcasting."""
    a, b = ctx.input(node, 0), ctx.input(node, 1)
    onnx_op, fn = _BINARY[node.op]
    rank = max(a.rank, b.rank)
    if a.const is not None and b.const is not None:
        return Value(node.name, rank, const=np.asarray(fn(a.const, b.const)))
    channels_first = (rank == 4 and any(v.channels_first for v in (a, b))
                      and all(_fits_channels_first(v) for v in (a, b)))
    names = [_operand(ctx, v, channels_first, f"{node.name}/{side}") for v, side in ((a, "x"), (b, "y"))]
    return ctx.emit(onnx_op, names, node, rank, channels_first=channels_first)


@CONVERTERS.register(*_UNARY)
def unary(ctx: Context, node: Any) -> Value:
    """Relu, Sigmoid, Tanh, Sqrt, Exp, Neg (layout kept)."""
    x = ctx.input(node, 0)
    onnx_op, fn = _UNARY[node.op]
    if x.const is not None:
        return Value(node.name, x.rank, const=np.asarray(fn(x.const.astype(np.float32))))
    return ctx.emit(onnx_op, [x.name if x.channels_first else ctx.as_tf(x)], node, x.rank,
                    channels_first=x.channels_first)


@CONVERTERS.register("Rsqrt")
def rsqrt(ctx: Context, node: Any) -> Value:
    """``1 / sqrt(x)`` (folds for constants, as in unfused batch norms)."""
    x = ctx.input(node, 0)
    if x.const is not None:
        return Value(node.name, x.rank, const=1.0 / np.sqrt(x.const.astype(np.float32)))
    root = ctx.emit("Sqrt", [x.name if x.channels_first else ctx.as_tf(x)], node, x.rank,
                    channels_first=x.channels_first, suffix="/sqrt")
    return ctx.emit("Reciprocal", [root.name], node, x.rank, channels_first=x.channels_first)


@CONVERTERS.register("Relu6")
def relu6(ctx: Context, node: Any) -> Value:
    """Relu6 as Clip(0, 6)."""
    x = ctx.input(node, 0)
    if x.const is not None:
        return Value(node.name, x.rank, const=np.clip(x.const, 0, 6))
    low = ctx.const_name(np.float32(0.0), f"{node.name}/min")
    high = ctx.const_name(np.float32(6.0), f"{node.name}/max")
    return ctx.emit("Clip", [x.name if x.channels_first else ctx.as_tf(x), low, high], node, x.rank,
                    channels_first=x.channels_first)


@CONVERTERS.register("LeakyRelu")
def leaky_relu(ctx: Context, node: Any) -> Value:
    """LeakyRelu with its ``alpha``."""
    x = ctx.input(node, 0)
    return ctx.emit("LeakyRelu", [x.name if x.channels_first else ctx.as_tf(x)], node, x.rank,
                    channels_first=x.channels_first, alpha=float(attr(node, "alpha", 0.2)))


@CONVERTERS.register("Softmax")
def softmax(ctx: Context, node: Any) -> Value:
    """Softmax over TensorFlow's last axis (axis 1 of a channels-first tensor)."""
    x = ctx.input(node, 0)
    axis = 1 if x.channels_first else -1
    return ctx.emit("Softmax", [x.name if x.channels_first else ctx.as_tf(x)], node, x.rank,
                    channels_first=x.channels_first, axis=axis)


@CONVERTERS.register("Identity", "StopGradient", "Snapshot")
def identity(ctx: Context, node: Any) -> Value:
    """Aliases: the output is the input value itself."""
    return ctx.input(node, 0)
