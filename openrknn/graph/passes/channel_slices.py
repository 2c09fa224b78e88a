"""Channel slices and channel shuffles as rknn-toolkit2 2.5.0 lowers them.

Measured on small probe graphs (rk3588, int8; see docs/fidelity.md) and on ShuffleNetV2/GhostNet:

* a Slice that keeps every channel is no layer (GhostNet's ``cat(x1, x2)[:, :out]``);
* a Slice that takes exactly one input of a Concat reads that input (the Concat goes when
  nothing else reads it);
* a Conv without activation whose output only channel Slices/Split read, together taking every
  channel, is split into one Conv per piece (rknn-toolkit2 prints ``x_conv``, ``x_conv#1``; it stores the slices' tensors), the
  C2f/C3 ``chunk`` after a 1×1 Conv;
* a channel shuffle ``Reshape(1,g,C/g,H,W) → Transpose(0,2,1,3,4) → Reshape(1,C,H,W)`` is a 1×1
  "gather" Conv with one-hot weights (``…-gather_2conv``), which the previous rule then splits by
  the Slices after it; a piece read only by one dense Conv is merged into that Conv's weights
  (ShuffleNetV2: the shuffle, the chunk and the branch's first 1×1 Conv are one Conv on the
  Concat).

Every rewrite is exact: a split Conv computes the same sums; a gather Conv copies values (in int8
it is a requantization, as on the chip, where the gather is a layer that stores its tensor).
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from openrknn.graph.names import fresh_name
from openrknn.graph.passes.base import PassResult, attribute, consumers, graph_output_names, replace_input
from openrknn.graph.passes.constant_folding import static_shapes

_INT_MAX = 2 ** 62


def lower_channel_slices(model: onnx.ModelProto) -> PassResult:
    """Apply the rewrites of the module docstring once each; the pass list repeats to a fixed point."""
    shapes = static_shapes(model)
    modified = _shuffles_to_gather(model.graph, shapes)
    modified |= _drop_full_slices(model.graph, shapes)
    modified |= _slices_of_concat(model.graph, shapes)
    modified |= split_sliced_convs(model.graph)
    modified |= _merge_gathers(model.graph)
    return PassResult(model, modified)


# ----------------------------------------------------------------------------- queries
def _constants(graph: onnx.GraphProto) -> dict[str, np.ndarray]:
    values = {i.name: numpy_helper.to_array(i) for i in graph.initializer}
    for node in graph.node:
        if node.op_type == "Constant":
            for a in node.attribute:
                if a.name == "value":
                    values[node.output[0]] = numpy_helper.to_array(a.t)
    return values


def _channel_range(node: onnx.NodeProto, consts: dict[str, np.ndarray], channels: int | None) -> tuple[int, int] | None:
    """``(start, end)`` of a Slice along axis 1 with step 1 (end clamped to ``channels``), else None."""
    if node.op_type != "Slice" or node.domain not in ("", "ai.onnx") or not node.input:
        return None
    if len(node.input) >= 3:   # opset >= 10: starts, ends, axes, steps as inputs
        parts = [consts.get(i) if i else None for i in list(node.input[1:5]) + [""] * (5 - len(node.input))]
        if parts[0] is None or parts[1] is None or (node.input[3:4] and node.input[3] and parts[2] is None) \
                or (node.input[4:5] and node.input[4] and parts[3] is None):
            return None
        starts, ends = parts[0].ravel().tolist(), parts[1].ravel().tolist()
        axes = parts[2].ravel().tolist() if parts[2] is not None else list(range(len(starts)))
        steps = parts[3].ravel().tolist() if parts[3] is not None else [1] * len(starts)
    else:
        starts, ends = list(attribute(node, "starts", [])), list(attribute(node, "ends", []))
        axes, steps = list(attribute(node, "axes", range(len(starts)))), [1] * len(starts)
    if len(starts) != 1 or axes != [1] or steps != [1]:
        return None
    start, end = int(starts[0]), int(ends[0])
    if start < 0 or end < 0 or channels is None and end >= _INT_MAX:
        return None
    if channels is not None:
        end = min(end, channels)
    return (start, end) if end > start else None


def _channels(name: str, shapes: dict[str, list[int]], producer: dict[str, onnx.NodeProto],
              consts: dict[str, np.ndarray]) -> int | None:
    if name in shapes and len(shapes[name]) >= 2:
        return shapes[name][1]
    node = producer.get(name)
    if node is not None and node.op_type == "Conv" and node.input[1] in consts:
        return int(consts[node.input[1]].shape[0])
    return None


def _is_dense_conv(node: onnx.NodeProto, consts: dict[str, np.ndarray]) -> bool:
    return (node.op_type == "Conv" and node.domain in ("", "ai.onnx") and attribute(node, "group", 1) == 1
            and len(node.input) > 1 and node.input[1] in consts and consts[node.input[1]].ndim == 4
            and (len(node.input) < 3 or not node.input[2] or node.input[2] in consts))


def _add_initializer(graph: onnx.GraphProto, hint: str, value: np.ndarray) -> str:
    name = fresh_name(hint, {i.name for i in graph.initializer})
    graph.initializer.append(numpy_helper.from_array(value.astype(np.float32), name))
    return name


# ----------------------------------------------------------------------------- rewrites
def _drop_full_slices(graph: onnx.GraphProto, shapes: dict[str, list[int]]) -> bool:
    consts, outputs = _constants(graph), graph_output_names(graph)
    producer = {o: n for n in graph.node for o in n.output}
    modified = False
    for node in list(graph.node):
        if node.op_type != "Slice" or node.output[0] in outputs:
            continue
        channels = _channels(node.input[0], shapes, producer, consts)
        if channels is None or _channel_range(node, consts, channels) != (0, channels):
            continue
        replace_input(graph, node.output[0], node.input[0])
        graph.node.remove(node)
        modified = True
    return modified


def _slices_of_concat(graph: onnx.GraphProto, shapes: dict[str, list[int]]) -> bool:
    consts, outputs = _constants(graph), graph_output_names(graph)
    producer = {o: n for n in graph.node for o in n.output}
    modified = False
    for node in list(graph.node):
        concat = producer.get(node.input[0]) if node.op_type == "Slice" else None
        if concat is None or concat.op_type != "Concat" or attribute(concat, "axis") not in (1, -3) \
                or node.output[0] in outputs:
            continue
        sizes = [_channels(i, shapes, producer, consts) for i in concat.input]
        if None in sizes:
            continue
        piece = _channel_range(node, consts, sum(sizes))
        offsets = np.cumsum([0] + sizes).tolist()
        for k, source in enumerate(concat.input):
            if piece == (offsets[k], offsets[k + 1]):
                replace_input(graph, node.output[0], source)
                graph.node.remove(node)
                modified = True
                break
    return modified


def split_sliced_convs(graph: onnx.GraphProto) -> bool:
    """A Conv (no activation) read only by channel Slices/Split: one Conv per piece."""
    consts, outputs = _constants(graph), graph_output_names(graph)
    readers = consumers(graph)
    modified = False
    for conv in [n for n in graph.node if n.op_type == "Conv" and n.domain in ("", "ai.onnx")]:
        if len(conv.input) < 2 or conv.input[1] not in consts or conv.output[0] in outputs \
                or (len(conv.input) > 2 and conv.input[2] and conv.input[2] not in consts):
            continue
        weight = consts[conv.input[1]]
        bias = consts[conv.input[2]] if len(conv.input) > 2 and conv.input[2] else np.zeros(weight.shape[0], np.float32)
        if attribute(conv, "group", 1) != 1:
            continue   # a piece of a grouped Conv would also slice its input
        pieces = _pieces(readers.get(conv.output[0], []), consts, weight.shape[0])
        covered = {c for _, (start, end) in pieces or [] for c in range(start, end)}
        if pieces is None or len(covered) != weight.shape[0]:
            continue   # measured: Slices that take every channel; a partial Slice stays
        position = list(graph.node).index(conv)
        for k, (reader_out, (start, end)) in enumerate(pieces):
            piece = onnx.NodeProto()
            piece.CopyFrom(conv)
            piece.name = (conv.name or conv.output[0]) + (f"#{k}" if k else "")
            del piece.input[:]
            piece.input.extend([conv.input[0],
                                _add_initializer(graph, f"{conv.input[1]}_{start}_{end}", weight[start:end]),
                                _add_initializer(graph, f"{piece.name}_bias", bias[start:end])])
            piece.output[0] = reader_out
            graph.node.insert(position + 1 + k, piece)
        for reader in readers[conv.output[0]]:
            graph.node.remove(reader)
        graph.node.remove(conv)
        modified = True
    return modified


def _pieces(readers: list[onnx.NodeProto], consts: dict[str, np.ndarray],
            channels: int) -> list[tuple[str, tuple[int, int]]] | None:
    """(output, channel range) of every piece the readers take, or None when one reader is not a
    channel Slice/Split."""
    if not readers:
        return None
    pieces = []
    for reader in readers:
        if reader.op_type == "Split" and attribute(reader, "axis", 0) in (1, -3):
            sizes = _split_sizes(reader, consts, channels)
            if sizes is None:
                return None
            offsets = np.cumsum([0] + sizes).tolist()
            pieces += [(out, (offsets[k], offsets[k + 1])) for k, out in enumerate(reader.output) if out]
            continue
        piece = _channel_range(reader, consts, channels)
        if piece is None:
            return None
        pieces.append((reader.output[0], piece))
    return pieces


def _split_sizes(node: onnx.NodeProto, consts: dict[str, np.ndarray], channels: int) -> list[int] | None:
    if len(node.input) > 1 and node.input[1]:
        value = consts.get(node.input[1])
        return None if value is None else [int(v) for v in value.ravel()]
    sizes = attribute(node, "split")
    if sizes:
        return [int(v) for v in sizes]
    count = len(node.output)
    return [channels // count] * count if channels % count == 0 else None


def _shuffles_to_gather(graph: onnx.GraphProto, shapes: dict[str, list[int]]) -> bool:
    """``Reshape(1,g,C/g,H,W) → Transpose(0,2,1,3,4) → Reshape(1,C,H,W)`` → a 1×1 gather Conv."""
    outputs = graph_output_names(graph)
    readers = consumers(graph)
    modified = False
    for first in [n for n in graph.node if n.op_type == "Reshape"]:
        source = shapes.get(first.input[0])
        split = shapes.get(first.output[0])
        if source is None or split is None or len(source) != 4 or len(split) != 5 or source[0] != 1 \
                or split[1] * split[2] != source[1] or split[3:] != source[2:]:
            continue
        middle = readers.get(first.output[0], [])
        if len(middle) != 1 or middle[0].op_type != "Transpose" or list(attribute(middle[0], "perm", [])) != [0, 2, 1, 3, 4] \
                or first.output[0] in outputs or middle[0].output[0] in outputs:
            continue
        last = readers.get(middle[0].output[0], [])
        if len(last) != 1 or last[0].op_type != "Reshape" or shapes.get(last[0].output[0]) != source:
            continue
        groups, per_group = split[1], split[2]
        channels = source[1]
        # output channel j = i·g + k reads input channel k·(C/g) + i
        order = [k * per_group + i for i in range(per_group) for k in range(groups)]
        weight = np.zeros((channels, channels, 1, 1), np.float32)
        weight[np.arange(channels), order, 0, 0] = 1.0
        name = f"{last[0].output[0]}-gather_2conv"
        gather = helper.make_node("Conv", [first.input[0], _add_initializer(graph, name + "_w", weight)],
                                  [last[0].output[0]], name=name, kernel_shape=[1, 1])
        gather.metadata_props.add(key=GATHER_KEY, value="1")
        graph.node.insert(list(graph.node).index(last[0]), gather)
        for node in (first, middle[0], last[0]):
            graph.node.remove(node)
        modified = True
    return modified


GATHER_KEY = "openrknn.gather"   # a one-hot 1×1 Conv that only moves channels (made here)
GATHERED_KEY = "openrknn.gathered"   # a Conv a gather was merged into (rknn-toolkit2 keeps its Concat)


def _merge_gathers(graph: onnx.GraphProto) -> bool:
    """A gather Conv read only by one dense Conv is folded into that Conv's weights (exact: the
    gather copies channels, its padding zeros are the source's padding zeros)."""
    consts, outputs = _constants(graph), graph_output_names(graph)
    readers = consumers(graph)
    modified = False
    for gather in [n for n in graph.node if any(p.key == GATHER_KEY for p in n.metadata_props)]:
        users = readers.get(gather.output[0], [])
        if gather.output[0] in outputs or len(users) != 1 or not _is_dense_conv(users[0], consts) \
                or users[0].input[0] != gather.output[0] or gather.input[1] not in consts:
            continue
        select = consts[gather.input[1]][:, :, 0, 0]            # (picked, source)
        user = users[0]
        weight = consts[user.input[1]]                           # (out, picked, kh, kw)
        merged = np.einsum("opyx,ps->osyx", weight, select)
        user.input[1] = _add_initializer(graph, f"{user.input[1]}_gathered", merged)
        user.input[0] = gather.input[0]
        if not any(p.key == GATHERED_KEY for p in user.metadata_props):
            user.metadata_props.add(key=GATHERED_KEY, value="1")
        graph.node.remove(gather)
        modified = True
    return modified
