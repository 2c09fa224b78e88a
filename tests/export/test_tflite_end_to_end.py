"""TFLite export end to end: LiteRT runs the exported file and agrees with the simulator of the
export (``init_runtime(simulate='tflite')``), whole-model and layer by layer, on generated models
with the structures the export failed on and on every shared model (docs/deployment.md)."""
from __future__ import annotations

import os

import numpy as np
import onnx
import pytest

from tests.helpers import cosine
from tests.export.tflite_cases import CASES

pytest.importorskip("ai_edge_litert", reason="LiteRT (ai-edge-litert, the 'test' extra) runs the exported files")
pytest.importorskip("tflite", reason="the export writes with the 'tflite' schema package")


def _values(shape, rng) -> np.ndarray:
    return rng.uniform(0, 255, shape).astype(np.float32) if len(shape) == 4 else rng.normal(0, 1, shape).astype(
        np.float32)


def _build(tmp_path, name):
    """The generated model ``name`` built int8 per tensor; returns (rknn, feeds as ``inference`` takes them)."""
    from rknn.api import RKNN
    path = CASES[name](tmp_path / f"{name}.onnx")
    shapes = [[d.dim_value for d in i.type.tensor_type.shape.dim] for i in onnx.load(path).graph.input]
    rng = np.random.default_rng(0)
    lines = []
    for k in range(3):
        files = []
        for j, shape in enumerate(shapes):
            np.save(tmp_path / f"s{k}_{j}.npy", _values(shape, rng))
            files.append(f"s{k}_{j}.npy")
        lines.append(" ".join(files))
    (tmp_path / "ds.txt").write_text("\n".join(lines) + "\n")
    rknn = RKNN()
    config = {"target_platform": "rk3588", "quantized_method": "layer"}
    if len(shapes[0]) == 4:
        config.update(mean_values=[[127.5] * 3], std_values=[[127.5] * 3])
    assert rknn.config(**config) == 0
    assert rknn.load_onnx(model=str(path)) == 0
    assert rknn.build(do_quantization=True, dataset=str(tmp_path / "ds.txt")) == 0
    feeds = [_values(shape, rng) for shape in shapes]
    return rknn, [f.transpose(0, 2, 3, 1) if f.ndim == 4 else f for f in feeds]


def _litert_and_simulator(rknn, feeds, tmp_path, simulate="tflite"):
    from openrknn.export.tflite.verify import run_litert
    path = tmp_path / "m.tflite"
    assert rknn.export_tflite(str(path)) == 0
    litert = run_litert(path.read_bytes(), feeds)
    assert rknn.init_runtime(simulate=simulate) == 0
    return litert, rknn.inference(inputs=feeds)


def _model_feeds(model, feeds):
    """``feeds`` (NHWC images) in the built graph's input layouts (what the per-layer check runs)."""
    from openrknn.graph.rknn_model import LAYOUT_NHWC
    return {spec.name: (f if f.ndim != 4 or spec.layout == LAYOUT_NHWC else f.transpose(0, 3, 1, 2))
            for spec, f in zip(model.inputs, feeds)}


@pytest.mark.parametrize("name", sorted(CASES))
def test_generated_model_agrees_end_to_end_and_per_layer(tmp_path, name):
    from openrknn.export.tflite.target import as_exported
    from openrknn.export.tflite.verify import compare_layers
    rknn, feeds = _build(tmp_path, name)
    litert, simulated = _litert_and_simulator(rknn, feeds, tmp_path)
    for got, expected in zip(litert, simulated):
        assert np.all(np.isfinite(got)) and cosine(got, expected) >= 0.99, name
    exported = as_exported(rknn._model)
    checks = compare_layers(exported, _model_feeds(exported, feeds))
    assert len(checks) >= 4
    assert max(c.max_steps for c in checks) <= 2, [c for c in checks if c.max_steps > 2]
    assert all(c.float_ok for c in checks), [c for c in checks if not c.float_ok]


def _float_tail(rknn, tmp_path, stored: str):
    """``rknn``'s model rebuilt with the layer that stores ``stored`` in float16 (hybrid quantization)."""
    import yaml
    from rknn.api import RKNN
    here = os.getcwd()
    os.chdir(tmp_path)
    try:
        assert rknn.hybrid_quantization_step1(dataset=str(tmp_path / "ds.txt")) == 0
        name = next(tmp_path.glob("*.quantization.cfg")).name[:-len(".quantization.cfg")]
        cfg = yaml.safe_load((tmp_path / f"{name}.quantization.cfg").read_text())
        cfg["custom_quantize_layers"] = {stored: "float16"}
        (tmp_path / f"{name}.quantization.cfg").write_text(yaml.safe_dump(cfg))
        hybrid = RKNN()
        assert hybrid.hybrid_quantization_step2(f"{name}.model", f"{name}.data", f"{name}.quantization.cfg") == 0
        return hybrid
    finally:
        os.chdir(here)


