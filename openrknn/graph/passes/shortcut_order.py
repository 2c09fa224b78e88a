"""The shortcut Conv of a residual block runs last, so it is the one that takes the block's ``Add``.

``Add(Conv_long(...), Conv_short(x))`` where the long branch itself descends from ``x`` (a strided
block's projection shortcut: ResNet's ``downsample``, RegNet's ``proj``): rknn-toolkit2 2.5.0 runs the
long branch first, stores its last Conv's output, and fuses the Add (and the activation after it)
into the shortcut Conv, ``ConvAddRelu`` (measured on a probe, rk3588: a 1×1 stride-2 shortcut and a
1×1 stride-2 → Relu → 1×1 long branch, with the shortcut written first or last and as the Add's first
or second input — all four print ``Conv`` for the long branch and ``<shortcut>_ConvAddRelu``; the
oracle corpus: regnet_x/y's first block of every stage stores ``f/c/c.0/Conv_output_0``).

The layer record fuses a residual Add into the Conv that finishes last in graph order
(``npu_layers._residual_add``); this pass moves such a shortcut Conv to just before its Add, which
changes no value. Sibling Convs of one input (RepVGG pairs) are left in their order
(``branch_merging`` orders those).
"""
from __future__ import annotations

import onnx

from openrknn import log
from openrknn.graph.passes.base import PassResult, consumers, graph_output_names, initializers

_ANCESTRY_LIMIT = 64   # nodes walked back from the long branch: a residual block is far shorter


def run_shortcuts_last(model: onnx.ModelProto) -> PassResult:
    """Move every projection-shortcut Conv next to the residual Add it feeds (see the module)."""
    graph = model.graph
    modified = False
    for add in [n for n in graph.node if n.op_type == "Add" and len(n.input) == 2]:
        nodes = list(graph.node)
        producer = {o: n for n in nodes for o in n.output if o}
        readers = consumers(graph)
        outputs = graph_output_names(graph)
        inits = initializers(graph)
        convs = [producer.get(name) for name in add.input]
        if any(c is None or not _dense_conv(c, inits) for c in convs) or add.input[0] == add.input[1]:
            continue
        for short, long in (convs, convs[::-1]):
            short_readers = readers.get(short.output[0], [])
            if short.output[0] in outputs or len(short_readers) != 1 or short_readers[0].output[0] != add.output[0]:
                continue
            if short.input[0] == long.input[0] or not _descends_from(long.input[0], short.input[0], producer):
                continue
            position = {n.output[0]: i for i, n in enumerate(nodes) if n.output}
            if position[short.output[0]] > position[long.output[0]]:
                break   # already last
            graph.node.remove(short)
            graph.node.insert(list(graph.node).index(add), short)
            log.debug(f"shortcut Conv '{short.name}' moved after '{long.name}': it takes the Add '{add.name}'")
            modified = True
            break
    return PassResult(model, modified)


def _dense_conv(node: onnx.NodeProto, inits) -> bool:
    """A Conv with constant weights that is not depthwise (a depthwise Conv never takes an Add)."""
    if node.op_type != "Conv" or node.domain not in ("", "ai.onnx") or len(node.input) < 2 or node.input[1] not in inits:
        return False
    group = next((a.i for a in node.attribute if a.name == "group"), 1)
    return not (group > 1 and inits[node.input[1]].dims[1] == 1)


def _descends_from(tensor: str, ancestor: str, producer: dict[str, onnx.NodeProto]) -> bool:
    """Whether ``ancestor`` is among the tensors ``tensor`` is computed from (a bounded walk)."""
    frontier, seen = [tensor], set()
    while frontier and len(seen) < _ANCESTRY_LIMIT:
        name = frontier.pop()
        if name == ancestor:
            return True
        node = producer.get(name)
        if node is None or node.output[0] in seen:
            continue
        seen.add(node.output[0])
        frontier.extend(i for i in node.input if i)
    return False
