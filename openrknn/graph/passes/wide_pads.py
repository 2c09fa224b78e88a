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
toolkit drops the taps that read only padding (DeepLab's dilation 36 on an 8×8 map becomes a 1×1
Conv) or gathers the dilated rows and columns (a Pad, Gather, Pad, Gather chain); not done here.

Exact: a constant Pad with zeros followed by an unpadded Conv is the padded Conv; quantized, the Pad
keeps its input's parameters and fills with the zero point, which is what the Conv's padding reads.
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from openrknn.graph.passes.base import PassResult, attribute

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
