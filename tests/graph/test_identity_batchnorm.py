"""A BatchNormalization with default parameters (γ=1, β=0, mean 0, variance 1 — timm's random-weight
MixNet after its mixed-kernel Concats) is dropped as rknn-toolkit2 2.5.0 drops it
(``remove_invalid_bn``, measured on rk3588 int8 probes, docs/fidelity.md); any other BN stays."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from openrknn.graph import npu_layers
from openrknn.graph.passes import optimize
from tests.helpers import reference_session

C = 16
_RNG = np.random.default_rng(11)


def _mixed_block(scale: float = 1.0, variance: float = 1.0, epsilon: float = 1e-5) -> onnx.ModelProto:
    """Split → depthwise 3×3 and 5×5 Convs → Concat → BatchNormalization → Relu → 1×1 Conv."""
    arrays = {"split": np.array([C // 2, C // 2], np.int64),
              "w3": _RNG.normal(0, .3, (C // 2, 1, 3, 3)), "w5": _RNG.normal(0, .3, (C // 2, 1, 5, 5)),
              "gamma": np.full(C, scale), "beta": np.zeros(C), "mean": np.zeros(C), "var": np.full(C, variance),
              "w": _RNG.normal(0, .3, (C, C, 1, 1))}
    inits = [numpy_helper.from_array(v if v.dtype == np.int64 else v.astype(np.float32), k) for k, v in arrays.items()]
    nodes = [helper.make_node("Split", ["x", "split"], ["a", "b"], axis=1, name="split"),
             helper.make_node("Conv", ["a", "w3"], ["ca"], group=C // 2, pads=[1] * 4, name="dw3"),
             helper.make_node("Conv", ["b", "w5"], ["cb"], group=C // 2, pads=[2] * 4, name="dw5"),
             helper.make_node("Concat", ["ca", "cb"], ["cat"], axis=1, name="cat"),
             helper.make_node("BatchNormalization", ["cat", "gamma", "beta", "mean", "var"], ["bn"], name="bn",
                              epsilon=epsilon),
             helper.make_node("Relu", ["bn"], ["act"], name="act"),
             helper.make_node("Conv", ["act", "w"], ["out"], name="pw")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, C, 8, 8])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def _rows(model: onnx.ModelProto) -> list[str]:
    return [r.op_name for r in npu_layers.layer_records(model.graph) if r.kind != "alias"]


@pytest.mark.parametrize("epsilon", [1e-5, 1e-2])
def test_default_batchnorm_after_a_mixed_conv_goes(epsilon):
    """rknn-toolkit2 prints Split, Conv, Conv, Concat, Relu (the activation alone), Conv — whatever ε is."""
    model = _mixed_block(epsilon=epsilon)
    optimized = optimize(model, 3)
    assert _rows(optimized) == ["Split", "Conv", "Conv", "Concat", "Relu", "Conv"]
    x = _RNG.normal(size=(1, C, 8, 8)).astype(np.float32)
    got, want = (reference_session(m.SerializeToString()).run(None, {"x": x})[0] for m in (optimized, model))
    np.testing.assert_allclose(got, want * np.sqrt(1 + epsilon), rtol=1e-5, atol=1e-6)   # the chip's values


@pytest.mark.parametrize("scale, variance", [(1.0001, 1.0), (2 ** .5, 2.0)])
def test_any_other_batchnorm_stays(scale, variance):
    """γ = 1.0001, or a unit scale from γ = √2 and variance 2: rknn-toolkit2 keeps the BN layer."""
    assert _rows(optimize(_mixed_block(scale, variance), 3)) == [
        "Split", "Conv", "Conv", "Concat", "BatchNormalizationRelu", "Conv"]
