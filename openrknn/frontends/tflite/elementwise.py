"""Element-wise ops: arithmetic with broadcasting, activations, PRELU and SOFTMAX.

They run in whatever layout their tensor inputs already have, so no transpose is inserted
between two convolutions. A constant operand of lower rank is broadcast NumPy-style against
the TFLite (NHWC) shape, so it is first padded to rank 4 and then transposed with the data.
"""
from __future__ import annotations

import numpy as np

from openrknn.frontends.tflite.context import NATIVE, NCHW, TO_NCHW, Context, converter
from openrknn.frontends.tflite.reader import Operator

_BINARY = {"ADD": "Add", "SUB": "Sub", "MUL": "Mul", "DIV": "Div", "MAXIMUM": "Max", "MINIMUM": "Min",
           "POW": "Pow", "SQUARED_DIFFERENCE": "Sub"}
_UNARY = {"RELU": "Relu", "LOGISTIC": "Sigmoid", "TANH": "Tanh", "HARD_SWISH": "HardSwish", "ELU": "Elu",
          "EXP": "Exp", "ABS": "Abs", "SQRT": "Sqrt", "NEG": "Neg", "LOG": "Log", "FLOOR": "Floor",
          "CEIL": "Ceil", "SIN": "Sin", "COS": "Cos", "GELU": "Gelu"}
_CLIPS = {"RELU6": (0.0, 6.0), "RELU_N1_TO_1": (-1.0, 1.0), "RELU_0_TO_1": (0.0, 1.0)}


def broadcast_inputs(ctx: Context, idxs: list[int], out_idx: int) -> tuple[list[str], str]:
    """ONNX names of ``idxs`` in one common layout (NCHW when a rank-4 operand already is)."""
    dynamic = [i for i in idxs if not ctx.is_const(i)]
    layout = NATIVE
    if (ctx.rank(out_idx) == 4 and dynamic and all(ctx.rank(i) == 4 for i in dynamic)
            and any(ctx.layout(i) == NCHW for i in dynamic)):
        layout = NCHW
    names = []
    for i in idxs:
        if layout == NCHW and ctx.is_const(i) and ctx.rank(i) < 4:
            value = np.asarray(ctx.const(i))
            value = value.astype(np.float32) if value.dtype.kind == "f" else value
            value = value.reshape([1] * (4 - value.ndim) + list(value.shape)).transpose(TO_NCHW)
            names.append(ctx.add_const(value, f"{ctx.tensor(i).name}_nchw"))
        else:
            names.append(ctx.get(i, layout))
    return names, layout


def _fused(op: Operator) -> int:
    getter = getattr(op.options, "FusedActivationFunction", None)
    return getter() if getter is not None else 0


@converter(*_BINARY)
def binary(ctx: Context, op: Operator) -> None:
    names, layout = broadcast_inputs(ctx, op.inputs[:2], op.outputs[0])
    if op.name == "SQUARED_DIFFERENCE":
        diff = ctx.unique(f"{ctx.op_label(op)}_diff")
        ctx.node("Sub", names, [diff])
        ctx.emit(op, "Mul", [diff, diff], layout)
        return
    ctx.emit(op, _BINARY[op.name], names, layout, _fused(op))


@converter(*_UNARY)
def unary(ctx: Context, op: Operator) -> None:
    x, layout = ctx.get_any(op.inputs[0])
    attrs = {}
    if op.name == "GELU" and op.options is not None and op.options.Approximate():
        attrs["approximate"] = "tanh"
    ctx.emit(op, _UNARY[op.name], [x], layout, **attrs)


@converter("RSQRT")
def rsqrt(ctx: Context, op: Operator) -> None:
    x, layout = ctx.get_any(op.inputs[0])
    root = ctx.unique(f"{ctx.op_label(op)}_sqrt")
    ctx.node("Sqrt", [x], [root])
    ctx.emit(op, "Reciprocal", [root], layout)


@converter("SQUARE")
def square(ctx: Context, op: Operator) -> None:
    x, layout = ctx.get_any(op.inputs[0])
    ctx.emit(op, "Mul", [x, x], layout)


@converter(*_CLIPS)
def clip(ctx: Context, op: Operator) -> None:
    x, layout = ctx.get_any(op.inputs[0])
    lo, hi = _CLIPS[op.name]
    label = ctx.op_label(op)
    bounds = [ctx.add_const(np.array(lo, np.float32), f"{label}_min"),
              ctx.add_const(np.array(hi, np.float32), f"{label}_max")]
    ctx.emit(op, "Clip", [x] + bounds, layout)


@converter("LEAKY_RELU")
def leaky_relu(ctx: Context, op: Operator) -> None:
    x, layout = ctx.get_any(op.inputs[0])
    ctx.emit(op, "LeakyRelu", [x], layout, alpha=float(op.options.Alpha()))


@converter("PRELU")
def prelu(ctx: Context, op: Operator) -> None:
    names, layout = broadcast_inputs(ctx, op.inputs[:2], op.outputs[0])
    ctx.emit(op, "PRelu", names, layout)


@converter("SOFTMAX", "LOG_SOFTMAX")
def softmax(ctx: Context, op: Operator) -> None:
    x, layout = ctx.get_any(op.inputs[0])
    beta = float(op.options.Beta()) if op.name == "SOFTMAX" and op.options is not None else 1.0
    if beta != 1.0:
        scaled = ctx.unique(f"{ctx.op_label(op)}_beta")
        ctx.node("Mul", [x, ctx.add_const(np.array(beta, np.float32), f"{scaled}_value")], [scaled])
        x = scaled
    axis = 1 if layout == NCHW else -1
    ctx.emit(op, "Softmax" if op.name == "SOFTMAX" else "LogSoftmax", [x], layout, axis=axis)
