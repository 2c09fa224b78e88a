"""YOLOv5's detect head as rknn-toolkit2 2.5.0 lays it out (yolov5n/s, rk3588 int8, docs/fidelity.md):
``Conv → Reshape → Transpose → Sigmoid`` is ``ConvSigmoid`` then the data layers, and
``Mul(σ, 2) → Add(grid)`` with a whole grid map is ``Mul`` + ``Add`` (a ``BatchNormalization`` pair
only holds per-channel constants)."""
from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from openrknn.graph import npu_layers
from openrknn.graph.passes import optimize
from tests.helpers import reference_session


def _head(grid_shape: tuple[int, ...]):
    rng = np.random.default_rng(4)
    arrays = {"w": rng.normal(0, .3, (18, 8, 1, 1)), "b": rng.normal(0, .1, 18), "shape": np.array([1, 3, 6, 5, 5]),
              "two": np.array(2.0), "grid": rng.normal(0, 1, grid_shape)}
    inits = [numpy_helper.from_array(v.astype(np.int64 if k == "shape" else np.float32), k) for k, v in arrays.items()]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["y"], name="conv"),
             helper.make_node("Reshape", ["y", "shape"], ["r"], name="reshape"),
             helper.make_node("Transpose", ["r"], ["t"], perm=[0, 1, 3, 4, 2], name="transpose"),
             helper.make_node("Sigmoid", ["t"], ["s"], name="sigmoid"),
             helper.make_node("Mul", ["s", "two"], ["m"], name="mul"),
             helper.make_node("Add", ["m", "grid"], ["out"], name="add")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 5, 5])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def test_sigmoid_joins_the_conv_and_a_grid_offset_stays_apart():
    model = _head((1, 3, 5, 5, 6))
    optimized = optimize(model, 3)
    assert [r.op_name for r in npu_layers.layer_records(optimized.graph)] == [
        "ConvSigmoid", "Reshape", "Transpose", "Mul", "Add"]
    x = np.random.default_rng(0).normal(size=(1, 8, 5, 5)).astype(np.float32)
    got, want = (reference_session(m.SerializeToString()).run(None, {"x": x})[0] for m in (optimized, model))
    np.testing.assert_array_equal(got, want)


def test_a_per_channel_offset_is_still_one_batchnormalization_layer():
    rows = [r.op_name for r in npu_layers.layer_records(optimize(_head((6,)), 3).graph)]
    assert rows == ["ConvSigmoid", "Reshape", "Transpose", "BatchNormalization"]
