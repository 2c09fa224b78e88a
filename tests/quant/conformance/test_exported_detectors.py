"""Real torch.onnx output (a YOLOv8n stand-in, a detector with a shared head, BatchNorms with dead
channels) meets the corpus tolerance on every output after an int8 build, after export_rknn →
load_rknn → run, and through LiteRT from export_tflite."""
from __future__ import annotations

import numpy as np
import pytest

from tests.quant.conformance import corpus, torch_models

pytest.importorskip("torch", reason="the exporter-output cases are made from torch at test time")
pytest.importorskip("onnxruntime")


def _build(tmp_path, name, default_init=False):
    import onnx
    from rknn.api import RKNN
    path, shape = torch_models.export(name, tmp_path, default_init)
    calibration = torch_models.images(shape, 6)
    lines = []
    for k, image in enumerate(calibration):
        np.save(tmp_path / f"c{k}.npy", image)
        lines.append(f"c{k}.npy")
    (tmp_path / "dataset.txt").write_text("\n".join(lines) + "\n")
    rknn = RKNN(verbose=False)
    assert rknn.config(target_platform="rk3588") == 0
    assert rknn.load_onnx(model=str(path)) == 0
    assert rknn.build(do_quantization=True, dataset=str(tmp_path / "dataset.txt")) == 0
    evaluation = [[np.float32(0.9) * calibration[k]] for k in range(2)]
    case = corpus.Case(name, onnx.load(str(path)), [[c] for c in calibration], evaluation)
    return rknn, case


def _check(case, outputs, what):
    failures = [f"{n}: cos {f['cosine']:.5f} norm ratio {f['norm_ratio']:.4f} max|diff| {f['max_diff']:.3g}"
                for n, passed, f in corpus.compare(case, outputs) if not passed]
    assert not failures, f"{case.name} ({what}): " + "; ".join(failures)


@pytest.mark.parametrize("name", sorted(torch_models.MODELS))
def test_int8_build_rknn_file_and_litert(tmp_path, name):
    rknn, case = _build(tmp_path, name)
    simulated = corpus.run(rknn, case)
    _check(case, simulated, "simulator")

    from rknn.api import RKNN
    assert rknn.export_rknn(str(tmp_path / "m.rknn")) == 0
    loaded = RKNN(verbose=False)
    assert loaded.load_rknn(str(tmp_path / "m.rknn")) == 0
    reloaded = corpus.run(loaded, case)
    for a, b in zip(simulated, reloaded):
        for x, y in zip(a, b):
            np.testing.assert_array_equal(x, y)

    pytest.importorskip("ai_edge_litert", reason="LiteRT (ai-edge-litert, the 'test' extra) runs the export")
    assert rknn.export_tflite(str(tmp_path / "m.tflite")) == 0
    _check(case, [_litert(tmp_path / "m.tflite", sample, case) for sample in case.evaluation], "LiteRT")


def test_default_init_yolo_keeps_tiny_outputs(tmp_path):
    """PyTorch's default init (BatchNorm 0/1): small activations everywhere."""
    rknn, case = _build(tmp_path, "yolov8n_like", default_init=True)
    _check(case, corpus.run(rknn, case), "simulator, default init")


def _litert(path, sample, case):
    from ai_edge_litert.interpreter import Interpreter, OpResolverType
    try:
        interpreter = Interpreter(model_path=str(path))
        interpreter.allocate_tensors()
    except RuntimeError:   # XNNPACK refuses some graphs at prepare time: LiteRT's own kernels then
        interpreter = Interpreter(model_path=str(path),
                                  experimental_op_resolver_type=OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES)
        interpreter.allocate_tensors()
    for detail, value in zip(interpreter.get_input_details(), sample):
        if tuple(detail["shape"]) != value.shape:   # NHWC storage
            value = np.transpose(value, (0, 2, 3, 1))
        interpreter.set_tensor(detail["index"], np.ascontiguousarray(value, np.float32))
    interpreter.invoke()
    reference = corpus.float_outputs(case.model, sample)
    outs = []
    for detail, expected in zip(interpreter.get_output_details(), reference):
        value = interpreter.get_tensor(detail["index"])
        if value.shape != expected.shape and value.ndim == 4:
            value = np.transpose(value, (0, 3, 1, 2))
        outs.append(value)
    return outs
