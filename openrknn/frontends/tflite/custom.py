"""CUSTOM ops: refused with their name, unless a class was registered for them (``reg_custom_op``).

A registered custom op becomes one ONNX node of domain ``CUSTOM_DOMAIN`` whose ``op_type`` is the
TFLite custom code. Its inputs and outputs keep the TFLite layout (NHWC) and names; the node
carries the raw ``custom_options`` bytes as the INTS attribute ``custom_options`` and, when
those bytes are a FlexBuffer map (the usual TFLite encoding), one attribute per scalar, string
or numeric-list entry. The registered class's ``compute(node, inputs)`` runs it in the simulator.
"""
from __future__ import annotations

import struct
from typing import Any

from onnx import TensorProto, helper

from openrknn.errors import UnsupportedOpError
from openrknn.frontends.tflite.context import NATIVE, Context, converter
from openrknn.frontends.tflite.conv import emit_transpose_conv
from openrknn.frontends.tflite.reader import Operator
from openrknn.graph.custom_ops import CUSTOM_DOMAIN


@converter("CUSTOM")
def custom(ctx: Context, op: Operator) -> None:
    code = op.custom_code or "CUSTOM"
    registered = ctx.custom_ops is not None and code in ctx.custom_ops
    if code == "Convolution2DTransposeBias" and not registered:
        return _transpose_conv_bias(ctx, op)
    if not registered:
        raise UnsupportedOpError(code, ctx.op_label(op), "TFLite", hint=(
            f"it is a TFLite custom op; register a Python class with op_type = '{code}' through "
            "RKNN.reg_custom_op() before load_tflite() to run it"))
    inputs = [ctx.get(i) if i >= 0 else "" for i in op.inputs]
    outputs = [ctx.out(o, NATIVE) for o in op.outputs]
    attrs = {"custom_options": list(op.custom_options)}
    attrs.update(flexbuffer_attributes(op.custom_options))
    ctx.node(code, inputs, outputs, domain=CUSTOM_DOMAIN, **attrs)
    for o, name in zip(op.outputs, outputs):
        t = ctx.tensor(o)
        float_domain = t.dtype.kind == "f" or t.quantized   # the graph computes in float32 real values
        elem = TensorProto.FLOAT if float_domain else helper.np_dtype_to_tensor_dtype(t.dtype)
        ctx.value_info.append(helper.make_tensor_value_info(name, elem, t.shape))


def _transpose_conv_bias(ctx: Context, op: Operator) -> None:
    """MediaPipe's ``Convolution2DTransposeBias`` (selfie segmentation, ...): TRANSPOSE_CONV with a
    bias; its options are the raw C struct ``TfLiteTransposeConvParams`` {padding (1 SAME, 2 VALID),
    stride_width, stride_height} as three little-endian int32."""
    options = bytes(op.custom_options)
    if len(options) < 12 or len(op.inputs) < 3:
        raise UnsupportedOpError("Convolution2DTransposeBias", ctx.op_label(op), "TFLite",
                                 hint="its options are not the 12-byte TfLiteTransposeConvParams struct")
    padding, stride_w, stride_h = struct.unpack("<3i", options[:12])
    out_shape = [int(v) for v in ctx.shape(op.outputs[0])]
    emit_transpose_conv(ctx, op, op.inputs[0], op.inputs[1], op.inputs[2], out_shape, padding == 1,
                        [stride_h, stride_w])


def flexbuffer_attributes(data: bytes) -> dict[str, Any]:
    """Scalar, string and numeric-list entries of a FlexBuffer map; {} for other encodings."""
    if not data:
        return {}
    try:
        from flatbuffers import flexbuffers

        decoded = flexbuffers.Loads(data)
    except Exception:   # not a FlexBuffer (e.g. a raw C struct, as MediaPipe writes): no named attributes
        return {}
    if not isinstance(decoded, dict):
        return {}
    attrs: dict[str, Any] = {}
    for key, value in decoded.items():
        if key == "custom_options":
            continue
        if isinstance(value, bool):
            attrs[key] = int(value)
        elif isinstance(value, (int, float, str)):
            attrs[key] = value
        elif isinstance(value, (list, tuple)) and value and all(isinstance(v, (int, float)) for v in value):
            attrs[key] = [float(v) for v in value] if any(isinstance(v, float) for v in value) else list(value)
    return attrs
