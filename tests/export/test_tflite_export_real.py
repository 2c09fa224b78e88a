"""TFLite export of the shared real models: LiteRT agrees with the simulator layer by layer."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("ai_edge_litert", reason="LiteRT (ai-edge-litert, the 'test' extra) runs the exported files")
pytest.importorskip("tflite", reason="the export writes with the 'tflite' schema package")

# model → (framework, input shape, largest per-layer difference in steps measured; docs/deployment.md)
CASES = {
    "ch_ppocr_mobile_v2.0_cls_infer": ("onnx", (1, 3, 48, 96), 2),
    "ch_PP-OCRv3_det_infer": ("onnx", (1, 3, 32, 32), 2),
    "face_detection_short_range": ("tflite", None, 2),
    # Conv + SiLU layers: the int8 intermediate before x·sigmoid(x) costs up to 6 steps (5 before the
    # hard-swish outputs were stored as rknn-toolkit2 stores them: the neck's input scales moved)
    "ch_PP-OCRv4_rec_infer": ("onnx", (1, 3, 48, 64), 6),
}


def _built(shared_data, name, framework, shape, tmp_path):
    from rknn.api import RKNN
    rknn = RKNN()
    path = shared_data / "models" / framework / f"{name}.{framework}"
    if not path.exists():
        pytest.skip(f"{path} is absent")
    if framework == "onnx":
        rknn.config(target_platform="rk3588", quantized_method="layer", mean_values=[[127.5] * 3],
                    std_values=[[127.5] * 3])
        assert rknn.load_onnx(model=str(path), inputs=["x"], input_size_list=[list(shape)]) == 0
    else:
        rknn.config(target_platform="rk3588", quantized_method="layer")
        assert rknn.load_tflite(model=str(path)) == 0
        shape = tuple(d.dim_value for d in rknn._source.model.graph.input[0].type.tensor_type.shape.dim)
    rng = np.random.default_rng(0)
    for i in range(2):
        np.save(tmp_path / f"s{i}.npy", rng.uniform(0, 255, shape).astype(np.float32))
    (tmp_path / "ds.txt").write_text("s0.npy\ns1.npy\n")
    assert rknn.build(do_quantization=True, dataset=str(tmp_path / "ds.txt")) == 0
    return rknn, shape
PLAIN_OPS = {"PAD", "CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED", "MAX_POOL_2D", "RESHAPE", "TRANSPOSE"}


@pytest.mark.parametrize("name", sorted(CASES))
def test_real_model_per_layer(shared_data, tmp_path, name):
    from openrknn.export.tflite.verify import compare_layers
    framework, shape, bound = CASES[name]
    rknn, shape = _built(shared_data, name, framework, shape, tmp_path)
    assert rknn.export_tflite(str(tmp_path / "m.tflite")) == 0
    x = np.random.default_rng(5).uniform(0, 255, shape).astype(np.float32)
    checks = compare_layers(rknn._model, {rknn._model.graph.graph.input[0].name: x})
    assert len(checks) > 40, len(checks)
    assert max(c.max_steps for c in checks) <= bound, [c for c in checks if c.max_steps > 1]
    # one int8 kernel, no intermediate: XNNPACK's float32 requantization is ours, bit for bit
    plain = [c for c in checks if set(c.ops.split()) <= PLAIN_OPS]
    assert len(plain) >= 5 and max(c.max_steps for c in plain) == 0, [c for c in plain if c.max_steps]
    assert sum(c.max_steps <= 1 for c in checks) >= 0.75 * len(checks)


# (PP-OCRv4 rec, 11 s here, runs with -m slow; the end-to-end test covers it in the default suite)
@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n == "ch_PP-OCRv4_rec_infer" else n
                                  for n in sorted(CASES)])
def test_real_model_per_layer_as_exported(shared_data, tmp_path, name):
    """Against the simulator of the export (int8 intermediates, float32 CPU layers): every int8 layer
    within 2 steps, every float layer within the stated tolerance."""
    from openrknn.export.tflite.target import as_exported
    from openrknn.export.tflite.verify import compare_layers
    framework, shape, _ = CASES[name]
    rknn, shape = _built(shared_data, name, framework, shape, tmp_path)
    model = as_exported(rknn._model)
    x = np.random.default_rng(5).uniform(0, 255, shape).astype(np.float32)
    checks = compare_layers(model, {model.graph.graph.input[0].name: x})
    assert len(checks) > 40
    assert max(c.max_steps for c in checks) <= 2, [c for c in checks if c.max_steps > 2]
    assert all(c.float_ok for c in checks), [c for c in checks if not c.float_ok]
