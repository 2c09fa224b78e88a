"""The int8 steps rknn-toolkit2 2.5.0 takes inside a fused layer, before the activation: a depthwise
Conv's output before HardSwish (minimum raised to −3) and a Conv's output before HardSigmoid of any
slope (clamped to its linear part). Measured on PP-OCR's classifier with the vendor's simulator."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from openrknn.graph import npu_layers
from tests.helpers import quantized_build

C = 4


def _model(path, first: str, activation: str):
    """x → Conv (``first``: 'depthwise' 3×3 or 'dense' 1×1) → ``activation`` → 1×1 Conv → out."""
    rng = np.random.default_rng(0)
    w0 = (rng.normal(0, 2.0, (C, 1, 3, 3)) if first == "depthwise" else rng.normal(0, 2.0, (C, C, 1, 1)))
    inits = [numpy_helper.from_array(w0.astype(np.float32), "w0"),
             numpy_helper.from_array(rng.normal(0, 0.5, (C,)).astype(np.float32), "b0"),
             numpy_helper.from_array(rng.normal(0, 0.5, (2, C, 1, 1)).astype(np.float32), "w1")]
    conv = (dict(group=C, pads=[1, 1, 1, 1]) if first == "depthwise" else {})
    act = (helper.make_node("HardSwish", ["c0"], ["a0"], name="act") if activation == "HardSwish" else
           helper.make_node("HardSigmoid", ["c0"], ["a0"], name="act", alpha=0.2, beta=0.5))
    nodes = [helper.make_node("Conv", ["x", "w0", "b0"], ["c0"], name="conv0", **conv), act,
             helper.make_node("Conv", ["a0", "w1"], ["out"], name="project")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, C, 8, 8])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 2, 8, 8])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)]), path)
    return path


def _samples():
    return [np.random.default_rng(i).normal(0, 1, (1, 8, 8, C)).astype(np.float32) for i in range(4)]


def test_depthwise_conv_before_hardswish_is_requantized_from_minus_three(tmp_path):
    model = quantized_build(_model(tmp_path / "m.onnx", "depthwise", "HardSwish"), _samples())._model
    params = model.quant_params.get("c0")
    assert params is not None and params["dtype"] == "int8", "the depthwise sum gets its int8 step"
    assert np.allclose(params["min"], -3.0) and params["max"][0] > 3.0
    record = next(r for r in npu_layers.model_records(model) if "c0" in r.nodes or "conv0" in r.nodes)
    assert "act" in record.nodes and "c0" not in record.stored, "the step is inside the ConvHardSwish layer"


def test_dense_conv_before_hardswish_reads_the_exact_sum(tmp_path):
    model = quantized_build(_model(tmp_path / "m.onnx", "dense", "HardSwish"), _samples())._model
    assert "c0" not in model.quant_params


def test_paddle_hardsigmoid_clamps_to_its_own_linear_part(tmp_path):
    model = quantized_build(_model(tmp_path / "m.onnx", "dense", "HardSigmoid"), _samples())._model
    params = model.quant_params.get("c0")
    assert params is not None, "Paddle's HardSigmoid (alpha 0.2) reads an int8 Conv output too"
    assert params["min"][0] >= -2.5 - 1e-6 and params["max"][0] <= 2.5 + 1e-6


def test_vendor_gets_the_clamped_range_itself(tmp_path):
    """rknn-toolkit2 clamps a handed range to [−3, max] again: handing the grid's end (below −3) would
    make it derive another scale. It gets the range the parameters came from."""
    from openrknn.export import rockchip
    from openrknn.quant.numerics import QuantParams
    model = quantized_build(_model(tmp_path / "m.onnx", "depthwise", "HardSwish"), _samples())._model
    handed = rockchip.tensor_ranges(model)["c0"]
    assert handed["min"] == [-3.0]
    params = QuantParams.from_dict(model.quant_params["c0"])
    vendor_scale = (handed["max"][0] - handed["min"][0]) / 255
    assert np.isclose(vendor_scale, float(params.scale.ravel()[0]), rtol=1e-6)
