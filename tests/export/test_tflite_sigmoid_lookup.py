"""A standalone int8 Sigmoid whose output range is tiny (PP-OCRv3 det's head once its ConvTranspose,
bias Add and Sigmoid are three layers: inputs −37…−14, outputs ≤ 1e-6, output scale ~3e-9): the
TFLite export's lookup table must hold the simulator's integers, which are
``quantize(1 / (1 + exp(−dequantize(q))))``. onnxruntime's own Sigmoid kernel is off by up to ~3e-8
absolute, tens of steps at that scale; the table was computed with it (26 steps off on the real model)."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.helpers import quantized_build

pytest.importorskip("ai_edge_litert", reason="LiteRT (ai-edge-litert, the 'test' extra) runs the exported files")
pytest.importorskip("tflite", reason="the export writes with the 'tflite' schema package")


def _far_negative_sigmoid(path):
    """Conv (bias −18) → MaxPool → Sigmoid: the Sigmoid a layer of its own, reading int8 values far
    in the negative tail."""
    rng = np.random.default_rng(3)
    inits = [numpy_helper.from_array(rng.normal(0, 0.5, (4, 3, 3, 3)).astype(np.float32), "w"),
             numpy_helper.from_array(np.full(4, -18.0, np.float32), "b")]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("MaxPool", ["c"], ["m"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Sigmoid", ["m"], ["y"])]
    graph = helper.make_graph(nodes, "tail", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    import onnx
    onnx.save(model, path)
    return path


def test_standalone_int8_sigmoid_lookup_matches_simulator_and_integer_reference(tmp_path):
    from openrknn.export.tflite.verify import compare_layers, simulator_integers
    rng = np.random.default_rng(0)
    samples = [rng.uniform(-1, 1, (1, 3, 16, 16)).astype(np.float32) for _ in range(2)]
    rknn = quantized_build(_far_negative_sigmoid(tmp_path / "m.onnx"), samples, quantized_method="layer")
    params = rknn._model.quant_params
    scale_in, zero_in = params["m"]["scale"][0], params["m"]["zero_point"][0]
    scale_out, zero_out = params["y"]["scale"][0], params["y"]["zero_point"][0]
    assert scale_out < 1e-7   # the case: a tiny output grid
    feeds = {"x": rng.uniform(-1, 1, (1, 3, 16, 16)).astype(np.float32)}

    # the simulator against the documented integer reference (float64 sigmoid, round half to even)
    integers = simulator_integers(rknn._model, feeds)
    real = (integers["m"].astype(np.float64) - zero_in) * np.float32(scale_in)
    expected = np.clip(np.rint(1 / (1 + np.exp(-real)) / np.float32(scale_out)) + zero_out, -128, 127)
    assert np.abs(integers["y"].astype(np.int64) - expected).max() <= 1

    checks = {c.layer: c for c in compare_layers(rknn._model, feeds)}
    sigmoid = checks["y"]
    assert "GATHER" in sigmoid.ops, sigmoid
    assert sigmoid.max_steps == 0, sigmoid
