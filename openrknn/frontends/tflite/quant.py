"""DEQUANTIZE, QUANTIZE and DENSIFY.

The ONNX graph computes in real values (``r = s·(q − z)``). DEQUANTIZE and DENSIFY of a
constant are folded at load time (float16 weights become float32, sparse weights dense);
on activations QUANTIZE/DEQUANTIZE carry the value unchanged and the quantization parameters
of their integer side are kept in ``SourceModel.quant_params``.
"""
from __future__ import annotations

import numpy as np

from openrknn.frontends.tflite.context import Context, converter
from openrknn.frontends.tflite.reader import Operator, densify


@converter("DEQUANTIZE")
def dequantize(ctx: Context, op: Operator) -> None:
    value = ctx.const(op.inputs[0]) if ctx.is_const(op.inputs[0]) else None
    if value is not None:
        ctx.set_folded(op.outputs[0], np.asarray(value).astype(np.float32))
        return
    ctx.alias(op.inputs[0], op.outputs[0])


@converter("QUANTIZE")
def quantize(ctx: Context, op: Operator) -> None:
    ctx.alias(op.inputs[0], op.outputs[0])


@converter("DENSIFY")
def densify_op(ctx: Context, op: Operator) -> None:
    source = ctx.tensor(op.inputs[0])
    dense = densify(source) if source.sparsity is not None else source.data
    if source.quantized and dense.dtype.kind in "iu":
        out = ctx.tensor(op.outputs[0])
        out.data = dense   # the dense tensor keeps the quantization parameters of the sparse one
        out.scale, out.zero_point, out.quant_axis = source.scale, source.zero_point, source.quant_axis
        return
    ctx.set_folded(op.outputs[0], dense)
