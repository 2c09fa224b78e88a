"""Every dtype / method / algorithm builds and runs through the RKNN facade close to float."""
from __future__ import annotations

import numpy as np
import pytest

from rknn.api import RKNN
from tests.helpers import cosine

MEAN, STD = [[127.5, 127.5, 127.5]], [[64.0, 64.0, 64.0]]


def _rknn(model, platform: str, **config) -> RKNN:
    rknn = RKNN()
    assert rknn.config(mean_values=MEAN, std_values=STD, target_platform=platform, **config) == 0
    assert rknn.load_onnx(model=str(model)) == 0
    return rknn


def _outputs(rknn: RKNN, images) -> list[np.ndarray]:
    assert rknn.init_runtime() == 0
    return [rknn.inference(inputs=[img])[0] for img in images]


@pytest.fixture
def reference(quant_setup):
    rknn = _rknn(quant_setup["model"], "rk3588", float_dtype="float32")
    assert rknn.build(do_quantization=False) == 0
    return _outputs(rknn, quant_setup["eval"])


CASES = [
    # thresholds: the worst of 4 evaluation images, a margin below what was measured; 16-bit types
    # lose only where an evaluation image leaves the calibrated range (saturation).
    ("rk3588", "w8a8", "channel", "normal", 0.99),
    ("rk3588", "w8a8", "layer", "normal", 0.98),
    ("rk3588", "w8a8", "channel", "kl_divergence", 0.98),
    ("rk3588", "w8a8", "channel", "mmse", 0.99),
    ("rk3562", "w8a16", "channel", "normal", 0.999),
    ("rk3576", "w4a16", "channel", "normal", 0.8),
    ("rk3576", "w4a16", "group32", "mmse", 0.95),
    ("rv1106", "w16a16i", "channel", "normal", 0.99),
    ("rv1106", "w16a16i_dfp", "layer", "normal", 0.99),
    ("rk1808", "asymmetric_quantized-u8", "layer", "normal", 0.98),
    ("rk1808", "dynamic_fixed_point-i8", "channel", "normal", 0.97),
    ("rk1808", "dynamic_fixed_point-i16", "layer", "mmse", 0.99),
]


@pytest.mark.parametrize("platform,dtype,method,algorithm,threshold", CASES)
def test_dtype_method_algorithm(quant_setup, reference, platform, dtype, method, algorithm, threshold):
    rknn = _rknn(quant_setup["model"], platform, quantized_dtype=dtype, quantized_method=method,
                 quantized_algorithm=algorithm)
    assert rknn.build(do_quantization=True, dataset=str(quant_setup["dataset"])) == 0
    model = rknn._model
    assert model.is_quantized
    outputs = _outputs(rknn, quant_setup["eval"])
    worst = min(cosine(a, b) for a, b in zip(outputs, reference))
    assert worst >= threshold, f"{dtype}/{method}/{algorithm}: cosine {worst:.5f} < {threshold}"
    inits = {i.name for i in model.graph.graph.initializer}
    weights = {name: p for name, p in model.quant_params.items() if name in inits and p["dtype"] != "int32"}
    assert weights, "no weight quantization parameters recorded"
    if method == "channel":
        assert all(p["axis"] is not None for p in weights.values())
    if method == "layer":
        assert all(len(p["scale"]) == 1 for p in weights.values())
    if method == "group32":
        assert any(p.get("group_size") == 32 for p in model.quant_params.values())
    if dtype.startswith("dynamic_fixed_point") or dtype.endswith("_dfp"):
        scales = [s for p in model.quant_params.values() if p["dtype"] != "int32" for s in p["scale"]]
        assert np.allclose(np.log2(scales), np.round(np.log2(scales)))


def test_weights_stored_as_integers(quant_setup):
    rknn = _rknn(quant_setup["model"], "rk3588")
    assert rknn.build(do_quantization=True, dataset=str(quant_setup["dataset"])) == 0
    from onnx import numpy_helper
    inits = {i.name: numpy_helper.to_array(i) for i in rknn._model.graph.graph.initializer}
    kinds = {inits[n].dtype.name for n, p in rknn._model.quant_params.items() if n in inits}
    assert kinds <= {"int8", "int32"} and "int8" in kinds
    assert set(rknn._model.tensor_dtypes.values()) >= {"int8", "float16"}


def test_export_load_identical(quant_setup, tmp_path):
    rknn = _rknn(quant_setup["model"], "rk3588", quantized_algorithm="mmse")
    assert rknn.build(do_quantization=True, dataset=str(quant_setup["dataset"])) == 0
    before = _outputs(rknn, quant_setup["eval"])
    path = tmp_path / "m.rknn"
    assert rknn.export_rknn(str(path)) == 0
    loaded = RKNN()
    assert loaded.load_rknn(str(path)) == 0
    assert loaded._model.quant_params == rknn._model.quant_params
    after = _outputs(loaded, quant_setup["eval"])
    for a, b in zip(before, after):
        np.testing.assert_array_equal(a, b)


def test_info_shows_quant_params(quant_setup, tmp_path):
    rknn = _rknn(quant_setup["model"], "rk3588")
    assert rknn.build(do_quantization=True, dataset=str(quant_setup["dataset"])) == 0
    path = tmp_path / "m.rknn"
    assert rknn.export_rknn(str(path)) == 0
    from openrknn.cli.info import describe_model
    text = describe_model(str(path))
    assert "quantization parameters" in text and "zero_point" in text and "int8" in text


