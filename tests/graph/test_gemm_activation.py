"""An activation after a classifier ``Gemm``: rknn-toolkit2 2.5.0 fuses a ReLU or a Sigmoid into the
Gemm's 1×1 Conv (``ConvRelu``, ``ConvSigmoid``) but prints a hard-swish as a ``HardSwish`` layer of
its own (MobileNetV3's classifier; probe heads measured on rk3588 int8, docs/fidelity.md)."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from openrknn.graph import npu_layers
from openrknn.graph.passes import optimize

_RNG = np.random.default_rng(5)


def _head(activation: str) -> onnx.ModelProto:
    """x (1×16×4×4) → GlobalAveragePool → Flatten → Gemm(16→32) → activation → Gemm(32→10)."""
    inits = [numpy_helper.from_array(_RNG.normal(0, .3, shape).astype(np.float32), name)
             for name, shape in (("w1", (32, 16)), ("b1", (32,)), ("w2", (10, 32)), ("b2", (10,)))]
    nodes = [helper.make_node("GlobalAveragePool", ["x"], ["gap"], name="gap"),
             helper.make_node("Flatten", ["gap"], ["flat"], axis=1, name="flat"),
             helper.make_node("Gemm", ["flat", "w1", "b1"], ["y"], transB=1, name="fc1")]
    if activation == "HardSwish":
        nodes += [helper.make_node("HardSigmoid", ["y"], ["hs"], alpha=1 / 6, beta=0.5, name="hsig"),
                  helper.make_node("Mul", ["y", "hs"], ["act"], name="hmul")]
    else:
        nodes.append(helper.make_node(activation, ["y"], ["act"], name="act"))
    nodes.append(helper.make_node("Gemm", ["act", "w2", "b2"], ["out"], transB=1, name="fc2"))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 4, 4])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


@pytest.mark.parametrize("activation, rows", [("Relu", ["ConvRelu", "Conv"]), ("Sigmoid", ["ConvSigmoid", "Conv"]),
                                              ("HardSwish", ["Conv", "HardSwish", "Conv"])])
def test_activation_after_a_gemm(activation, rows):
    records = npu_layers.layer_records(optimize(_head(activation), 3).graph)
    assert [r.op_name for r in records if r.nodes[0] in ("fc1", "hsig", "act", "fc2")] == rows
