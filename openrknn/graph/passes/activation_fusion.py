"""Mark activations the NPU fuses into the layer before them (seed 002 §8.4.2 fusion rules).

Nothing is rewritten: the producer gets the node metadata ``openrknn.fused_activation`` naming
the activation. Consequences downstream: the simulator does not round the producer's output to
fp16 (the NPU never stores it), the quantizer puts no quantization point between the two, and the
cost model counts one layer.
"""
from __future__ import annotations

import onnx

from openrknn.graph.passes.base import PassResult, consumers, graph_output_names

FUSED_ACTIVATION_KEY = "openrknn.fused_activation"

_FUSING_PRODUCERS = frozenset({"Conv", "ConvTranspose", "Gemm", "MatMul", "Add"})
_FUSABLE_ACTIVATIONS = frozenset({"Relu", "Clip", "LeakyRelu", "PRelu", "Sigmoid", "Tanh", "Elu",
                                  "HardSwish", "HardSigmoid", "Gelu", "Swish"})


def fused_activation(node: onnx.NodeProto) -> str | None:
    """Name of the activation node fused into ``node``, if any."""
    for prop in node.metadata_props:
        if prop.key == FUSED_ACTIVATION_KEY:
            return prop.value
    return None


def mark_activation_fusion(model: onnx.ModelProto) -> PassResult:
    """Mark every producer whose only reader is a fusable activation."""
    graph = model.graph
    uses = consumers(graph)
    outputs = graph_output_names(graph)
    modified = False
    for node in graph.node:
        if node.op_type not in _FUSING_PRODUCERS or node.domain not in ("", "ai.onnx") or len(node.output) != 1:
            continue
        readers = uses.get(node.output[0], [])
        if len(readers) != 1 or node.output[0] in outputs or fused_activation(node) is not None:
            continue
        activation = readers[0]
        if activation.op_type in _FUSABLE_ACTIVATIONS and activation.input[0] == node.output[0]:
            node.metadata_props.add(key=FUSED_ACTIVATION_KEY, value=activation.name or activation.output[0])
            modified = True
    return PassResult(model, modified)
