"""What rknn-toolkit2 2.5.0's simulator does in PP-OCRv3 det's head (read from its per-layer
onnxruntime sessions), on a tiny model of the same shape: ConvTranspose → Add (bias) → BatchNorm →
Relu → ConvTranspose → Add (bias) → Sigmoid, each step after a ConvTranspose a layer of its own.

* a stand-alone Sigmoid's input is quantized on its range clamped to [−7, 7];
* that range's zero point comes from the float64 scale (−7/(14/255) = −127.5 exactly → z = 0);
* an int8 layer's float constants (the BatchNorm's parameters, an Add's constant) stay float32.

With rknn-toolkit2 present (``OPENRKNN_RKNN_TOOLKIT2``), the vendor's simulator on the exported head
is compared with openrknn's prediction; without it that test skips.
"""
from __future__ import annotations

import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from openrknn.export import rockchip
from openrknn.quant import numerics
from openrknn.sim.quantized import lower_quantized
from tests.helpers import cosine, quantized_build

C = 4
# float16 cannot hold these: a simulator that rounds them to float16 changes them
GAMMA = np.array([3.0211895, 3.2841272, 2.2518456, 2.8285882], np.float32)
OFFSET = np.array([0.00540941, 0.00455906, 0.00280573, 0.00070283], np.float32).reshape(1, C, 1, 1)


def _head(path):
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.normal(0, 0.5, (C, C, 2, 2)).astype(np.float32), "up0"),
             numpy_helper.from_array(OFFSET, "bias0"),
             numpy_helper.from_array(GAMMA, "gamma"),
             numpy_helper.from_array(rng.normal(0, 0.5, (C,)).astype(np.float32), "beta"),
             numpy_helper.from_array(rng.normal(0, 0.1, (C,)).astype(np.float32), "mean"),
             numpy_helper.from_array(rng.uniform(0.05, 0.2, (C,)).astype(np.float32), "var"),
             numpy_helper.from_array((rng.normal(0, 1, (C, 1, 2, 2)) * 20).astype(np.float32), "up1"),
             numpy_helper.from_array(np.full((1, 1, 1, 1), -6.0, np.float32), "bias1")]
    nodes = [helper.make_node("ConvTranspose", ["x", "up0"], ["t0"], name="up0", strides=[2, 2]),
             helper.make_node("Add", ["t0", "bias0"], ["a0"], name="add0"),
             helper.make_node("BatchNormalization", ["a0", "gamma", "beta", "mean", "var"], ["bn"], name="bn"),
             helper.make_node("Relu", ["bn"], ["r"], name="relu"),
             helper.make_node("ConvTranspose", ["r", "up1"], ["t1"], name="up1", strides=[2, 2]),
             helper.make_node("Add", ["t1", "bias1"], ["logits"], name="add1"),
             helper.make_node("Sigmoid", ["logits"], ["out"], name="sigmoid")]
    graph = helper.make_graph(nodes, "head", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, C, 4, 4])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 1, 16, 16])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)
    return path


def _samples():
    return [np.random.default_rng(i).normal(0, 1, (1, 4, 4, C)).astype(np.float32) for i in range(4)]


def test_standalone_sigmoid_input_is_clamped_to_seven(tmp_path):
    model = quantized_build(_head(tmp_path / "m.onnx"), _samples())._model
    params = model.quant_params["logits"]
    assert params["min"] == [-7.0] and params["max"] == [7.0], "the calibrated range is wider than ±7"
    assert np.isclose(params["scale"][0], 14 / 255) and params["zero_point"] == [0]


def test_fused_sigmoid_reads_the_exact_sum(tmp_path):
    """Conv → Sigmoid is one ``ConvSigmoid`` layer: its sum is never stored, so nothing is clamped."""
    rng = np.random.default_rng(1)
    w = numpy_helper.from_array((rng.normal(0, 1, (C, C, 1, 1)) * 20).astype(np.float32), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv"),
             helper.make_node("Sigmoid", ["c"], ["out"], name="sigmoid")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, C, 4, 4])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, C, 4, 4])], [w])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), tmp_path / "f.onnx")
    model = quantized_build(tmp_path / "f.onnx", _samples())._model
    assert "c" not in model.quant_params or model.quant_params["c"]["min"][0] < -7.0


def test_symmetric_range_zero_point_from_the_float64_scale():
    """float32(14/255) makes −7/s = −127.4999989 (z = −1); the vendor's float64 scale gives the tie
    −127.5, rounded to even: z = 0."""
    scale, zero = numerics.asymmetric(np.array([-7.0]), np.array([7.0]), "int8")
    assert zero.tolist() == [0] and np.isclose(scale[0], 14 / 255)


def test_int8_layer_constants_stay_float32(tmp_path):
    model = quantized_build(_head(tmp_path / "m.onnx"), _samples())._model
    lowered = {i.name: numpy_helper.to_array(i) for i in lower_quantized(model).graph.initializer}
    assert np.array_equal(lowered["gamma"], GAMMA), "the stand-alone BatchNorm runs on float32 parameters"
    assert np.array_equal(lowered["bias0"], OFFSET), "the ConvTranspose's bias Add keeps its float32 constant"


def test_vendor_simulator_agrees_on_the_head(tmp_path):
    """With rknn-toolkit2 present: its simulator on the exported head equals openrknn's prediction
    (measured cosine 1.000000 with the rules, 0.997162 without them)."""
    python = os.environ.get("OPENRKNN_RKNN_TOOLKIT2")
    if not python:
        pytest.skip("rknn-toolkit2 not available: set OPENRKNN_RKNN_TOOLKIT2 to its Python to run this check")
    rknn = quantized_build(_head(tmp_path / "m.onnx"), _samples(), weight_qtype="asymmetric_quantized")
    held = [np.random.default_rng(10 + i).normal(0, 1, (1, 4, 4, C)).astype(np.float32) for i in range(3)]
    rknn.init_runtime()
    ours = np.concatenate([rknn.inference(inputs=[x])[0].ravel() for x in held])
    built = rockchip.compile_with_vendor(rknn._model, rknn._source.model, rknn._cfg(), str(tmp_path / "ds.txt"),
                                         str(tmp_path / "v.rknn"), python, check_samples=[[x] for x in held])
    theirs = np.concatenate([s[0].ravel() for s in built.vendor_outputs])
    print(f"vendor simulator vs openrknn simulator on the head: cosine {cosine(ours, theirs):.6f}")
    assert cosine(ours, theirs) >= 0.9999
