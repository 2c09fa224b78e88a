"""Convolutions too deep for one pass of the chip's NPU, split over their input channels.

Chip data (``lowering.conv_split_input_bytes`` in ``chips/data/<chip>.yaml``): when a dense Conv's
``Cin·kh·kw·(weight bytes)`` exceeds it, rknn-toolkit2 2.5.0 splits the Conv over its input
channels (measured on rk3588 probe convolutions, int8 and float16: 3024 bytes stay one Conv, 3168
are split; rk3566 and rk3576 split nothing up to 4608). It prints a ``Split`` of the input (or
splits the Conv before it, see ``channel_slices``), one Conv per tile and an ``Add`` of each
partial sum into the next tile (``ConvAdd``); an activation goes with the last tile
(``ConvAddRelu``), a residual ``Add`` after it becomes a layer of its own (``AddRelu``).

Tiles: two halves when two suffice and a half is whole 16-channel blocks; otherwise tiles of the
limit's depth rounded down to 16 channels, and the remainder (measured at 3×3 int8: 352 → 176 + 176,
360 → 336 + 24, 400 → 336 + 64, 440 → 336 + 104, also for a grouped Conv run dense (RegNetY's 440);
at 1×1: 8192 → 3072 + 3072 + 2048, 6000 → 3072 + 2928; float16 3×3: 176 → 160 + 16, 440 → 160 +
160 + 120). The depth checked is the input channels rounded up to the block: rk3576 splits a 3×3
int8 Conv of 680 channels (6120 bytes, 688 rounded) into 672 + 8.

RK3566, RK3562 and RK3576 split above 6144 bytes (``lowering.conv_split_input_bytes``; probe
convolutions: 1×1 float16 3072 channels kept, 3088 split; int8 6144 kept, 6160 split; 3×3 int8 680
kept on rk3566, 688 split). RK3566's block is 8 channels (``lowering.conv_split_block``: int8 6160
→ 3080 + 3080, 688 → 344 + 344 at 3×3; float16 3088 → 1544 + 1544 but 3080 → 3072 + 8); RK3562 and
RK3576 cut 6160 into 6144 + 16 and 688 into 672 + 16 (blocks of 16). LPRNet's 13×1 Conv over 256
float16 channels is split into two halves on all three (``bench/perf_placement.py``).

Exact in float: the sum of the partial convolutions is the convolution; in int8 each partial sum
is stored and requantized, as on the chip.
"""
from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import helper, numpy_helper

from openrknn.graph.names import fresh_name
from openrknn.graph.passes.base import PassResult, attribute
from openrknn.graph.passes.channel_slices import GATHER_KEY, GATHERED_KEY, split_sliced_convs
from openrknn.graph.passes.constant_folding import static_shapes

_TILE_BLOCK = 16   # channels: the tiles are whole 16-channel blocks but the last (measured, int8 and float16)


def split_wide_convs(model: onnx.ModelProto, limit_bytes: int | None, weight_bytes: int,
                     block: int | None = None) -> PassResult:
    """Split every dense Conv deeper than ``limit_bytes`` (None: the chip has no such limit) into
    tiles of whole ``block``-channel blocks (None: 16)."""
    if not limit_bytes:
        return PassResult(model, False)
    graph = model.graph
    inits = {i.name: i for i in graph.initializer}
    modified = False
    for conv in [n for n in graph.node if n.op_type == "Conv" and n.domain in ("", "ai.onnx")]:
        if attribute(conv, "group", 1) != 1 or len(conv.input) < 2 or conv.input[1] not in inits:
            continue
        weight = numpy_helper.to_array(inits[conv.input[1]])
        if weight.ndim != 4:
            continue
        depth = weight.shape[2] * weight.shape[3] * weight_bytes
        tiles = conv_tiles(weight.shape[1], depth, limit_bytes, block or _TILE_BLOCK)
        if len(tiles) < 2:
            continue
        _split_one(graph, conv, weight, inits, tiles)
        modified = True
    if modified:
        split_sliced_convs(graph)   # a plain Conv read only by the tiles' Slices is split per tile
    return PassResult(model, modified)


