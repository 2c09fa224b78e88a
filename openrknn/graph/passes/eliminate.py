"""Remove nodes that only pass their input on (Identity, inference-mode Dropout) and dead nodes."""
from __future__ import annotations

import onnx

from openrknn.graph.passes.base import PassResult, bypass_node, consumers, graph_output_names, subgraph_reads

_ALIASES = frozenset({"Identity", "Dropout"})


def remove_aliases(model: onnx.ModelProto) -> PassResult:
    """Drop Identity and Dropout nodes, wiring readers to their input.

    A Dropout whose mask output is read is kept (the mask is a real value). When the alias output
    is a graph output, the producer of its input is renamed instead, so the output name survives.
    """
    graph = model.graph
    outputs = graph_output_names(graph)
    modified = False
    for node in list(graph.node):
        if node.op_type not in _ALIASES or node.domain not in ("", "ai.onnx"):
            continue
        if node.op_type == "Dropout" and len(node.input) > 2 and node.input[2]:
            continue   # training_mode given as an input: not an inference alias
        if node.op_type == "Dropout" and len(node.output) > 1 and node.output[1]:
            if consumers(graph).get(node.output[1]) or node.output[1] in outputs:
                continue
        # False when both names are part of the interface: the copy is needed
        modified |= bypass_node(graph, node, node.input[0])
    return PassResult(model, modified)


def remove_dead_nodes(model: onnx.ModelProto) -> PassResult:
    """Drop nodes whose outputs reach no graph output, and initializers nobody reads."""
    graph = model.graph
    needed = set(graph_output_names(graph))
    keep: list[onnx.NodeProto] = []
    for node in reversed(graph.node):
        if any(o in needed for o in node.output if o):
            keep.append(node)
            needed.update(i for i in node.input if i)
            needed.update(subgraph_reads(node))
    keep.reverse()
    modified = len(keep) != len(graph.node)
    if modified:
        del graph.node[:]
        graph.node.extend(keep)
    unused = [i for i in graph.initializer if i.name not in needed]
    for init in unused:
        graph.initializer.remove(init)
    graph_inputs_unused = [v for v in graph.input if v.name not in needed and v.name in {i.name for i in unused}]
    for value in graph_inputs_unused:
        graph.input.remove(value)
    return PassResult(model, modified or bool(unused))

