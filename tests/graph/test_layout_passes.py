"""Layout clean-up and constant-branch inlining: structure changes, values never do."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from openrknn.graph.passes import optimize


def _model(nodes, inputs, outputs, inits=(), opset=17) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    onnx.checker.check_model(model)
    return model


def _same_values(before: onnx.ModelProto, after: onnx.ModelProto, feeds: dict) -> None:
    expected = ReferenceEvaluator(before).run(None, feeds)
    got = ReferenceEvaluator(after).run(None, feeds)
    for e, g in zip(expected, got):
        np.testing.assert_array_equal(e, g)


def _ops(model: onnx.ModelProto) -> list[str]:
    return [n.op_type for n in model.graph.node]


X = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4, 5])
FEEDS = {"x": np.random.default_rng(0).standard_normal((1, 3, 4, 5)).astype(np.float32)}


def test_transpose_round_trip_cancels():
    model = _model([helper.make_node("Transpose", ["x"], ["t1"], perm=[0, 2, 3, 1]),
                    helper.make_node("Transpose", ["t1"], ["t2"], perm=[0, 3, 1, 2]),
                    helper.make_node("Relu", ["t2"], ["y"])],
                   [X], [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 4, 5])])
    out = optimize(model, level=2)
    assert _ops(out) == ["Relu"]
    _same_values(model, out, FEEDS)


def test_transpose_pair_becomes_one_with_the_composed_permutation():
    model = _model([helper.make_node("Transpose", ["x"], ["t1"], perm=[0, 2, 3, 1]),
                    helper.make_node("Transpose", ["t1"], ["y"], perm=[0, 2, 1, 3])],
                   [X], [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 5, 4, 3])])
    out = optimize(model, level=2)
    assert _ops(out) == ["Transpose"]
    assert list(out.graph.node[0].attribute[0].ints) == [0, 3, 2, 1]
    _same_values(model, out, FEEDS)


def test_transpose_read_twice_is_kept():
    model = _model([helper.make_node("Transpose", ["x"], ["t1"], perm=[0, 2, 3, 1]),
                    helper.make_node("Transpose", ["t1"], ["t2"], perm=[0, 3, 1, 2]),
                    helper.make_node("Relu", ["t1"], ["z"]),
                    helper.make_node("Relu", ["t2"], ["y"])],
                   [X], [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 4, 5]),
                         helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 4, 5, 3])])
    out = optimize(model, level=2)
    assert _ops(out).count("Transpose") == 2
    _same_values(model, out, FEEDS)


def test_reshape_chain_merges_and_identity_chain_disappears():
    shape = numpy_helper.from_array(np.array([1, 60], dtype=np.int64), "s")
    back = numpy_helper.from_array(np.array([1, 3, 4, 5], dtype=np.int64), "b")
    axes = numpy_helper.from_array(np.array([2], dtype=np.int64), "axes")
    model = _model([helper.make_node("Reshape", ["x", "s"], ["r1"]),
                    helper.make_node("Unsqueeze", ["r1", "axes"], ["r2"]),      # 1x60x1
                    helper.make_node("Relu", ["r2"], ["y"]),
                    helper.make_node("Flatten", ["x"], ["f1"], axis=2),         # 12x5
                    helper.make_node("Reshape", ["f1", "b"], ["f2"]),           # back to 1x3x4x5
                    helper.make_node("Sigmoid", ["f2"], ["z"])],
                   [X], [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 60, 1]),
                         helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 3, 4, 5])],
                   [shape, back, axes])
    out = optimize(model, level=2)
    assert sorted(_ops(out)) == ["Relu", "Reshape", "Sigmoid"]
    reshape = next(n for n in out.graph.node if n.op_type == "Reshape")
    target = next(i for i in out.graph.initializer if i.name == reshape.input[1])
    assert numpy_helper.to_array(target).tolist() == [1, 60, 1]
    sigmoid = next(n for n in out.graph.node if n.op_type == "Sigmoid")
    assert sigmoid.input[0] == "x"
    _same_values(model, out, FEEDS)


def test_level_one_keeps_the_layout_nodes():
    model = _model([helper.make_node("Transpose", ["x"], ["t1"], perm=[0, 2, 3, 1]),
                    helper.make_node("Transpose", ["t1"], ["y"], perm=[0, 3, 1, 2])],
                   [X], [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 4, 5])])
    assert _ops(optimize(model, level=1)) == ["Transpose", "Transpose"]


def _if_model(condition: bool) -> onnx.ModelProto:
    scale = numpy_helper.from_array(np.array(2.0, dtype=np.float32), "inner_scale")
    then_branch = helper.make_graph(
        [helper.make_node("Mul", ["x", "inner_scale"], ["then_out"]),
         helper.make_node("Relu", ["then_out"], ["then_relu"]),
         helper.make_node("Identity", ["x"], ["then_x"])],
        "then", [], [helper.make_tensor_value_info("then_relu", TensorProto.FLOAT, [1, 3, 4, 5]),
                     helper.make_tensor_value_info("then_x", TensorProto.FLOAT, [1, 3, 4, 5])], [scale])
    else_branch = helper.make_graph(
        [helper.make_node("Neg", ["x"], ["else_out"]), helper.make_node("Abs", ["x"], ["else_abs"])],
        "else", [], [helper.make_tensor_value_info("else_out", TensorProto.FLOAT, [1, 3, 4, 5]),
                     helper.make_tensor_value_info("else_abs", TensorProto.FLOAT, [1, 3, 4, 5])])
    cond = numpy_helper.from_array(np.array([condition]), "cond")
    outer_scale = numpy_helper.from_array(np.array(3.0, dtype=np.float32), "scale")
    nodes = [helper.make_node("If", ["cond"], ["a", "b"], then_branch=then_branch, else_branch=else_branch),
             helper.make_node("Mul", ["a", "scale"], ["y"]),
             helper.make_node("Add", ["b", "scale"], ["z"])]
    out_info = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 3, 4, 5]) for n in ("y", "z")]
    return _model(nodes, [X], out_info, [cond, outer_scale])


def test_if_with_constant_condition_is_replaced_by_its_branch():
    for condition in (True, False):
        model = _if_model(condition)
        out = optimize(model, level=1)
        assert "If" not in _ops(out)
        _same_values(model, out, FEEDS)


def test_if_with_a_runtime_condition_stays():
    model = _if_model(True)
    model.graph.initializer.remove(next(i for i in model.graph.initializer if i.name == "cond"))
    model.graph.input.append(helper.make_tensor_value_info("cond", TensorProto.BOOL, [1]))
    assert "If" in _ops(optimize(model, level=3))
