"""``config(inputs_yuv_fmt=[...])``: the model takes camera YUV frames and converts them itself.

Supported layouts (one per 3-channel image input; ``None`` leaves an input as it is):

* ``nv12`` / ``yuv420sp``: a ``(1, H*3/2, W)`` buffer: H rows of Y, then H/2 rows of interleaved U,V.
* ``nv21``: as nv12 with V,U interleaved.
* ``yuv444``: a ``(1, H, W, 3)`` buffer of Y,U,V per pixel.

Conversion is BT.601 full range (JFIF), chroma upsampled by repetition (nearest)::

    R = Y + 1.402 (V-128)
    G = Y - 0.344136 (U-128) - 0.714136 (V-128)
    B = Y + 1.772 (U-128)          then clipped to [0, 255]

The result is the RGB image the rest of the model (normalisation included) already expects.
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from openrknn.errors import ConfigError
from openrknn.graph.rknn_model import LAYOUT_NCHW, LAYOUT_NHWC, LAYOUT_UNDEFINED

SUPPORTED = ("nv12", "yuv420sp", "nv21", "yuv444")
# rows: Y, U-128, V-128 ; columns: R, G, B
_YUV_TO_RGB = np.array([[1.0, 1.0, 1.0], [0.0, -0.344136, 1.772], [1.402, -0.714136, 0.0]], dtype=np.float32)


def embed_yuv_inputs(model: onnx.ModelProto, formats: list[str | None], layouts: dict[str, str],
                     input_names: list[str]) -> tuple[onnx.ModelProto, dict[str, tuple[list[int], str]]]:
    """Prepend YUV→RGB conversion; returns the model and, per converted input, (new shape, new layout)."""
    if len(formats) != len(input_names):
        raise ConfigError(f"inputs_yuv_fmt gives {len(formats)} format(s) for {len(input_names)} input(s)")
    out = onnx.ModelProto()
    out.CopyFrom(model)
    changed: dict[str, tuple[list[int], str]] = {}
    prefix_nodes: list[onnx.NodeProto] = []
    for name, fmt in zip(input_names, formats):
        if fmt is None:
            continue
        if fmt not in SUPPORTED:
            raise ConfigError(f"inputs_yuv_fmt '{fmt}' is not supported; openrknn converts {list(SUPPORTED)}")
        value = next(v for v in out.graph.input if v.name == name)
        dims = [d.dim_value for d in value.type.tensor_type.shape.dim]
        layout = layouts.get(name, LAYOUT_UNDEFINED)
        if len(dims) != 4 or layout not in (LAYOUT_NCHW, LAYOUT_NHWC):
            raise ConfigError(f"inputs_yuv_fmt: input '{name}' is not a 4-D image (shape {dims})")
        channels, height, width = (dims[1], dims[2], dims[3]) if layout == LAYOUT_NCHW else (dims[3], dims[1], dims[2])
        if channels != 3 or (fmt != "yuv444" and (height % 2 or width % 2)):
            raise ConfigError(f"inputs_yuv_fmt: input '{name}' must have 3 channels and even height/width, got {dims}")
        rgb = f"{name}__rgb"
        for node in out.graph.node:
            for i, inp in enumerate(node.input):
                if inp == name:
                    node.input[i] = rgb
        nodes, inits, new_shape = _convert(name, rgb, fmt, height, width, layout)
        prefix_nodes += nodes
        out.graph.initializer.extend(inits)
        value.type.tensor_type.shape.ClearField("dim")
        for d in new_shape:
            value.type.tensor_type.shape.dim.add().dim_value = d
        changed[name] = (new_shape, LAYOUT_NHWC if fmt == "yuv444" else LAYOUT_UNDEFINED)
    if prefix_nodes:
        nodes = list(out.graph.node)
        del out.graph.node[:]
        out.graph.node.extend(prefix_nodes + nodes)
        del out.graph.value_info[:]
    return out, changed


def _const(name: str, array: np.ndarray) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(array), name)


def _convert(src: str, dst: str, fmt: str, h: int, w: int, layout: str):
    p = f"{src}__yuv"
    nodes: list[onnx.NodeProto] = []
    inits = [_const(f"{p}_m", _YUV_TO_RGB), _const(f"{p}_off", np.array([0, -128, -128], np.float32)),
             _const(f"{p}_lo", np.array(0, np.float32)), _const(f"{p}_hi", np.array(255, np.float32))]
    if fmt == "yuv444":
        yuv, shape = src, [1, h, w, 3]
    else:
        shape = [1, h * 3 // 2, w]
        inits += [_const(f"{p}_s0", np.array([0], np.int64)), _const(f"{p}_sh", np.array([h], np.int64)),
                  _const(f"{p}_se", np.array([h * 3 // 2], np.int64)), _const(f"{p}_ax", np.array([1], np.int64)),
                  _const(f"{p}_ysh", np.array([1, h, w, 1], np.int64)),
                  _const(f"{p}_uvsh", np.array([1, h // 2, w // 2, 2], np.int64)),
                  _const(f"{p}_scales", np.array([1, 2, 2, 1], np.float32))]
        nodes += [helper.make_node("Slice", [src, f"{p}_s0", f"{p}_sh", f"{p}_ax"], [f"{p}_y2"], name=f"{p}_y"),
                  helper.make_node("Reshape", [f"{p}_y2", f"{p}_ysh"], [f"{p}_y"], name=f"{p}_yr"),
                  helper.make_node("Slice", [src, f"{p}_sh", f"{p}_se", f"{p}_ax"], [f"{p}_uv2"], name=f"{p}_uv"),
                  helper.make_node("Reshape", [f"{p}_uv2", f"{p}_uvsh"], [f"{p}_uvs"], name=f"{p}_uvr"),
                  helper.make_node("Resize", [f"{p}_uvs", "", f"{p}_scales"], [f"{p}_uvf"], name=f"{p}_up",
                                   mode="nearest", nearest_mode="floor", coordinate_transformation_mode="asymmetric")]
        uv = f"{p}_uvf"
        if fmt == "nv21":   # V,U order: swap to U,V
            inits.append(_const(f"{p}_swap", np.array([1, 0], np.int64)))
            nodes.append(helper.make_node("Gather", [uv, f"{p}_swap"], [f"{p}_uvo"], axis=3, name=f"{p}_swapuv"))
            uv = f"{p}_uvo"
        nodes.append(helper.make_node("Concat", [f"{p}_y", uv], [f"{p}_yuv"], axis=3, name=f"{p}_cat"))
        yuv = f"{p}_yuv"
    rgb_nhwc = dst if layout == LAYOUT_NHWC else f"{p}_rgb"
    nodes += [helper.make_node("Add", [yuv, f"{p}_off"], [f"{p}_c"], name=f"{p}_center"),
              helper.make_node("MatMul", [f"{p}_c", f"{p}_m"], [f"{p}_lin"], name=f"{p}_matrix"),
              helper.make_node("Clip", [f"{p}_lin", f"{p}_lo", f"{p}_hi"], [rgb_nhwc], name=f"{p}_clip")]
    if layout == LAYOUT_NCHW:
        nodes.append(helper.make_node("Transpose", [rgb_nhwc], [dst], perm=[0, 3, 1, 2], name=f"{p}_nchw"))
    return nodes, inits, shape
