"""RESIZE_BILINEAR, RESIZE_NEAREST_NEIGHBOR, DEPTH_TO_SPACE and SPACE_TO_DEPTH (all NCHW in ONNX).

TFLite's resize flags map to ONNX ``coordinate_transformation_mode``: ``align_corners`` →
``align_corners``; ``half_pixel_centers`` → ``half_pixel`` (bilinear) or
``tf_half_pixel_for_nn`` (nearest); neither → ``asymmetric``. Nearest rounding is ``floor``,
or round-half-up with ``align_corners``. TensorFlow's depth-to-space order is ONNX ``DCR``.
"""
from __future__ import annotations

import numpy as np

from openrknn.frontends.tflite.context import NCHW, Context, converter
from openrknn.frontends.tflite.reader import Operator


@converter("RESIZE_BILINEAR", "RESIZE_NEAREST_NEIGHBOR")
def resize(ctx: Context, op: Operator) -> None:
    o = op.options
    align, half = bool(o.AlignCorners()), bool(o.HalfPixelCenters())
    bilinear = op.name == "RESIZE_BILINEAR"
    if align:
        mode = "align_corners"
    elif half:
        mode = "half_pixel" if bilinear else "tf_half_pixel_for_nn"
    else:
        mode = "asymmetric"
    n, _, _, c = ctx.shape(op.inputs[0])
    h, w = ctx.shape(op.outputs[0])[1:3]
    sizes = ctx.add_const(np.array([n, c, h, w], np.int64), f"{ctx.op_label(op)}_sizes")
    attrs = {"mode": "linear"} if bilinear else {
        "mode": "nearest", "nearest_mode": "round_prefer_ceil" if align else "floor"}
    ctx.emit(op, "Resize", [ctx.get(op.inputs[0], NCHW), "", "", sizes], NCHW,
             coordinate_transformation_mode=mode, **attrs)


@converter("DEPTH_TO_SPACE")
def depth_to_space(ctx: Context, op: Operator) -> None:
    ctx.emit(op, "DepthToSpace", [ctx.get(op.inputs[0], NCHW)], NCHW, blocksize=op.options.BlockSize(), mode="DCR")


@converter("SPACE_TO_DEPTH")
def space_to_depth(ctx: Context, op: Operator) -> None:
    ctx.emit(op, "SpaceToDepth", [ctx.get(op.inputs[0], NCHW)], NCHW, blocksize=op.options.BlockSize())
