"""Inline an ``If`` whose condition is known at build time.

Exporters put whole networks under an ``If`` on a configuration input (e.g. a speech model's
sample rate). Once that input is fixed (``input_initial_val`` or a folded Shape) the condition
folds to a constant, and the branch taken is the graph: its nodes move into the outer graph, so
they join the NPU layer graph, get quantized and are costed like any other node. Untaken
branches disappear.
"""
from __future__ import annotations

import onnx
from onnx import numpy_helper

from openrknn import log
from openrknn.graph.names import fresh_name
from openrknn.graph.passes.base import PassResult, initializers


def inline_constant_branches(model: onnx.ModelProto) -> PassResult:
    """Replace each ``If`` with a constant condition by the nodes of the branch it takes."""
    graph = model.graph
    modified = False
    for node in list(graph.node):
        if node.op_type != "If" or node.domain not in ("", "ai.onnx"):
            continue
        condition = initializers(graph).get(node.input[0])
        if condition is None:
            continue
        value = numpy_helper.to_array(condition)
        if value.size != 1:
            continue
        branch_name = "then_branch" if bool(value.reshape(-1)[0]) else "else_branch"
        branch = next(a.g for a in node.attribute if a.name == branch_name)
        _splice(graph, node, branch)
        log.debug(f"If {node.name or node.output[0]}: condition is constant, {branch_name} inlined")
        modified = True
    return PassResult(model, modified)


def _splice(graph: onnx.GraphProto, if_node: onnx.NodeProto, branch: onnx.GraphProto) -> None:
    """Put ``branch``'s nodes where ``if_node`` stands, its outputs renamed to the If's outputs."""
    taken = _all_names(graph)
    renames: dict[str, str] = {}
    # Branch-local names that already exist outside get fresh ones (scopes may shadow).
    for init in branch.initializer:
        renames[init.name] = fresh_name(init.name, taken)
        taken.add(renames[init.name])
    for inner in branch.node:
        for name in inner.output:
            if name and name in taken:
                renames[name] = fresh_name(name, taken)
                taken.add(renames[name])
    for branch_out, if_out in zip(branch.output, if_node.output):
        renames[branch_out.name] = if_out
    position = list(graph.node).index(if_node)
    graph.node.remove(if_node)
    new_nodes = []
    for inner in branch.node:
        copy = onnx.NodeProto()
        copy.CopyFrom(inner)
        _rename(copy, renames)
        new_nodes.append(copy)
    for init in branch.initializer:
        copy = onnx.TensorProto()
        copy.CopyFrom(init)
        copy.name = renames[init.name]
        graph.initializer.append(copy)
    for offset, new in enumerate(new_nodes):
        graph.node.insert(position + offset, new)


def _rename(node: onnx.NodeProto, renames: dict[str, str]) -> None:
    for i, name in enumerate(node.input):
        node.input[i] = renames.get(name, name)
    for i, name in enumerate(node.output):
        node.output[i] = renames.get(name, name)
    _rename_subgraph_reads(node, renames)


def _rename_subgraph_reads(node: onnx.NodeProto, renames: dict[str, str]) -> None:
    """Rename the outer-scope tensors a node's subgraphs read (their own names shadow)."""
    for attr in node.attribute:
        for sub in ([attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs)):
            local = {o for n in sub.node for o in n.output} | {i.name for i in sub.initializer} \
                | {i.name for i in sub.input}
            visible = {k: v for k, v in renames.items() if k not in local}
            for inner in sub.node:
                for i, name in enumerate(inner.input):
                    inner.input[i] = visible.get(name, name)
                _rename_subgraph_reads(inner, visible)
            for out in sub.output:
                out.name = visible.get(out.name, out.name)


def _all_names(graph: onnx.GraphProto) -> set[str]:
    names = {v.name for v in graph.input} | {v.name for v in graph.output} | {i.name for i in graph.initializer}
    for node in graph.node:
        names.update(node.input)
        names.update(node.output)
    return names
