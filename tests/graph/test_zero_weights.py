"""Residual branches whose weights are all zero (timm's ResNet-D, ``zero_init_last``), folded as
rknn-toolkit2 2.5.0 folds them (probe graphs measured on rk3588 int8, docs/fidelity.md): the layer
record's rows, the tensors it stores, and values unchanged by the rewrite."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from openrknn.graph import npu_layers
from openrknn.graph.passes import optimize
from tests.helpers import reference_session

C = 8
_RNG = np.random.default_rng(3)


class _Graph:
    """A small NCHW graph written node by node."""

    def __init__(self) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []

    def const(self, name: str, value) -> str:
        self.inits.append(numpy_helper.from_array(np.asarray(value, np.float32), name))
        return name

    def node(self, op: str, inputs: list[str], out: str, **attrs) -> str:
        self.nodes.append(helper.make_node(op, inputs, [out], name=out, **attrs))
        return out

    def conv(self, x: str, out: str, weight: str | None = None, bias=None) -> str:
        weight = weight or self.const(f"{out}_w", _RNG.normal(0, .3, (C, C, 3, 3)))
        b = self.const(f"{out}_b", _RNG.normal(0, .1, C) if bias is None else bias)
        return self.node("Conv", [x, weight, b], out, pads=[1, 1, 1, 1])

    def model(self, out: str) -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, C, 8, 8])],
                                  [helper.make_tensor_value_info(out, TensorProto.FLOAT, None)], self.inits)
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def _resnet_d(branch_weights: str = "direct", bias: float | None = 0.0) -> onnx.ModelProto:
    """Stem ConvRelu → MaxPool → two basic blocks whose second Conv is all zero (``direct``: its own
    zero initializer; ``identity``: read through an Identity, as torch exports shared weights;
    ``batchnorm``: a random Conv and an unfolded BatchNorm with γ = 0)."""
    g = _Graph()
    stem = g.node("Relu", [g.conv("x", "stem")], "stem_relu")
    t = g.node("MaxPool", [stem], "pool", kernel_shape=[2, 2], strides=[2, 2])
    zero = g.const("zero_w", np.zeros((C, C, 3, 3)))
    for k in range(2):
        inner = g.node("Relu", [g.conv(t, f"b{k}_c1")], f"b{k}_r1")
        biases = np.full(C, bias) if bias is not None else _RNG.normal(0, .3, C)
        if branch_weights == "direct":
            branch = g.conv(inner, f"b{k}_c2", g.const(f"b{k}_zero", np.zeros((C, C, 3, 3))), biases)
        elif branch_weights == "identity":
            branch = g.conv(inner, f"b{k}_c2", g.node("Identity", [zero], f"b{k}_w_alias"), biases)
        else:
            y = g.conv(inner, f"b{k}_c2")
            branch = g.node("BatchNormalization", [y, g.const(f"b{k}_g", np.zeros(C)), g.const(f"b{k}_be", biases),
                                                   g.const(f"b{k}_m", _RNG.normal(0, 1, C)),
                                                   g.const(f"b{k}_v", _RNG.uniform(.5, 2, C))], f"b{k}_bn")
        t = g.node("Relu", [g.node("Add", [t, branch], f"b{k}_add")], f"b{k}_out")
    return g.model(t)


def _rows(model: onnx.ModelProto) -> list[tuple[str, str | None]]:
    return [(r.op_name, r.operand_dtype) for r in npu_layers.layer_records(model.graph, default_dtype="int8")
            if r.kind != "alias"]


def _stored(model: onnx.ModelProto) -> set[str]:
    return {t for r in npu_layers.layer_records(model.graph) for t in r.stored}


def _same_values(optimized: onnx.ModelProto, model: onnx.ModelProto, atol: float = 0.0) -> None:
    x = _RNG.normal(size=(1, C, 8, 8)).astype(np.float32)
    run = lambda m: reference_session(m.SerializeToString()).run(None, {"x": x})[0]   # noqa: E731
    np.testing.assert_allclose(run(optimized), run(model), rtol=0, atol=atol)


@pytest.mark.parametrize("level", [0, 3])
def test_zero_branches_vanish_and_the_repeated_relu_goes(level):
    """rknn-toolkit2 (every level): ConvRelu, MaxPool, Relu — the first block's Add(x, 0) goes, its
    Relu stays; the second block's Add goes and its Relu(Relu(x)) is one Relu storing the output."""
    model = _resnet_d("direct")
    optimized = optimize(model, level)
    assert [op for op, _ in _rows(optimized)] == ["ConvRelu", "MaxPool", "Relu"]
    assert _stored(optimized) == {"stem_relu", "pool", "b1_out"}
    assert {n.name for n in optimized.graph.node} >= {"b0_out"}   # the layer keeps the first Relu's name
    _same_values(optimized, model)


