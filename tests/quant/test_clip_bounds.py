"""Clip bounds stored as 1-element tensors (how the TensorFlow/TFLite frontends write Relu6) quantize and analyse."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from tests.helpers import quantized_build


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


def test_load_tensorflow_mmse_relu6_accuracy_analysis(tmp_path):
    """The reported path: a frozen TF graph with Relu6, quantized with mmse, then accuracy_analysis."""
    from rknn.api import RKNN
    from tests.frontends.tensorflow.tf_helpers import GraphWriter
    g = GraphWriter(seed=0)
    g.placeholder("input", [1, 8, 8, 3])
    g.node("conv", "Conv2D", ["input", g.weight("w", (3, 3, 3, 4))], strides=[1, 1, 1, 1], padding="SAME")
    g.node("relu6", "Relu6", ["conv"])
    path = g.save(tmp_path / "m.pb")
    for i in range(2):
        np.save(tmp_path / f"s{i}.npy", np.random.default_rng(i).normal(0, 2, (1, 8, 8, 3)).astype(np.float32))
    (tmp_path / "ds.txt").write_text("s0.npy\ns1.npy\n")
    rknn = RKNN()
    assert rknn.config(target_platform="rk3588", quantized_algorithm="mmse") == 0
    assert rknn.load_tensorflow(tf_pb=str(path), inputs=["input"], outputs=["relu6"],
                                input_size_list=[[1, 8, 8, 3]]) == 0
    assert rknn.build(do_quantization=True, dataset=str(tmp_path / "ds.txt")) == 0
    assert rknn.accuracy_analysis(inputs=[str(tmp_path / "s0.npy")], output_dir=str(tmp_path / "snap")) == 0