def conv_tiles(channels: int, bytes_per_channel: int, limit_bytes: int | None,
               block: int = _TILE_BLOCK) -> list[tuple[int, int]]:
    """The input-channel ranges of the tiles (one range when the Conv fits, or without a limit)."""
    depth = -(-channels // block) * block * bytes_per_channel   # the channels as the NPU holds them
    if not limit_bytes or depth <= limit_bytes:
        return [(0, channels)]
    count = math.ceil(depth / limit_bytes)
    if count == 2 and channels % (2 * block) == 0:
        half = channels // 2
        return [(0, half), (half, channels)]
    fits = limit_bytes // bytes_per_channel
    per = max(1, fits // block * block if fits >= block else fits)
    return [(s, min(s + per, channels)) for s in range(0, channels, per)]


_ONE_BLOCK = 16   # a Concat of at most 16 channels stays (measured: 8 + 8 kept, 27 + 11 split)


def split_concat_convs(model: onnx.ModelProto) -> PassResult:
    """A Concat (channels) read only by one dense Conv: one Conv per Concat input, summed.

    rknn-toolkit2 2.5.0 runs ``Conv(Concat(a, b))`` as ``Conv(a)`` and ``Conv(b)`` adding the first
    (``ConvAdd``, the activation with the last: ``ConvAddRelu``); the Concat is no layer (measured
    on a probe graph on rk3588, rk3566 and rk3576, on the U-Net decoder, SqueezeNet's fire modules
    and GhostNet). Not when the Concat has 16 channels or fewer or more than two inputs (DeepLab's
    ASPP keeps its five), nor when the Conv is (or absorbed) a channel shuffle's gather, nor when
    it is followed by SiLU and every input is whole 16-channel blocks (YOLOv5's C3 keeps its
    Concats; ReXNet's 27 + 11 channels are split, the SiLU then a layer of its own), nor when the
    inputs are whole 16-channel blocks and the Conv has at least half as many output channels as
    input channels (:func:`_keeps_wide_output_concat`)."""
    graph = model.graph
    shapes = static_shapes(model)
    inits = {i.name: i for i in graph.initializer}
    outputs = {o.name for o in graph.output}
    readers: dict[str, list[onnx.NodeProto]] = {}
    for node in graph.node:
        for name in node.input:
            readers.setdefault(name, []).append(node)
    modified = False
    for concat in [n for n in graph.node if n.op_type == "Concat" and n.domain in ("", "ai.onnx")]:
        users = readers.get(concat.output[0], [])
        if attribute(concat, "axis") not in (1, -3) or concat.output[0] in outputs or len(users) != 1 \
                or len(concat.input) < 2:
            continue
        conv = users[0]
        if any(p.key in (GATHER_KEY, GATHERED_KEY) for p in conv.metadata_props):
            continue   # a channel shuffle's gather Conv keeps its Concat
        if conv.op_type != "Conv" or attribute(conv, "group", 1) != 1 or list(conv.input).count(concat.output[0]) != 1 \
                or conv.input[0] != concat.output[0] or conv.input[1] not in inits \
                or (len(conv.input) > 2 and conv.input[2] and conv.input[2] not in inits):
            continue
        sizes = [shapes.get(i, [0, 0])[1] if len(shapes.get(i, [])) == 4 else 0 for i in concat.input]
        weight = numpy_helper.to_array(inits[conv.input[1]])
        if weight.ndim != 4 or 0 in sizes or sum(sizes) != weight.shape[1] or sum(sizes) <= _ONE_BLOCK:
            continue
        if any(r.op_type == "Sigmoid" for r in readers.get(conv.output[0], [])) and all(c % _ONE_BLOCK == 0 for c in sizes):
            continue   # a Conv + SiLU on a Concat of whole 16-channel blocks keeps it (YOLOv5's C3)
        if _keeps_wide_output_concat(sizes, weight.shape[0]):
            continue
        offsets = np.cumsum([0] + sizes).tolist()
        _split_one(graph, conv, weight, inits, list(zip(offsets[:-1], offsets[1:])), list(concat.input))
        graph.node.remove(concat)
        modified = True
    return PassResult(model, modified)


def _keeps_wide_output_concat(sizes: list[int], out_channels: int) -> bool:
    """A Concat of whole 16-channel blocks read by a Conv with at least half as many output channels
    as it reads stays a Concat (measured, rk3588 int8 probes: 256 + 256 channels are split for 64 to
    224 output channels and kept for 256 to 1000; 32 + 32 kept for 128 to 1000; SqueezeNet's
    classifier Conv, 512 → 1000, keeps its Concat while its fire modules' squeeze Convs split).
    Of more than two inputs, whole blocks or not, the Concat stays when the Conv has at least as many
    output channels as its inputs have on average (rk3588 int8 and float16 probes: 64 × 3 → 64 and 96
    kept, → 48 split; 32 + 128 + 64 → 100 kept; 256 + 256 + 68 → 256 kept; 64 + 128 + 256 + 68 → 68
    split, LPRNet's container Conv; 24 + 40 + 20 → 16 split; DeepLab's ASPP, 5 × 256 → 256, kept)."""
    if len(sizes) > 2:
        return out_channels * len(sizes) >= sum(sizes)
    return all(c % _ONE_BLOCK == 0 for c in sizes) and 2 * out_channels >= sum(sizes)


def _split_one(graph: onnx.GraphProto, conv: onnx.NodeProto, weight: np.ndarray, inits, tiles,
               sources: list[str] | None = None) -> None:
    """Replace ``conv`` by one Conv per input-channel range in ``tiles`` and an Add chain; each
    tile reads ``sources[k]`` (a Concat's input) or a Slice of the Conv's input."""
    names = {i.name for i in graph.initializer} | {o for n in graph.node for o in n.output}
    base = conv.name or conv.output[0]
    position = list(graph.node).index(conv)
    new: list[onnx.NodeProto] = []
    partial = None
    first_bias = (numpy_helper.to_array(inits[conv.input[2]]).astype(weight.dtype)
                  if len(conv.input) > 2 and conv.input[2] in inits else np.zeros(weight.shape[0], weight.dtype))
    # rknn-toolkit2's order and names: the input's pieces ``x_split``, ``x_split_o1`` ...; the second
    # tile computed first and stored as ``<output>_tile1_conv``, the first tile adding it (measured).
    # A Concat's inputs: the Conv of the input computed last comes first, stored as ``<input>_conv``
    # (SqueezeNet: ``expand3x3_activation/Relu_output_0_conv``, then the ConvAddRelu of ``expand1x1``;
    # U-Net: ``Resize_output_0_conv``, then the ConvAdd of the encoder's skip tensor)
    if sources is None or len(sources) > 2:   # of more than two Concat inputs: 1, 0, 2, 3 ... (LPRNet)
        order = [1, 0] + list(range(2, len(tiles)))
    else:
        made = {o: i for i, n in enumerate(graph.node) for o in n.output}
        order = sorted(range(len(tiles)), key=lambda k: -made.get(sources[k], -1))
    pieces = {}
    if sources is None:
        for k, (start, end) in enumerate(tiles):
            bounds = [fresh_name(f"{base}_tile{k}_{what}", names) for what in ("s", "e", "a")]
            for name, value in zip(bounds, (start, end, 1)):
                graph.initializer.append(numpy_helper.from_array(np.array([value], np.int64), name))
            pieces[k] = fresh_name(f"{conv.input[0]}_split" + (f"_o{k}" if k else ""), names)
            new.append(helper.make_node("Slice", [conv.input[0], *bounds], [pieces[k]], name=fresh_name(f"{base}_split{k}", names)))
    for position_in_chain, k in enumerate(order):
        start, end = tiles[k]
        piece = sources[k] if sources is not None else pieces[k]
        w_name = fresh_name(f"{conv.input[1]}_tile{k}", names)
        graph.initializer.append(numpy_helper.from_array(weight[:, start:end].copy(), w_name))
        tile = onnx.NodeProto()
        tile.CopyFrom(conv)
        tile.name = fresh_name(f"{base}_tile{k}", names)
        del tile.input[:]
        # the bias goes with the first tile, the others get zeros (each tile prints a bias); own
        # names: a folded bias may be named like the Conv's output, which the last Add now writes
        bias = fresh_name(f"{base}_tile{k}_b", names)
        graph.initializer.append(numpy_helper.from_array(
            first_bias if position_in_chain == 0 else np.zeros(weight.shape[0], weight.dtype), bias))
        tile.input.extend([piece, w_name, bias])
        last = position_in_chain == len(tiles) - 1
        out = fresh_name(f"{sources[k]}_conv" if sources is not None else f"{conv.output[0]}_tile{k}_conv", names)
        tile.output[0] = out
        if sources is not None:
            tile.name = out   # rknn-toolkit2 names the layer after the tensor it writes
        new.append(tile)
        if partial is None:
            partial = out
            continue
        # the running sums: ``<output>_tile<k>_conv_add`` (rknn-toolkit2's stored names, resnet50 float16)
        total = conv.output[0] if last else fresh_name(f"{conv.output[0]}_tile{k}_conv_add", names)
        new.append(helper.make_node("Add", [partial, out], [total], name=fresh_name(f"{base}_tile{k}_add", names)))
        partial = total
    graph.node.remove(conv)
    for offset, node in enumerate(new):
        graph.node.insert(position + offset, node)


def lower_grouped_convs(model: onnx.ModelProto, max_dense_group_bytes: int | None, weight_bytes: int = 1) -> PassResult:
    """Grouped convolutions as the chip runs them (chip data ``lowering.grouped_conv_dense_max_bytes``).

    rknn-toolkit2 2.5.0 runs a grouped Conv (1 < group < channels) whose groups are at most that
    many weight bytes wide (input channels × ``weight_bytes``) as one dense Conv with
    block-diagonal weights (printed ``conv#1``), and a wider one as a ``Split``, one Conv per group
    and a ``Concat``, its activation a layer of its own after the Concat (measured on probe
    convolutions, int8: rk3588 and rk3576 keep 8-wide groups and split 16-wide ones, rk3566 keeps
    4-wide and splits 8-wide; RegNetY's 8-wide groups are split in float16 on rk3588). Exact in
    float; in int8 each group's output is stored and the Concat requantizes, as on the chip.
    """
    if not max_dense_group_bytes:
        return PassResult(model, False)
    graph = model.graph
    inits = {i.name: i for i in graph.initializer}
    modified = False
    for conv in [n for n in graph.node if n.op_type == "Conv" and n.domain in ("", "ai.onnx")]:
        groups = attribute(conv, "group", 1)
        if groups == 1 or len(conv.input) < 2 or conv.input[1] not in inits \
                or (len(conv.input) > 2 and conv.input[2] and conv.input[2] not in inits):
            continue
        weight = numpy_helper.to_array(inits[conv.input[1]])
        width = weight.shape[1]
        if weight.ndim != 4 or width == 1 or weight.shape[0] % groups:   # depthwise is native
            continue
        if width * weight_bytes <= max_dense_group_bytes:
            _to_dense(graph, conv, weight, groups)
        else:
            _per_group(graph, conv, weight, inits, groups)
        modified = True
    return PassResult(model, modified)


def _to_dense(graph: onnx.GraphProto, conv: onnx.NodeProto, weight: np.ndarray, groups: int) -> None:
    out_per, width = weight.shape[0] // groups, weight.shape[1]
    dense = np.zeros((weight.shape[0], width * groups) + weight.shape[2:], weight.dtype)
    for g in range(groups):
        dense[g * out_per:(g + 1) * out_per, g * width:(g + 1) * width] = weight[g * out_per:(g + 1) * out_per]
    names = {i.name for i in graph.initializer}
    name = fresh_name(f"{conv.input[1]}_dense", names)
    graph.initializer.append(numpy_helper.from_array(dense, name))
    conv.input[1] = name
    for a in conv.attribute:
        if a.name == "group":
            a.i = 1


def _per_group(graph: onnx.GraphProto, conv: onnx.NodeProto, weight: np.ndarray, inits, groups: int) -> None:
    names = {i.name for i in graph.initializer} | {o for n in graph.node for o in n.output}
    base = conv.name or conv.output[0]
    out_per, width = weight.shape[0] // groups, weight.shape[1]
    bias = (numpy_helper.to_array(inits[conv.input[2]]) if len(conv.input) > 2 and conv.input[2]
            else np.zeros(weight.shape[0], weight.dtype))
    position = list(graph.node).index(conv)
    new, pieces = [], []
    for g in range(groups):
        bounds = [fresh_name(f"{base}_group{g}_{what}", names) for what in ("s", "e", "a")]
        for name, value in zip(bounds, (g * width, (g + 1) * width, 1)):
            graph.initializer.append(numpy_helper.from_array(np.array([value], np.int64), name))
        piece = fresh_name(f"{conv.input[0]}_branch{g}", names)   # rknn-toolkit2's name for the piece it stores
        new.append(helper.make_node("Slice", [conv.input[0], *bounds], [piece], name=fresh_name(f"{base}_split{g}", names)))
        w_name, b_name = fresh_name(f"{base}_group_{g}_w", names), fresh_name(f"{base}_group_{g}_b", names)
        graph.initializer.extend([numpy_helper.from_array(weight[g * out_per:(g + 1) * out_per].copy(), w_name),
                                  numpy_helper.from_array(bias[g * out_per:(g + 1) * out_per].astype(weight.dtype), b_name)])
        part = onnx.NodeProto()
        part.CopyFrom(conv)
        part.name = fresh_name(f"{base}_group_{g}", names)
        del part.input[:]
        part.input.extend([piece, w_name, b_name])
        part.output[0] = fresh_name(f"{conv.output[0]}_branch{g}", names)   # stored under this name too
        for a in part.attribute:
            if a.name == "group":
                a.i = 1
        new.append(part)
        pieces.append(part.output[0])
    new.append(helper.make_node("Concat", pieces, [conv.output[0]], axis=1, name=fresh_name(base, names)))
    graph.node.remove(conv)
    for offset, node in enumerate(new):
        graph.node.insert(position + offset, node)
