"""Clip bounds stored as 1-element tensors (how the TensorFlow/TFLite frontends write Relu6) quantize and analyse."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from tests.conftest import quantized_build


def _relu6_model(path):
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.normal(0, 0.5, (4, 3, 3, 3)).astype(np.float32), "w"),
             numpy_helper.from_array(np.array([0.0], np.float32), "lo"),     # shape (1,), not a scalar
             numpy_helper.from_array(np.array([6.0], np.float32), "hi")]
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Clip", ["c", "lo", "hi"], ["y"], name="relu6")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)
    return path


def test_mmse_build_and_accuracy_analysis_with_one_element_clip_bounds(tmp_path):
    samples = [np.random.default_rng(i).normal(0, 2, (1, 8, 8, 3)).astype(np.float32) for i in range(2)]
    rknn = quantized_build(_relu6_model(tmp_path / "m.onnx"), samples, quantized_algorithm="mmse")
    assert rknn.accuracy_analysis(inputs=[str(tmp_path / "s0.npy")], output_dir=str(tmp_path / "snap")) == 0
    assert (tmp_path / "snap" / "error_analysis.txt").is_file()
