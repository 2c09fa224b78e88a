"""Convolutions padded more than the NPU pads inside a Conv: their padding as a Pad layer of its own.

Chip data (``lowering.conv_pad_max`` in ``chips/data/<chip>.yaml``): rknn-toolkit2 2.5.0 gives a
Conv with any pad above it (15, the operator list's Conv pad limit) a ``Pad`` layer that writes
the whole padded input (all four pads, also the sides within the limit) and runs the Conv unpadded
on it. Measured on probe graphs (rk3588, rk3566, rk3576; float16 and int8; depthwise and dense;
kernels 3×3 and 5×5; maps 8×8 and 64×64): pads 12 and 15 stay in the Conv, 16, 20, 24 and 31 get
the layer, also when the padding is wider than the map (DeepLab's ASPP: 8×8, pad 24) and when one
side alone is over (pads 16, 1, 2, 3). Each such Conv gets its own Pad, also when several read the
same tensor with the same pads; the layers are named after the input, ``<input>_pad``, then
``<input>_pad#1`` … A Conv dilated more than ``lowering.conv_dilation_max`` (31) gets none: the
toolkit drops the kernel taps that read only padding (dilation 32 or 36 with pads 36 or 64, 3×3 or
5×5, on an 8×8 map: a 1×1 Conv, unpadded; DeepLab's ASPP branch 36), done here by
:func:`drop_padding_taps` when one tap is left on each such axis, or, where the taps read data
(64×64), gathers the dilated rows and columns (a Pad, Gather, Pad, Gather chain): not done here.

Exact: a tap that reads only padding adds zeros (float) or the zero point's centred zero (int8;
the weights' per-channel scales then come from the taps kept, as the toolkit's 1×1 weights). A
constant Pad with zeros followed by an unpadded Conv is the padded Conv; quantized, the Pad keeps
its input's parameters and fills with the zero point, which is what the Conv's padding reads.
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from openrknn.graph.passes.base import PassResult, attribute
from openrknn.graph.passes.constant_folding import static_shapes

# marks the Pads made here: the Conv's own padding (the bias correction reads the unpadded tensor's means)
CONV_PADDING_KEY = "openrknn.conv_padding"


def split_wide_pads(model: onnx.ModelProto, pad_max: int | None, dilation_max: int | None = None) -> PassResult:
    """Give every 2-D Conv with a pad above ``pad_max`` (None: the chip has no such lowering) a Pad
    node of its own before it and clear the Conv's pads; Convs dilated above ``dilation_max`` are left."""
    if pad_max is None:
        return PassResult(model, False)
    graph = model.graph
    taken = {i.name for i in graph.initializer} | {o for n in graph.node for o in n.output} \
        | {i.name for i in graph.input} | {n.name for n in graph.node}
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 13)
    modified = False
    for conv in [n for n in graph.node if n.op_type == "Conv" and n.domain in ("", "ai.onnx")]:
        pads = list(attribute(conv, "pads", None) or [])
        if len(pads) != 4 or max(pads) <= pad_max or attribute(conv, "auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET"):
            continue
        if dilation_max is not None and max(attribute(conv, "dilations", None) or [1]) > dilation_max:
            continue
        _pad_before(graph, conv, pads, taken, opset)
        modified = True
    return PassResult(model, modified)


def _pad_before(graph: onnx.GraphProto, conv: onnx.NodeProto, pads: list[int], taken: set[str], opset: int) -> None:
    source = conv.input[0]
    name, k = f"{source}_pad", 1
    while name in taken:   # rknn-toolkit2's names: ``x_pad``, ``x_pad#1``, ...
        name, k = f"{source}_pad#{k}", k + 1
    taken.add(name)
    top, left, bottom, right = pads
    amounts = [0, 0, top, left, 0, 0, bottom, right]
    if opset >= 11:
        amounts_name = name + "_amounts"
        taken.add(amounts_name)
        graph.initializer.append(numpy_helper.from_array(np.array(amounts, np.int64), amounts_name))
        pad = helper.make_node("Pad", [source, amounts_name], [name], name=name, mode="constant")
    else:
        pad = helper.make_node("Pad", [source], [name], name=name, mode="constant", pads=amounts, value=0.0)
    pad.metadata_props.add(key=CONV_PADDING_KEY, value=conv.name or conv.output[0])
    graph.node.insert(list(graph.node).index(conv), pad)
    conv.input[0] = name
    for attr in conv.attribute:
        if attr.name == "pads":
            del attr.ints[:]
            attr.ints.extend([0, 0, 0, 0])


