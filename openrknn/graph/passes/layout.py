"""Layout clean-up: Transpose pairs and reshape chains that exporters leave behind.

A Transpose feeding only another Transpose is one Transpose with the composed permutation, or
nothing when the composition is the identity (NHWC↔NCHW round trips around an op the exporter
could not place). A chain of Reshape / Flatten / Squeeze / Unsqueeze is one Reshape to the
chain's final static shape, or nothing when that shape is the input's own. Both rewrites move no
value: the NPU reads the same bytes in the same order, so the layer graph loses a copy layer.
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from openrknn import log
from openrknn.graph.names import fresh_name
from openrknn.graph.passes.base import PassResult, attribute, consumers, graph_output_names, replace_input
from openrknn.graph.passes.constant_folding import static_shapes

_RESHAPE_LIKE = frozenset({"Reshape", "Flatten", "Squeeze", "Unsqueeze"})


def simplify_layout(model: onnx.ModelProto) -> PassResult:
    """Merge or drop Transpose pairs and reshape chains (see the module docstring)."""
    modified = _merge_transposes(model.graph)
    modified |= _merge_reshapes(model)
    return PassResult(model, modified)


def _is_standard(node: onnx.NodeProto, ops: frozenset[str] | set[str]) -> bool:
    return node.op_type in ops and node.domain in ("", "ai.onnx")


def _sole_reader(graph: onnx.GraphProto, node: onnx.NodeProto, readers, outputs) -> onnx.NodeProto | None:
    """The only node reading ``node``'s output, when that output is nothing else (no graph output)."""
    name = node.output[0]
    users = readers.get(name, [])
    if name in outputs or len(users) != 1:
        return None
    return users[0]


def _merge_transposes(graph: onnx.GraphProto) -> bool:
    modified = False
    outputs = graph_output_names(graph)
    for first in list(graph.node):
        if first not in graph.node or not _is_standard(first, {"Transpose"}):
            continue
        readers = consumers(graph)
        second = _sole_reader(graph, first, readers, outputs)
        if second is None or not _is_standard(second, {"Transpose"}):
            continue
        p1, p2 = attribute(first, "perm"), attribute(second, "perm")
        if p1 is None or p2 is None:   # default perm reverses: rank unknown here, leave it
            continue
        composed = [p1[axis] for axis in p2]
        graph.node.remove(first)
        if composed == list(range(len(composed))) and second.output[0] not in outputs:
            replace_input(graph, second.output[0], first.input[0])
            graph.node.remove(second)
            log.debug(f"layout: Transpose {first.name or first.output[0]} and {second.name or second.output[0]} cancel")
        else:
            second.input[0] = first.input[0]
            del second.attribute[:]
            second.attribute.append(helper.make_attribute("perm", composed))
        modified = True
    return modified


def _merge_reshapes(model: onnx.ModelProto) -> bool:
    graph = model.graph
    if not any(_is_standard(n, _RESHAPE_LIKE) for n in graph.node):
        return False
    shapes = static_shapes(model)
    outputs = graph_output_names(graph)
    modified = False
    for node in list(graph.node):
        if node not in graph.node or not _is_standard(node, _RESHAPE_LIKE):
            continue
        target = shapes.get(node.output[0])
        if target is None:
            continue
        source = node.input[0]
        producer = next((n for n in graph.node if source in n.output), None)
        readers = consumers(graph)
        # Fold the reshape-like producer into this node when this node is its only reader.
        if producer is not None and _is_standard(producer, _RESHAPE_LIKE) \
                and _sole_reader(graph, producer, readers, outputs) is node:
            source = producer.input[0]
            graph.node.remove(producer)
            modified = True
        elif shapes.get(source) != target:
            continue   # a lone reshape that moves something: left as the exporter wrote it
        if shapes.get(source) == target and node.output[0] not in outputs:
            replace_input(graph, node.output[0], source)
            graph.node.remove(node)
            log.debug(f"layout: reshape to {target} of {source} is the identity, removed")
            modified = True
            continue
        _rewrite_as_reshape(graph, node, source, target)
        modified = True
    return modified


def _rewrite_as_reshape(graph: onnx.GraphProto, node: onnx.NodeProto, source: str, target: list[int]) -> None:
    shape_name = fresh_name(f"{node.output[0]}_shape", {i.name for i in graph.initializer})
    graph.initializer.append(numpy_helper.from_array(np.array(target, dtype=np.int64), shape_name))
    node.op_type = "Reshape"
    del node.input[:]
    node.input.extend([source, shape_name])
    del node.attribute[:]
