"""The simulator's onnxruntime sessions compute what the graph says (no optimizer changes values)."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from openrknn.graph.runner import make_session


def test_float_weights_between_dequantize_and_quantize_are_kept():
    """onnxruntime's WeightBiasQuantization would requantize these fine weights to 8 bits."""
    rng = np.random.default_rng(0)
    weight = rng.normal(0, 0.3, (8, 8, 3, 3)).astype(np.float32)
    weight[:, 0] = 200.0      # one column dominates the range: 8-bit weights would lose the rest
    nodes = [helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["x"]),
             helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("QuantizeLinear", ["c", "ys", "yz"], ["yq"]),
             helper.make_node("DequantizeLinear", ["yq", "ys", "yz"], ["y"])]
    inits = [numpy_helper.from_array(weight, "w"),
             numpy_helper.from_array(np.float32(0.01), "xs"), numpy_helper.from_array(np.uint8(0), "xz"),
             numpy_helper.from_array(np.float32(0.05), "ys"), numpy_helper.from_array(np.uint8(128), "yz")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("xq", TensorProto.UINT8, [1, 8, 6, 6])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 6, 6]),
                               helper.make_tensor_value_info("c", TensorProto.FLOAT, [1, 8, 6, 6])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    xq = rng.integers(0, 40, (1, 8, 6, 6)).astype(np.uint8)
    xq[:, 0] = 0
    expected = ReferenceEvaluator(model).run(None, {"xq": xq})
    got = make_session(model).run(None, {"xq": xq})
    np.testing.assert_allclose(got[1], expected[1], rtol=1e-5, atol=1e-4)
    np.testing.assert_array_equal(got[0], expected[0])
