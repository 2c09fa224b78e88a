"""TFLite export: LiteRT runs the exported file and gives the simulator's integers (per layer) and
outputs (end to end); the report says which layers Teflon's Rockchip backend takes."""
from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.helpers import mixed_layers_model, quantized_build, uniform_samples

pytest.importorskip("ai_edge_litert", reason="LiteRT (ai-edge-litert, the 'test' extra) runs the exported files")
pytest.importorskip("tflite", reason="the export writes with the 'tflite' schema package")


def _litert(path: Path, inputs: list[np.ndarray]) -> list[np.ndarray]:
    from openrknn.export.tflite.verify import run_litert
    return run_litert(path.read_bytes(), inputs)


@pytest.mark.parametrize("method", ["layer", "channel"])
def test_small_model_matches_simulator_per_layer_and_end_to_end(tmp_path, method, capsys):
    from openrknn.export.tflite.verify import compare_layers
    rknn = quantized_build(mixed_layers_model(tmp_path / "m.onnx"), uniform_samples((1, 3, 16, 16)), quantized_method=method,
                           mean_values=[[127.5] * 3], std_values=[[127.5] * 3])
    out = tmp_path / "m.tflite"
    assert rknn.export_tflite(str(out), report_path=str(tmp_path / "report.json")) == 0
    printed = capsys.readouterr().out
    report = json.loads((tmp_path / "report.json").read_text())
    rows = {r["layer"]: r for r in report}
    assert "runs on" in printed and "layers for Teflon" in printed
    if method == "layer":
        assert rows["c1"]["runs_on"] == "NPU (Teflon)" and rows["c3"]["why"].endswith("residual ADD fused in")
    else:
        assert rows["c1"]["runs_on"] == "CPU" and "per-channel" in rows["c1"]["why"]
    assert rows["y"]["runs_on"] == "CPU"

    x = uniform_samples((1, 3, 16, 16), 1, seed=7)[0]
    checks = {c.layer: c for c in compare_layers(rknn._model, {"x": x})}
    assert {"c1", "c2", "c3", "p", "cc", "g", "f"} <= set(checks)
    for name, check in checks.items():
        # plain int8 layers: the same integers; layers with a float32 step inside or an int8
        # intermediate (hard-swish, residual Add): within one step (docs/deployment.md)
        assert check.max_steps <= (0 if name in ("c1", "p", "f") else 1), check
    assert rknn.init_runtime() == 0
    expected = rknn.inference(inputs=[x], data_format="nchw")[0]
    got = _litert(out, [x.transpose(0, 2, 3, 1).copy()])[0]
    assert got.shape == expected.shape
    assert np.abs(got - expected).max() < 0.05 * np.abs(expected).max()


def test_int8_io_and_cli(tmp_path):
    from openrknn.cli.main import main
    model = mixed_layers_model(tmp_path / "m.onnx")
    for i, sample in enumerate(uniform_samples((1, 3, 16, 16))):
        np.save(tmp_path / f"s{i}.npy", sample)
    (tmp_path / "ds.txt").write_text("".join(f"s{i}.npy\n" for i in range(4)))
    assert main(["convert", str(model), "--format", "tflite", "--dataset", str(tmp_path / "ds.txt"),
                 "-o", str(tmp_path / "cli.tflite")]) == 0
    from ai_edge_litert.interpreter import Interpreter
    interpreter = Interpreter(model_path=str(tmp_path / "cli.tflite"))
    assert interpreter.get_input_details()[0]["shape"].tolist() == [1, 16, 16, 3]   # NHWC

    rknn = quantized_build(model, uniform_samples((1, 3, 16, 16)))
    assert rknn._model is not None
    from openrknn.export.tflite import tflite_bytes
    data, _ = tflite_bytes(rknn._model, float_io=False)
    interpreter = Interpreter(model_content=data)
    details = interpreter.get_input_details()[0]
    assert details["dtype"] == np.int8 and details["quantization"][0] > 0


def test_unsupported_op_names_it_and_leaves_no_file(tmp_path, capsys):
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.normal(0, 0.3, (4, 3, 3, 3)).astype(np.float32), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Resize", ["c", "", "sc"], ["y"], mode="cubic")]
    sc = numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "sc")
    graph = helper.make_graph(nodes, "r", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 16, 16])], [w, sc])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), tmp_path / "r.onnx")
    rknn = quantized_build(tmp_path / "r.onnx", uniform_samples((1, 3, 8, 8)))
    assert rknn.export_tflite(str(tmp_path / "r.tflite")) == -1
    text = capsys.readouterr().out   # a cubic Resize has no TFLite op
    assert "E export_tflite: Resize 'y'" in text and "cubic" in text
    assert not (tmp_path / "r.tflite").exists()


def test_float_model_is_refused(tmp_path, capsys):
    from rknn.api import RKNN
    rknn = RKNN()
    rknn.config(target_platform="rk3588")
    assert rknn.load_onnx(str(mixed_layers_model(tmp_path / "m.onnx"))) == 0
    assert rknn.build(do_quantization=False) == 0
    assert rknn.export_tflite(str(tmp_path / "f.tflite")) == -1
    assert "do_quantization=True" in capsys.readouterr().out
