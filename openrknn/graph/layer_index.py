"""How many NPU layers a model has and what each is called — the one answer every page prints.

Build's log line, ``openrknn info``, the performance table, the accuracy and hybrid pages of the
workbench all read these functions, so the same layer has one name and the model one layer count.
They read the layer grouping of :mod:`openrknn.graph.npu_layers` (a layer is named by the tensor it
stores, as the hybrid cfg names it).
"""
from __future__ import annotations

import onnx

from openrknn.graph import npu_layers
from openrknn.graph.preprocess import PREPROCESS_KEY


def npu_layer_names(graph: onnx.GraphProto) -> list[str]:
    """The layers in graph order, each by its name (the tensor it stores; unmarked nodes are layers of one)."""
    return [name for name, _ in npu_layer_table(graph)]


def npu_layer_table(graph: onnx.GraphProto) -> list[tuple[str, str]]:
    """``(layer name, op type of its main node)`` for every layer, in graph order.

    Not layers: Constant nodes, and the mean/std steps ``build`` adds — the NPU's input stage does them
    (rknn-toolkit2's ``InputOperator`` row), as the performance table counts them.
    """
    return [(_stored_tensor(group), group.main.op_type) for group in npu_layers.layer_groups(graph)
            if _is_layer(group)]


def _is_layer(group: npu_layers.LayerGroup) -> bool:
    if group.main.op_type == "Constant":
        return False
    return not all(any(p.key == PREPROCESS_KEY for p in node.metadata_props) for node in group.nodes)


def count_layers(graph: onnx.GraphProto) -> int:
    """The number of NPU layers of ``graph``."""
    return len(npu_layer_table(graph))


def layer_of_tensor(graph: onnx.GraphProto) -> dict[str, str]:
    """Every tensor a node computes → the name of the layer computing it."""
    owner: dict[str, str] = {}
    for group in npu_layers.layer_groups(graph):
        if not _is_layer(group):
            continue
        name = _stored_tensor(group)
        for node in group.nodes:
            for output in node.output:
                if output:
                    owner[output] = name
    return owner


def _stored_tensor(group: npu_layers.LayerGroup) -> str:
    """The layer's last stored tensor (what the hybrid cfg and the accuracy analysis call it)."""
    return group.outputs[-1] if group.outputs else group.name


def layer_of_node(graph: onnx.GraphProto) -> dict[str, str]:
    """Every named node → the name of its layer (hybrid settings keep node names; pages show layer names)."""
    owner: dict[str, str] = {}
    for group in npu_layers.layer_groups(graph):
        for node in group.nodes:
            if node.name:
                owner[node.name] = _stored_tensor(group)
    return owner


def node_of_layer(graph: onnx.GraphProto) -> dict[str, str]:
    """Every layer name → the name of the node storing its tensor (what hybrid settings take)."""
    producer = {o: n.name for n in graph.node for o in n.output if o and n.name}
    return {name: producer[name] for name, _ in npu_layer_table(graph) if name in producer}