def drop_padding_taps(model: onnx.ModelProto, dilation_max: int | None) -> PassResult:
    """A 2-D Conv dilated above ``dilation_max`` whose taps on each such axis all read only padding
    but one: the Conv of that one tap (its kernel sliced, that axis undilated, the pads it needs)."""
    if dilation_max is None:
        return PassResult(model, False)
    graph = model.graph
    inits = {i.name: i for i in graph.initializer}
    shapes = None
    modified = False
    for conv in [n for n in graph.node if n.op_type == "Conv" and n.domain in ("", "ai.onnx")]:
        dilations = list(attribute(conv, "dilations", None) or [1, 1])
        if len(dilations) != 2 or max(dilations) <= dilation_max or len(conv.input) < 2 or conv.input[1] not in inits:
            continue
        if attribute(conv, "auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET"):
            continue
        shapes = shapes if shapes is not None else static_shapes(model)
        x, y = shapes.get(conv.input[0]), shapes.get(conv.output[0])
        weight = numpy_helper.to_array(inits[conv.input[1]])
        if not x or not y or len(x) != 4 or len(y) != 4 or weight.ndim != 4:
            continue
        pads = list(attribute(conv, "pads", None) or [0, 0, 0, 0])
        strides = list(attribute(conv, "strides", None) or [1, 1])
        kept = []
        for axis in range(2):
            if dilations[axis] <= dilation_max:
                kept.append(None)
                continue
            taps = [k for k in range(weight.shape[2 + axis])
                    if any(0 <= o * strides[axis] - pads[axis] + k * dilations[axis] < x[2 + axis] for o in range(y[2 + axis]))]
            kept.append(taps[0] if len(taps) == 1 else -1)
        if -1 in kept:
            continue   # taps read data along a widely dilated axis: the toolkit gathers (not done)
        new_pads, new_dilations, rows, cols = list(pads), list(dilations), slice(None), slice(None)
        for axis, tap in enumerate(kept):
            if tap is None:
                continue
            begin = pads[axis] - tap * dilations[axis]
            end = (y[2 + axis] - 1) * strides[axis] + 1 - x[2 + axis] - begin
            if begin < 0 or end < 0:
                break
            new_pads[axis], new_pads[axis + 2], new_dilations[axis] = begin, end, 1
            if axis == 0:
                rows = slice(tap, tap + 1)
            else:
                cols = slice(tap, tap + 1)
        else:
            old_name, name = conv.input[1], conv.input[1] + "_taps"
            graph.initializer.append(numpy_helper.from_array(np.ascontiguousarray(weight[:, :, rows, cols]), name))
            conv.input[1] = name
            if not any(old_name in n.input for n in graph.node):
                graph.initializer.remove(inits.pop(old_name))
            _set_ints(conv, "pads", new_pads)
            _set_ints(conv, "dilations", new_dilations)
            _set_ints(conv, "kernel_shape", [weight[:, :, rows, cols].shape[2], weight[:, :, rows, cols].shape[3]])
            modified = True
    return PassResult(model, modified)


def _set_ints(node: onnx.NodeProto, name: str, values: list[int]) -> None:
    for attr in node.attribute:
        if attr.name == name:
            del attr.ints[:]
            attr.ints.extend(values)
            return
    node.attribute.append(helper.make_attribute(name, values))
