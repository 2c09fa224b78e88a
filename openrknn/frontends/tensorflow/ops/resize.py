"""ResizeBilinear and ResizeNearestNeighbor as ONNX Resize.

Coordinate mapping, with ``scale = in / out`` (``(in - 1) / (out - 1)`` for align_corners):

============================  =====================  ===================================
TensorFlow flags              ONNX coordinate mode   nearest pixel
============================  =====================  ===================================
(none)                        ``asymmetric``         ``floor(x·scale)``: ``floor``
``align_corners``             ``align_corners``      ``round``: ``round_prefer_ceil``
``half_pixel_centers``        ``half_pixel``         ``floor((x + ½)·scale)``: ``round_prefer_ceil``
============================  =====================  ===================================

(the last row: ``(x + ½)·scale − ½`` rounded half up is ``floor((x + ½)·scale)``).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from openrknn.errors import ModelLoadError
from openrknn.frontends.tensorflow.context import Context, Value, attr
from openrknn.frontends.tensorflow.ops import CONVERTERS


@CONVERTERS.register("ResizeBilinear", "ResizeNearestNeighbor")
def resize(ctx: Context, node: Any) -> Value:
    """Resize the H, W axes of an NHWC tensor to a constant size."""
    size = ctx.const_input(node, 1, "size").astype(np.int64).reshape(-1)
    if size.size != 2:
        raise ModelLoadError(f"{ctx.source}: node '{node.name}' ({node.op}): size must hold 2 values, got {size}")
    value = ctx.input(node, 0)
    x = ctx.as_cf(value, node.name)
    n, _, _, c = ctx.tf_shape(value)
    sizes = ctx.const_name(np.asarray([n, c, *size], np.int64), f"{node.name}/sizes", dtype=np.int64)
    align, half = bool(attr(node, "align_corners", False)), bool(attr(node, "half_pixel_centers", False))
    if align and half:
        raise ModelLoadError(f"{ctx.source}: node '{node.name}' ({node.op}): align_corners and half_pixel_centers "
                             "cannot both be set")
    coordinate = "align_corners" if align else "half_pixel" if half else "asymmetric"
    if node.op == "ResizeBilinear":
        return ctx.emit("Resize", [x, "", "", sizes], node, 4, channels_first=True, mode="linear",
                        coordinate_transformation_mode=coordinate)
    nearest = "round_prefer_ceil" if align or half else "floor"
    return ctx.emit("Resize", [x, "", "", sizes], node, 4, channels_first=True, mode="nearest",
                    coordinate_transformation_mode=coordinate, nearest_mode=nearest)