def test_dtype_platform_mismatch(quant_setup):
    rknn = RKNN()
    assert rknn.config(target_platform="rk3588", quantized_dtype="w16a16i") == -1
    rknn = RKNN()
    assert rknn.config(target_platform="rk3566", quantized_dtype="w4a16") == -1
    rknn = RKNN()
    assert rknn.config(target_platform="rk3588", quantized_dtype="w8a8", quantized_method="group64") == -1


def test_settings_validate_rejects():
    from openrknn.chips import get_chip
    from openrknn.errors import ConfigError, NotSupportedError
    from openrknn.quant import QuantSettings
    with pytest.raises(ConfigError, match="not supported on rk3588"):
        QuantSettings(dtype="w8a16").validate(get_chip("rk3588"))
    with pytest.raises(NotSupportedError):
        QuantSettings(dtype="w4a8").validate(get_chip("rk3576"))
    assert QuantSettings(dtype="asymmetric_quantized-8").validate(get_chip("rk3588")).canonical == "w8a8"
    assert QuantSettings(batch_size=3, epochs=2, toolkit=1).sample_count(10) == 6
    assert QuantSettings().sample_count(10) == 10


def test_accuracy_analysis_runs_on_quantized(quant_setup, tmp_path):
    rknn = _rknn(quant_setup["model"], "rk3588")
    assert rknn.build(do_quantization=True, dataset=str(quant_setup["dataset"])) == 0
    sample = np.ascontiguousarray(quant_setup["eval"][0][None])
    assert rknn.accuracy_analysis(inputs=[sample], output_dir=str(tmp_path / "snap")) == 0
    assert any((tmp_path / "snap").iterdir())


def test_data_movement_before_float_layers_stays_float16(tmp_path):
    """Conv → Slice → Softmax: the slice only moves values to a float16 layer, so neither it nor the
    Conv requantizes to int8 (the Conv writes float16, as an output layer does). (The float16 layer
    was a Pow by 2, which rknn-toolkit2 runs in int8: ``npu_layers.integer_power``.)"""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(0)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv"),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("Conv", ["r", "w2"], ["c2"], name="conv2"),
             helper.make_node("Slice", ["c2", "starts", "ends", "axes"], ["s"], name="slice"),
             helper.make_node("Softmax", ["s"], ["y"], name="softmax", axis=1)]
    inits = [numpy_helper.from_array(rng.normal(0, 0.5, (8, 3, 1, 1)).astype(np.float32), "w"),
             numpy_helper.from_array(rng.normal(0, 0.5, (8, 8, 1, 1)).astype(np.float32), "w2"),
             numpy_helper.from_array(np.array([0], np.int64), "starts"),
             numpy_helper.from_array(np.array([4], np.int64), "ends"),
             numpy_helper.from_array(np.array([1], np.int64), "axes"),
             numpy_helper.from_array(np.array(2.0, np.float32), "two")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), tmp_path / "m.onnx")
    for i in range(3):
        np.save(tmp_path / f"s{i}.npy", rng.normal(size=(1, 3, 8, 8)).astype(np.float32))
    (tmp_path / "dataset.txt").write_text("s0.npy\ns1.npy\ns2.npy\n")
    rknn = RKNN()
    assert rknn.config(target_platform="rk3588") == 0
    assert rknn.load_onnx(model=str(tmp_path / "m.onnx")) == 0
    assert rknn.build(do_quantization=True, dataset=str(tmp_path / "dataset.txt")) == 0
    dtypes = rknn._model.tensor_dtypes
    assert dtypes["r"] == "int8" and "w2" in rknn._model.quant_params       # conv2 still computes in int8
    assert dtypes["c2"] == "float16" and dtypes["s"] == "float16"


def test_scores_beyond_float16_range_stay_integer(tmp_path):
    """q·kᵀ → Softmax with calibrated scores of ~1e5 (past float16's 65504): the MatMul, read only by
    the float16 Softmax, would store float16 and overflow to inf (a NaN Softmax); it keeps int8."""
    import onnx
    from onnx import TensorProto, helper
    rng = np.random.default_rng(0)
    nodes = [helper.make_node("Transpose", ["x"], ["kt"], perm=[0, 2, 1], name="kt"),
             helper.make_node("MatMul", ["x", "kt"], ["scores"], name="scores"),
             helper.make_node("Softmax", ["scores"], ["y"], axis=-1, name="softmax")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 8])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), tmp_path / "m.onnx")
    samples = [rng.normal(0, 100, (1, 8, 16)).astype(np.float32) for _ in range(4)]
    for i, sample in enumerate(samples[:3]):
        np.save(tmp_path / f"s{i}.npy", sample)
    (tmp_path / "dataset.txt").write_text("s0.npy\ns1.npy\ns2.npy\n")
    rknn = RKNN()
    assert rknn.config(target_platform="rk3588") == 0
    assert rknn.load_onnx(model=str(tmp_path / "m.onnx")) == 0
    assert rknn.build(do_quantization=True, dataset=str(tmp_path / "dataset.txt")) == 0
    assert rknn._model.tensor_dtypes["scores"] == "int8"
    assert rknn.init_runtime() == 0
    got = rknn.inference(inputs=[samples[3]])[0]
    scores = samples[3] @ samples[3].transpose(0, 2, 1)
    expected = np.exp(scores - scores.max(-1, keepdims=True))
    expected /= expected.sum(-1, keepdims=True)
    assert np.isfinite(got).all()
    assert cosine(got, expected) > 0.99
