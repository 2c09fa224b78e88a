"""Bake the documented input normalisation into the graph.

For input *i* and channel *c* of the model's channel order::

    x'[c] = (x[reorder[c]] - mean[c]) / std[c]

``reorder`` is Toolkit 1's ``reorder_channel`` (seed 001 §3.6.3: new channel *c* takes original
channel ``reorder[c]``); Toolkit 2 has no runtime channel swap (``quant_img_RGB2BGR`` only affects
how calibration images are read). After this pass the graph takes raw values (e.g. 0..255 pixels).
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from openrknn.errors import ConfigError
from openrknn.graph.rknn_model import LAYOUT_NCHW, LAYOUT_NHWC, InputPreprocess

_FLOAT_TYPES = (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.DOUBLE)

# Node metadata marking the normalisation nodes embedded for one input (value: the input name).
PREPROCESS_KEY = "openrknn.preprocess"


def _channel_axis(layout: str, rank: int) -> int | None:
    if rank != 4:
        return None
    return {LAYOUT_NCHW: 1, LAYOUT_NHWC: 3}.get(layout)


def _expand(values: list[float] | None, channels: int, what: str, input_name: str) -> np.ndarray | None:
    if values is None:
        return None
    if len(values) == 1:
        values = values * channels
    if len(values) != channels:
        raise ConfigError(f"{what} for input '{input_name}' has {len(values)} value(s) but the input has "
                          f"{channels} channel(s)")
    return np.asarray(values, dtype=np.float32)


def embed_preprocess(model: onnx.ModelProto, layouts: dict[str, str], mean_values: list[list[float]] | None,
                     std_values: list[list[float]] | None,
                     reorder_channel: list[list[int]] | None) -> tuple[onnx.ModelProto, list[InputPreprocess]]:
    """Insert Gather/Sub/Div nodes after each normalised input.

    Args:
        model: float graph whose inputs are in the user-facing layout.
        layouts: input name -> 'NCHW' | 'NHWC' | 'UNDEFINED'.
        mean_values / std_values / reorder_channel: one entry per graph input (config order).

    Returns:
        The new model and the per-input preprocessing records.
    """
    inits = {i.name for i in model.graph.initializer}
    inputs = [v for v in model.graph.input if v.name not in inits]
    for what, lists in (("mean_values", mean_values), ("std_values", std_values), ("reorder_channel", reorder_channel)):
        if lists is not None and len(lists) != len(inputs):
            raise ConfigError(f"config: {what} gives {len(lists)} input(s) but the model has {len(inputs)} "
                              f"({[v.name for v in inputs]})")
    records: list[InputPreprocess] = []
    new_nodes: list[onnx.NodeProto] = []
    model = _copy(model)
    for index, value in enumerate(inputs):
        rec = _one_input(model, value, index, layouts.get(value.name, ""), mean_values, std_values,
                         reorder_channel, new_nodes)
        if rec is not None:
            records.append(rec)
    if new_nodes:
        nodes = list(model.graph.node)
        del model.graph.node[:]
        model.graph.node.extend(new_nodes + nodes)
    return model, records


def _copy(model: onnx.ModelProto) -> onnx.ModelProto:
    out = onnx.ModelProto()
    out.CopyFrom(model)
    return out


def _one_input(model: onnx.ModelProto, value: onnx.ValueInfoProto, index: int, layout: str,
               mean_values, std_values, reorder_channel, new_nodes: list[onnx.NodeProto]) -> InputPreprocess | None:
    mean = mean_values[index] if mean_values else None
    std = std_values[index] if std_values else None
    reorder = reorder_channel[index] if reorder_channel else None
    if _is_identity(mean, std, reorder):
        return None
    tensor_type = value.type.tensor_type
    if tensor_type.elem_type not in _FLOAT_TYPES:
        raise ConfigError(f"input '{value.name}' is not a float tensor; mean/std/reorder cannot apply to it "
                          "(give no normalisation for this input, e.g. mean_values=[[0],...])")
    dims = [d.dim_value for d in tensor_type.shape.dim]
    axis = _channel_axis(layout, len(dims))
    if axis is None:
        axis = len(dims) - 1 if dims else 0   # non-image inputs: the last axis carries the channels
    channels = dims[axis] if dims else 1
    if reorder is not None and reorder != list(range(channels)) and len(reorder) != channels:
        raise ConfigError(f"reorder_channel for input '{value.name}' has {len(reorder)} values but the input has "
                          f"{channels} channel(s)")
    bshape = [1] * len(dims)
    if dims:
        bshape[axis] = channels
    name = value.name
    current = name
    if reorder is not None and reorder != list(range(channels)):
        idx = f"{name}__reorder_idx"
        model.graph.initializer.append(numpy_helper.from_array(np.asarray(reorder, dtype=np.int64), idx))
        new_nodes.append(helper.make_node("Gather", [current, idx], [f"{name}__reordered"], axis=axis,
                                          name=f"{name}__reorder"))
        current = f"{name}__reordered"
    mean_arr = _expand(mean, channels, "mean_values", name)
    if mean_arr is not None and np.any(mean_arr != 0):
        cname = f"{name}__mean"
        model.graph.initializer.append(numpy_helper.from_array(mean_arr.reshape(bshape), cname))
        new_nodes.append(helper.make_node("Sub", [current, cname], [f"{name}__centered"], name=f"{name}__sub_mean"))
        current = f"{name}__centered"
    std_arr = _expand(std, channels, "std_values", name)
    if std_arr is not None and np.any(std_arr != 1):
        cname = f"{name}__std"
        model.graph.initializer.append(numpy_helper.from_array(std_arr.reshape(bshape), cname))
        new_nodes.append(helper.make_node("Div", [current, cname], [f"{name}__scaled"], name=f"{name}__div_std"))
        current = f"{name}__scaled"
    if current == name:
        return None
    for node in new_nodes:   # the NPU's input stage normalises: these are not layers of their own
        node.metadata_props.add(key=PREPROCESS_KEY, value=name)
    _rename_uses(model, name, current, skip=new_nodes)
    return InputPreprocess(input_name=name, mean=None if mean_arr is None else mean_arr.tolist(),
                           std=None if std_arr is None else std_arr.tolist(), reorder=reorder,
                           normalized_name=current)


def _is_identity(mean, std, reorder) -> bool:
    return ((mean is None or all(v == 0 for v in mean)) and (std is None or all(v == 1 for v in std))
            and (reorder is None or reorder == sorted(reorder)))


def _rename_uses(model: onnx.ModelProto, old: str, new: str, skip: list[onnx.NodeProto]) -> None:
    skip_ids = {id(n) for n in skip}
    for node in model.graph.node:
        if id(node) in skip_ids:
            continue
        for i, name in enumerate(node.input):
            if name == old:
                node.input[i] = new
    for out in model.graph.output:
        if out.name == old:
            raise ConfigError(f"input '{old}' is also a model output; normalisation cannot be embedded")