def test_a_bias_only_branch_is_one_channel_offset_add():
    """Nonzero bias: the full-size constant shrinks to [1, C, 1, 1] (``<x>_add``), ``AddRelu`` per block."""
    model = _resnet_d("direct", bias=None)
    optimized = optimize(model, 3)
    assert [op for op, _ in _rows(optimized)] == ["ConvRelu", "MaxPool", "AddRelu", "AddRelu"]
    adds = [n for n in optimized.graph.node if n.op_type == "Add"]
    assert [n.name for n in adds] == ["pool_add", "b0_out_add"]
    shapes = {i.name: list(i.dims) for i in optimized.graph.initializer}
    assert all(shapes[n.input[1]] == [1, C, 1, 1] for n in adds)
    np.testing.assert_allclose(*(reference_session(m.SerializeToString()).run(None, {"x": x})[0]
                                 for m in (optimized, model)
                                 for x in [np.ones((1, C, 8, 8), np.float32)]), rtol=0, atol=1e-6)


@pytest.mark.parametrize("form", ["identity", "batchnorm"])
def test_zero_branches_folded_late_keep_their_add_with_a_full_size_operand(form):
    """A zero weight read through an Identity, or made zero by a BatchNorm with γ = 0: rknn-toolkit2
    folds it after its zero-Add rule ran, so each block is an ``AddRelu`` reading the input and an
    N×C×H×W constant (printed INT8, not the INT32 of an offset)."""
    model = _resnet_d(form)
    optimized = optimize(model, 3)
    assert _rows(optimized) == [("ConvRelu", None), ("MaxPool", None), ("AddRelu", None), ("AddRelu", None)]
    assert _stored(optimized) == {"stem_relu", "pool", "b0_out", "b1_out"}
    _same_values(optimized, model)


def test_relu_of_relu_is_one_relu():
    """Conv → Relu → Relu: one ``ConvRelu`` storing the second Relu's tensor (``fuse_two_relu``); when the
    first Relu is read elsewhere too the second one's readers read it (``remove_invalid_relu``)."""
    g = _Graph()
    r2 = g.node("Relu", [g.node("Relu", [g.conv("x", "c0")], "r1")], "r2")
    model = g.model(g.conv(r2, "c1"))
    optimized = optimize(model, 3)
    assert [op for op, _ in _rows(optimized)] == ["ConvRelu", "Conv"]
    assert "r2" in _stored(optimized)
    _same_values(optimized, model)

    g = _Graph()
    r1 = g.node("Relu", [g.conv("x", "c0")], "r1")
    g.node("Relu", [r1], "r2")
    out = g.node("Add", [g.conv("r2", "c1"), g.conv(r1, "c2")], "out")
    model = g.model(out)
    optimized = optimize(model, 3)
    assert "Relu" not in [op for op, _ in _rows(optimized)]
    _same_values(optimized, model, atol=1e-5)   # the two Convs now read one tensor: merged (branch_merging)
