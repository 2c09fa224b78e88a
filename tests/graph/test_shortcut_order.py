"""A residual block's projection shortcut takes the block's Add, as rknn-toolkit2 2.5.0 lowers it.

Probe (rk3588, int8): ``Add(Conv_short(x), Conv_long(Relu(Conv(x))))`` with the shortcut a 1×1
stride-2 Conv, written before or after the long branch and as the Add's first or second input: all
four variants print ``Conv`` for the long branch's last Conv (its output in the Feature Tensor table)
and ``<shortcut>_ConvAddRelu``. The oracle corpus: regnet_x/y_400mf's first block of each stage
(``proj`` written first) stores ``f/c/c.0/Conv_output_0`` and prints ``proj.0/Conv_ConvAddRelu``.
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from openrknn.graph import npu_layers
from openrknn.graph.passes import optimize
from tests.helpers import reference_session

_RNG = np.random.default_rng(5)


def _block(shortcut_first: bool, shortcut_input: int) -> onnx.ModelProto:
    inits = []

    def conv(x: str, out: str, cin: int, cout: int, stride: int = 1) -> onnx.NodeProto:
        inits.append(numpy_helper.from_array(_RNG.normal(0, .3, (cout, cin, 1, 1)).astype(np.float32), f"{out}_w"))
        return helper.make_node("Conv", [x, f"{out}_w"], [out], name=out, strides=[stride, stride])

    long = [conv("x", "l1", 8, 8, 2), helper.make_node("Relu", ["l1"], ["l1r"], name="l1relu"), conv("l1r", "l2", 8, 16)]
    short = [conv("x", "sc", 8, 16, 2)]
    operands = ["sc", "l2"] if shortcut_input == 0 else ["l2", "sc"]
    nodes = (short + long if shortcut_first else long + short) + [
        helper.make_node("Add", operands, ["s"], name="add"), helper.make_node("Relu", ["s"], ["y"], name="relu")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 4, 4])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def test_the_shortcut_conv_takes_the_add_whatever_the_order():
    x = _RNG.normal(size=(1, 8, 8, 8)).astype(np.float32)
    for shortcut_first in (True, False):
        for shortcut_input in (0, 1):
            source = _block(shortcut_first, shortcut_input)
            for level in (0, 3):
                model = optimize(source, level)
                records = [r for r in npu_layers.layer_records(model.graph) if r.kind != "alias"]
                assert [r.op_name for r in records] == ["ConvRelu", "Conv", "ConvAddRelu"], (shortcut_first, shortcut_input)
                assert list(records[1].stored) == ["l2"] and records[2].nodes[0] == "sc"
                got = reference_session(model.SerializeToString()).run(None, {"x": x})[0]
                np.testing.assert_allclose(got, reference_session(source.SerializeToString()).run(None, {"x": x})[0],
                                           rtol=1e-5, atol=1e-6)


def test_sibling_convs_of_one_input_keep_their_order():
    """RepVGG's strided pair (both branches read the block input): no shortcut, nothing moves."""
    inits = [numpy_helper.from_array(_RNG.normal(0, .3, (8, 8, k, k)).astype(np.float32), f"w{k}") for k in (1, 3)]
    nodes = [helper.make_node("Conv", ["x", "w3"], ["a"], name="a", strides=[2, 2], pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["x", "w1"], ["b"], name="b", strides=[2, 2]),
             helper.make_node("Add", ["a", "b"], ["y"], name="add")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 4, 4])], inits)
    model = optimize(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), 0)
    assert [n.name for n in model.graph.node] == ["a", "b", "add"]
