"""GridSample (RT-DETR's deformable attention): float16 and int8 builds against the ONNX reference.

rknn-toolkit2 2.5.0's layer table for the same graph puts GridSample on the CPU, INT8 in an int8
build and FLOAT16 in a float build; the estimate here prints the same row.
"""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from rknn.api import RKNN


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.ravel().astype(np.float64), b.ravel().astype(np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def _grid_sample_model(path, mode: str) -> None:
    """Conv-ReLU → GridSample at offsets computed from a second input (tanh keeps them in [-1, 1]) → Conv."""
    rng = np.random.default_rng(0)
    weight = numpy_helper.from_array(rng.normal(size=(8, 8, 1, 1)).astype(np.float32), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"]), helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("Mul", ["off", "k"], ["o2"]), helper.make_node("Tanh", ["o2"], ["grid"]),
             helper.make_node("GridSample", ["r", "grid"], ["g"], mode=mode, padding_mode="zeros", align_corners=0),
             helper.make_node("Conv", ["g", "w"], ["y"])]
    graph = helper.make_graph(
        nodes, "grid_sample",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 16, 16]),
         helper.make_tensor_value_info("off", TensorProto.FLOAT, [1, 10, 12, 2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 10, 12])],
        [weight, numpy_helper.from_array(np.array(1.2, np.float32), "k")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
    model.ir_version = 9
    onnx.save(model, path)


@pytest.mark.parametrize("mode", ["linear", "nearest"])
@pytest.mark.parametrize("quantize", [False, True])
def test_grid_sample_builds_simulates_exports_and_estimates(tmp_path, capsys, mode, quantize):
    path = tmp_path / "gs.onnx"
    _grid_sample_model(path, mode)
    rng = np.random.default_rng(1)
    samples = [(rng.uniform(0, 1, (1, 8, 16, 16)).astype(np.float32),
                rng.normal(size=(1, 10, 12, 2)).astype(np.float32)) for _ in range(4)]
    for i, (x, off) in enumerate(samples):
        np.save(tmp_path / f"x{i}.npy", x)
        np.save(tmp_path / f"o{i}.npy", off)
    (tmp_path / "ds.txt").write_text("".join(f"x{i}.npy o{i}.npy\n" for i in range(len(samples))))
    x, off = samples[0]
    expected = ReferenceEvaluator(onnx.load(path)).run(None, {"x": x, "off": off})[0]

    rknn = RKNN()
    assert rknn.config(target_platform="rk3588") == 0
    assert rknn.load_onnx(model=str(path)) == 0
    assert rknn.build(do_quantization=quantize, dataset=str(tmp_path / "ds.txt")) == 0
    assert rknn.init_runtime(perf_debug=True) == 0
    got = rknn.inference(inputs=[x, off], data_format="nchw")[0]
    assert got.shape == expected.shape
    # nearest sampling flips to the neighbour pixel where a rounded grid value crosses a pixel border
    assert _cosine(got, expected) >= ((0.999 if quantize else 0.9999) if mode == "linear" else 0.99)

    capsys.readouterr()
    assert rknn.eval_perf() is not None
    row = next(line for line in capsys.readouterr().out.splitlines() if line.split()[1:2] == ["GridSample"])
    assert row.split()[2:4] == ["INT8" if quantize else "FLOAT16", "CPU"]

    assert rknn.export_rknn(str(tmp_path / "gs.rknn")) == 0
    if quantize:   # no TFLite form yet: a clear E line naming the operator
        assert rknn.export_tflite(str(tmp_path / "gs.tflite")) == -1
        assert "E export_tflite: ONNX operator 'GridSample'" in capsys.readouterr().out
    rknn.release()

    reloaded = RKNN()
    assert reloaded.load_rknn(str(tmp_path / "gs.rknn")) == 0
    assert reloaded.init_runtime() == 0
    np.testing.assert_array_equal(reloaded.inference(inputs=[x, off], data_format="nchw")[0], got)
    reloaded.release()
