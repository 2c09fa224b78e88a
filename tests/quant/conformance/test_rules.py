"""The three rules the corpus relies on, one function each: un-shared constants, the int32 bias
rule, and scales for tiny ranges."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from openrknn.quant import numerics
from openrknn.quant.fold import unshare_parameters
from openrknn.quant.weights import BIAS_LIMIT, bias_safe, params_from_range


def _graph() -> onnx.ModelProto:
    inits = [numpy_helper.from_array(np.ones((2, 2, 1, 1), np.float32), "w"),
             numpy_helper.from_array(np.array([0.5, -0.5], np.float32), "b")]
    nodes = [helper.make_node("Identity", ["b"], ["b_alias"]),
             helper.make_node("Conv", ["x", "w", "b"], ["c1"]),
             helper.make_node("Conv", ["c1", "w", "b_alias"], ["c2"]),
             helper.make_node("Add", ["c2", "b_alias"], ["y"])]   # a float reader of the same constant
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 2, 2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 2, 2])], inits)
    return helper.make_model(graph)


def test_unshare_gives_each_weighted_reader_its_own_constant():
    model = _graph()
    assert unshare_parameters(model) == 3
    c1, c2 = [n for n in model.graph.node if n.op_type == "Conv"]
    add = next(n for n in model.graph.node if n.op_type == "Add")
    assert c1.input[1] == "w" and c2.input[1] == "w__c2"            # the first reader keeps the name
    assert {c1.input[2], c2.input[2]} == {"b__c1", "b__c2"}           # b is also read by a float Add
    assert add.input[1] == "b_alias"                                  # the float reader is untouched
    names = [i.name for i in model.graph.initializer]
    assert len(names) == len(set(names)) == 5
    assert unshare_parameters(model) == 0                             # idempotent


def test_bias_safe_widens_only_channels_that_overflow():
    weights = params_from_range(np.array([-0.5, -1e-7, -0.2]), np.array([0.5, 1e-7, 0.2]), "int8",
                                "symmetric_quantized", axis=0)
    s_x = 1e-3
    bias = np.array([0.1, 1.5, 0.0])
    widened, count = bias_safe(weights, bias, s_x)
    assert count == 1
    assert widened.scale[0] == weights.scale[0] and widened.scale[2] == weights.scale[2]
    assert abs(bias[1]) / (s_x * widened.scale[1]) <= BIAS_LIMIT
    q = numerics.quantize_bias(bias, s_x, widened.scale)
    np.testing.assert_allclose(q * s_x * widened.scale.astype(np.float64), bias, rtol=1e-6)


def test_tiny_ranges_get_their_own_scale():
    scale, zero = numerics.asymmetric(np.array([-1e-14]), np.array([1e-14]), "int8")
    assert 0 < scale[0] < 1e-15
    params = numerics.QuantParams("int8", scale, zero)
    values = np.array([-7e-15, 3e-15, 9e-15], np.float32)
    np.testing.assert_allclose(numerics.dequantize(numerics.quantize(values, params), params), values,
                               atol=float(scale[0]))
    dead, _ = numerics.asymmetric(np.array([0.0]), np.array([0.0]), "int8")
    assert dead[0] == np.float32(numerics.DEAD_SCALE)
