"""What every graph pass shares: its result record and small graph queries."""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import numpy_helper

from openrknn.graph.names import fresh_name


@dataclass(frozen=True)
class PassResult:
    """A pass's output: the (possibly same) model and whether anything changed."""

    model: onnx.ModelProto
    modified: bool


def consumers(graph: onnx.GraphProto) -> dict[str, list[onnx.NodeProto]]:
    """Tensor name → the nodes reading it (subgraph reads count as reads of the outer node)."""
    uses: dict[str, list[onnx.NodeProto]] = defaultdict(list)
    for node in graph.node:
        for name in set(node.input) | subgraph_reads(node):
            if name:
                uses[name].append(node)
    return uses


def subgraph_reads(node: onnx.NodeProto) -> set[str]:
    reads: set[str] = set()
    for attr in node.attribute:
        for sub in ([attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs)):
            for inner in sub.node:
                reads.update(inner.input)
                reads.update(subgraph_reads(inner))
    return reads


def initializers(graph: onnx.GraphProto) -> dict[str, onnx.TensorProto]:
    return {init.name: init for init in graph.initializer}


def constant_value(graph_inits: dict[str, onnx.TensorProto], name: str):
    """The numpy value of an initializer, or None."""
    init = graph_inits.get(name)
    return None if init is None else numpy_helper.to_array(init)


def graph_output_names(graph: onnx.GraphProto) -> set[str]:
    return {o.name for o in graph.output}


def replace_input(graph: onnx.GraphProto, old: str, new: str) -> None:
    """Point every reader of ``old`` (including subgraphs) at ``new``."""
    for node in graph.node:
        for i, name in enumerate(node.input):
            if name == old:
                node.input[i] = new
        for attr in node.attribute:
            for sub in ([attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs)):
                replace_input(sub, old, new)


def bypass_node(graph: onnx.GraphProto, node: onnx.NodeProto, source: str) -> bool:
    """Remove ``node``, whose first output carries the same value as ``source``: its readers read
    ``source``. When that output is a graph output, ``source``'s producer writes it under the output's
    name instead, so the interface keeps its names. Returns False, the graph unchanged, when both names
    are interface names (``source`` a graph output, graph input or initializer)."""
    out = node.output[0]
    outputs = graph_output_names(graph)
    if out in outputs:
        producer = next((n for n in graph.node if source in n.output), None)
        if producer is None or source in outputs:
            return False
        producer.output[list(producer.output).index(source)] = out
        replace_input(graph, source, out)
    else:
        replace_input(graph, out, source)
    graph.node.remove(node)
    return True


def attribute(node: onnx.NodeProto, name: str, default=None):
    for attr in node.attribute:
        if attr.name == name:
            return onnx.helper.get_attribute_value(attr)
    return default


def constant_axes(node: onnx.NodeProto, constants) -> list[int] | None:
    """The axes a Reduce* node names: its ``axes`` attribute (before opset 18) or its constant second
    input; ``[]`` when it names none, None when that input is not among ``constants``."""
    axes = attribute(node, "axes")
    if axes is None and len(node.input) > 1 and node.input[1]:
        if node.input[1] not in constants:
            return None
        axes = numpy_helper.to_array(constants[node.input[1]]).ravel().tolist()
    return [int(a) for a in axes or ()]


def replace_initializer(graph: onnx.GraphProto, node: onnx.NodeProto, index: int, name: str,
                         value: np.ndarray) -> None:
    """Give ``node`` a private folded copy (the original may be shared with other nodes)."""
    unique = fresh_name(name, {i.name for i in graph.initializer})
    graph.initializer.append(numpy_helper.from_array(value, unique))
    node.input[index] = unique


def fold_into_producer(graph: onnx.GraphProto, producer: onnx.NodeProto, folded: onnx.NodeProto,
                       bias: np.ndarray, bias_name: str) -> None:
    """``producer`` takes the folded ``bias`` and writes ``folded``'s output; ``folded`` goes."""
    while len(producer.input) < 3:
        producer.input.append("")
    replace_initializer(graph, producer, 2, bias_name, bias.astype(np.float32))
    producer.output[0] = folded.output[0]
    graph.node.remove(folded)
