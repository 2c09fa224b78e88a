"""``Conv(Concat(a, b))``: rknn-toolkit2 2.5.0 runs it as ``Conv(a)`` + ``ConvAdd(b)`` only when the
Conv narrows the channels; with at least half as many output channels as input channels (both
inputs whole 16-channel blocks) it keeps the Concat (probes on rk3588 int8, docs/fidelity.md:
256 + 256 → 224 split, → 256 kept; SqueezeNet's 512 → 1000 classifier Conv kept)."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from openrknn.graph import npu_layers
from openrknn.graph.passes import optimize
from tests.helpers import reference_session

_RNG = np.random.default_rng(9)


def _fire(half: int, out_channels: int) -> onnx.ModelProto:
    """x → ConvRelu (1×1) and ConvRelu (3×3), ``half`` channels each → Concat → ConvRelu (1×1)."""
    arrays = {"w1": (half, 8, 1, 1), "b1": (half,), "w3": (half, 8, 3, 3), "b3": (half,),
              "w": (out_channels, 2 * half, 1, 1), "bias": (out_channels,)}
    inits = [numpy_helper.from_array(_RNG.normal(0, .3, shape).astype(np.float32), name) for name, shape in arrays.items()]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["e1"], name="expand1x1"),
             helper.make_node("Relu", ["e1"], ["a"], name="relu1"),
             helper.make_node("Conv", ["x", "w3", "b3"], ["e3"], pads=[1] * 4, name="expand3x3"),
             helper.make_node("Relu", ["e3"], ["b"], name="relu3"),
             helper.make_node("Concat", ["a", "b"], ["cat"], axis=1, name="cat"),
             helper.make_node("Conv", ["cat", "w", "bias"], ["y"], name="squeeze"),
             helper.make_node("Relu", ["y"], ["out"], name="relu")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 6, 6])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


@pytest.mark.parametrize("half, out_channels, rows", [
    (256, 64, ["ConvRelu", "ConvRelu", "Conv", "ConvAddRelu"]),
    (256, 224, ["ConvRelu", "ConvRelu", "Conv", "ConvAddRelu"]),
    (256, 256, ["ConvRelu", "ConvRelu", "Concat", "ConvRelu"]),
    (32, 128, ["ConvRelu", "ConvRelu", "Concat", "ConvRelu"]),
    (256, 1000, ["ConvRelu", "ConvRelu", "Concat", "ConvRelu"]),
])
def test_concat_kept_when_the_conv_does_not_narrow(half, out_channels, rows):
    model = _fire(half, out_channels)
    optimized = optimize(model, 3)
    assert [r.op_name for r in npu_layers.layer_records(optimized.graph)] == rows
    if "Concat" not in rows:   # the Conv of the input computed last runs first, its sum stored as <input>_conv
        assert "b_conv" in {t for r in npu_layers.layer_records(optimized.graph) for t in r.stored}
    x = _RNG.normal(size=(1, 8, 6, 6)).astype(np.float32)
    got, want = (reference_session(m.SerializeToString()).run(None, {"x": x})[0] for m in (optimized, model))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
