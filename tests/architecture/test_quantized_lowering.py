"""The quantized lowering's contract is explicit: one registered lowering per layer kind that
``quant/annotate.py`` writes, a duplicate registration is refused, an unknown kind fails naming it."""
from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper

from openrknn.errors import ModelFileError
from openrknn.quant import annotate
from openrknn.sim import integer_arithmetic, quantized
from openrknn.sim.quantized import lowering_for, register_lowering, registered_kinds
from tests.helpers import quantized_build

SIM = Path(__file__).resolve().parents[2] / "openrknn" / "sim"


def test_every_kind_annotate_writes_has_exactly_one_lowering():
    assert registered_kinds() == annotate.KINDS


def test_registering_a_second_lowering_for_a_kind_is_an_error():
    before = dict(quantized._LOWERINGS)
    with pytest.raises(ValueError, match="qconv.*already has a lowering"):
        register_lowering(annotate.QCONV)(lambda lowering, node: None)
    assert quantized._LOWERINGS == before   # the first one stays


def test_an_unknown_kind_fails_naming_the_node_and_the_kind():
    with pytest.raises(ModelFileError, match=r"'conv_7'.*'qconv3d'.*known: \["):
        lowering_for("qconv3d", "conv_7")


def test_an_unknown_kind_in_a_model_fails_clearly_at_lowering(tmp_path):
    """A node marked with a kind no lowering handles (another version's file) names it."""
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"], name="relu")], "g",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 4, 4, 4])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), tmp_path / "m.onnx")
    rng = np.random.default_rng(0)
    model = quantized_build(tmp_path / "m.onnx", [rng.uniform(-1, 1, (1, 4, 4, 4)).astype(np.float32)])._model
    node = next(n for n in model.graph.graph.node if n.name == "relu")
    annotate.set_kind(node, "qrelu_v9")
    with pytest.raises(ModelFileError, match="'relu'.*'qrelu_v9'"):
        quantized.lower_quantized(model)


def test_no_string_built_dispatch_in_the_simulator():
    """Lowerings are found through the registry, not by ``getattr(self, f"_lower_{kind}")``."""
    for path in SIM.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "getattr" and \
                    any(isinstance(a, ast.JoinedStr) for a in node.args):
                pytest.fail(f"{path.name}:{node.lineno}: getattr with a built name")


def test_the_integer_arithmetic_states_its_contract():
    doc = integer_arithmetic.__doc__
    for word in ("Rounding", "Saturation", "CPU-independence"):
        assert f"**{word}" in doc
