"""``Relu(Relu(x))`` is one Relu, as rknn-toolkit2 2.5.0 builds it.

Measured on probe graphs (rk3588, int8; docs/fidelity.md): a Relu reading a Relu goes. When the
inner Relu has no other reader the two are one node named after the inner one that writes the
outer one's tensor (``fuse_two_relu``: ``Conv → Relu → Relu`` prints one ``ConvRelu`` storing the
second Relu's output); otherwise the outer Relu's readers read the inner one
(``remove_invalid_relu``). The zero-weight branches of a ResNet-D leave such pairs
(``Relu(Add(Relu(…), 0))``, :mod:`openrknn.graph.passes.zero_weights`). Exact: Relu is idempotent.
"""
from __future__ import annotations

import onnx

from openrknn.graph.passes.base import PassResult, consumers, graph_output_names, replace_input

_ONNX = ("", "ai.onnx")


def merge_repeated_relus(model: onnx.ModelProto) -> PassResult:
    """Drop every Relu whose input another Relu writes."""
    graph = model.graph
    modified = False
    for outer in [n for n in graph.node if n.op_type == "Relu" and n.domain in _ONNX]:
        producer = {o: n for n in graph.node for o in n.output}
        inner = producer.get(outer.input[0])
        if inner is None or inner.op_type != "Relu" or inner.domain not in _ONNX:
            continue
        outputs = graph_output_names(graph)
        middle, out = inner.output[0], outer.output[0]
        if len(consumers(graph).get(middle, [])) == 1 and middle not in outputs:
            inner.output[0] = out
        elif out not in outputs:
            replace_input(graph, out, middle)
        else:
            continue   # both tensors are graph outputs: both are needed
        graph.node.remove(outer)
        modified = True
    return PassResult(model, modified)