def test_ocr_detector_last_float_layer_is_checked_and_reads_the_stored_int8(tmp_path):
    """The PP-OCR detector's last layer (ConvTranspose → Add → Sigmoid) run in float was skipped by
    the per-layer check, and in the whole file it read the float value of the layer before instead of
    the int8 the model stores: a map unlike the simulator's. (By default that layer is int8, as
    rknn-toolkit2 builds it; hybrid quantization moves it to float16 here. rknn-toolkit2 runs the
    ConvTranspose, its bias Add and the Sigmoid as three layers: the float one is the Sigmoid.)"""
    from openrknn.export.tflite.verify import FLOAT_TOLERANCE, compare_layers
    rknn, feeds = _build(tmp_path, "ocr_head")
    assert rknn._model.tensor_dtypes["y"] == "int8"
    rknn = _float_tail(rknn, tmp_path, "y")
    assert rknn._model.tensor_dtypes["y"] == "float16"
    checks = compare_layers(rknn._model, _model_feeds(rknn._model, feeds))   # against the float16 simulator
    last = [c for c in checks if "LOGISTIC" in c.ops]   # ConvTranspose, Add, Sigmoid: three layers, as printed
    assert len(last) == 1 and last[0].max_float_error <= FLOAT_TOLERANCE, checks
    litert, simulated = _litert_and_simulator(rknn, feeds, tmp_path)
    assert float(np.abs(litert[0] - simulated[0]).max()) <= 1e-5


def test_palm_regressor_head_simulated_as_exported_runs_in_float32(tmp_path):
    """The regressor head passes float16's 65504, so the NPU model keeps it int8 (a float16 store
    would overflow to inf); LiteRT runs it in float32 on the CPU. simulate='tflite' gives LiteRT's values."""
    rknn, feeds = _build(tmp_path, "palm_like")
    litert, as_exported = _litert_and_simulator(rknn, feeds, tmp_path)
    assert rknn.init_runtime() == 0
    on_npu = rknn.inference(inputs=feeds)
    assert float(np.abs(litert[0]).max()) > 65504 and np.all(np.isfinite(on_npu[0]))
    assert rknn._model.tensor_dtypes[rknn._model.graph.graph.output[0].name] == "int8"
    assert np.all(np.isfinite(as_exported[0])) and cosine(litert[0], as_exported[0]) >= 0.9999
    assert rknn.accuracy_analysis(inputs=[f"{tmp_path}/s0_0.npy"], output_dir=str(tmp_path / "snap"),
                                  simulate="tflite") == 0


def test_op_without_tflite_form_is_an_error_line_and_no_file(tmp_path, capsys):
    from onnx import TensorProto, helper
    from tests.helpers import quantized_build
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 4, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 8, 8])
    graph = helper.make_graph([helper.make_node("DepthToSpace", ["x"], ["y"], blocksize=2, mode="CRD")], "g", [x], [y])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), tmp_path / "m.onnx")
    rng = np.random.default_rng(0)
    rknn = quantized_build(tmp_path / "m.onnx", [rng.normal(0, 1, (1, 8, 4, 4)).astype(np.float32)] * 2,
                           quantized_method="layer")
    assert rknn.export_tflite(str(tmp_path / "m.tflite")) == -1
    printed = capsys.readouterr().out
    assert "E export_tflite:" in printed and "DepthToSpace" in printed and "DCR" in printed
    assert not (tmp_path / "m.tflite").exists()


@pytest.mark.integration
@pytest.mark.parametrize("name", ["ch_ppocr_mobile_v2.0_cls_infer", "ch_PP-OCRv3_det_infer", "ch_PP-OCRv4_rec_infer",
                                  "face_detection_short_range", "hand_landmark_lite", "iris_landmark",
                                  "selfie_segmentation", "silero_vad_16k_op15"])
def test_shared_model_agrees_end_to_end(shared_data, tmp_path, name):
    """Every shared model exports, and LiteRT's outputs agree with the simulator of the export
    (bench/tflite_end_to_end.py prints the table of docs/deployment.md from the same measurement)."""
    from bench.tflite_end_to_end import MODELS, measure
    framework = "onnx" if MODELS[name][0] in ("onnx", "audio") else "tflite"
    if not (shared_data / "models" / framework / f"{name}.{framework}").exists():
        pytest.skip(f"{name}.{framework} is absent from the shared models")
    row = measure(name, tmp_path)
    assert row["vs_sim"] >= 0.99, row
    assert row["int8"] >= 0.1 and row["layers"] >= 30, row
