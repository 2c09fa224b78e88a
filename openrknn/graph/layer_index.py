"""How many NPU layers a model has and what each is called — the one answer every page prints.

Build's log line, ``openrknn info``, the performance table, the accuracy and hybrid pages of the
workbench all read these functions, so the same layer has one name and the model one layer count.
They read the layer grouping of :mod:`openrknn.graph.npu_layers` (a layer is named by the tensor it
stores, as the hybrid cfg names it).
"""
from __future__ import annotations

import onnx

from openrknn.graph import npu_layers


def npu_layer_names(graph: onnx.GraphProto) -> list[str]:
    """The layers in graph order, each by its name (the tensor it stores; unmarked nodes are layers of one)."""
    return [_stored_tensor(group) for group in npu_layers.layer_groups(graph)]


def count_layers(graph: onnx.GraphProto) -> int:
    """The number of NPU layers of ``graph``."""
    return len(npu_layers.layer_groups(graph))


def layer_of_tensor(graph: onnx.GraphProto) -> dict[str, str]:
    """Every tensor a node computes → the name of the layer computing it."""
    owner: dict[str, str] = {}
    for group in npu_layers.layer_groups(graph):
        name = _stored_tensor(group)
        for node in group.nodes:
            for output in node.output:
                if output:
                    owner[output] = name
    return owner


def _stored_tensor(group: npu_layers.LayerGroup) -> str:
    stored = [o for o in group.outputs if o not in group.internal]
    return stored[0] if stored else group.name
