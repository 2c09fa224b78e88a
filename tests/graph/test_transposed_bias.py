"""paddle2onnx's ConvTranspose without bias, then ``Add(bias)`` and an activation (PP-OCRv3 det's
head): rknn-toolkit2 2.5.0 prints ``ConvTranspose``, ``Add``, ``Sigmoid`` — three layers (measured,
rk3588 int8, docs/fidelity.md), where the layer graph used to print one ``ConvTransposeSigmoid``."""
from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from openrknn.graph import npu_layers
from openrknn.graph.passes import optimize


def test_bias_add_and_sigmoid_after_a_conv_transpose_are_layers_of_their_own():
    rng = np.random.default_rng(2)
    inits = [numpy_helper.from_array(rng.normal(0, .3, (8, 4, 2, 2)).astype(np.float32), "w"),
             numpy_helper.from_array(rng.normal(0, .1, (1, 4, 1, 1)).astype(np.float32), "bias")]
    nodes = [helper.make_node("ConvTranspose", ["x", "w"], ["up"], strides=[2, 2], name="up"),
             helper.make_node("Add", ["up", "bias"], ["biased"], name="add"),
             helper.make_node("Sigmoid", ["biased"], ["out"], name="sigmoid")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 6, 6])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    records = npu_layers.layer_records(optimize(model, 3).graph)
    assert [r.op_name for r in records] == ["ConvTranspose", "Add", "Sigmoid"]
    assert [r.stored for r in records] == [("up",), ("biased",), ("out",)]


def test_an_activation_straight_after_a_conv_transpose_still_fuses():
    """Only the constant bias ``Add`` keeps apart (the pattern measured); ConvTranspose → Sigmoid stays one layer."""
    rng = np.random.default_rng(2)
    inits = [numpy_helper.from_array(rng.normal(0, .3, (8, 4, 2, 2)).astype(np.float32), "w")]
    nodes = [helper.make_node("ConvTranspose", ["x", "w"], ["up"], strides=[2, 2], name="up"),
             helper.make_node("Sigmoid", ["up"], ["out"], name="sigmoid")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 6, 6])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    records = npu_layers.layer_records(optimize(model, 3).graph)
    assert [r.op_name for r in records] == ["ConvTransposeSigmoid"]
