"""``config(weight_qtype='asymmetric_quantized')``: w8a8 weights with a zero point per channel, as
rknn-toolkit2 2.5.0 stores them (measured on its simulator with bench/vendor_layers.py).

The integer layers stay bit-exact against the numpy reference (the worst-case patterns of
test_integer_exactness.py, with the weights' zero points subtracted), the weights use the
asymmetric grid, and the options that cannot take such weights refuse them with the reason.
"""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper, numpy_helper

from rknn.api import RKNN
from tests.helpers import make_conv_model, quantized_build
from tests.quant import integer_patterns as patterns
from tests.quant import integer_reference as ref

ASYMMETRIC = {"weight_qtype": "asymmetric_quantized"}
SIZE = patterns.SIZE


def _build(tmp_path, nodes, inits, channels, out_c, seed=0, platform="rk3588"):
    return patterns.build_with_tail(tmp_path, nodes, inits, channels, out_c, seed, platform, **ASYMMETRIC)


def _zero_points(params, axis, ndim):
    shape = [1] * ndim
    shape[axis] = -1
    return params.zero_point.astype(np.int64).reshape(shape)


@pytest.mark.parametrize("channels,kernel,group", [(16, 3, 1), (512, 3, 1), (64, 3, 64)])
def test_conv_with_weight_zero_points_is_bit_exact(tmp_path, channels, kernel, group):
    rng = np.random.default_rng(channels + group)
    out_c = channels if group == channels else 32
    pads = [kernel // 2] * 4
    w = numpy_helper.from_array(rng.normal(0.1, 0.3, (out_c, channels // group, kernel, kernel)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.normal(0, 0.1, out_c).astype(np.float32), "b")
    # rk3588 runs a Conv this deep over input-channel tiles (graph/passes/wide_convs.py); the one deep
    # integer sum is checked where it stays one layer
    deep = channels * kernel * kernel // group > 3072
    model = _build(tmp_path, [helper.make_node("Conv", ["x", "w", "b"], ["t"], name="layer", pads=pads, group=group)],
                   [w, b], channels, out_c, platform="rk3562" if deep else "rk3588")
    pw = patterns.params(model, "w")
    assert pw.qtype == "asymmetric_quantized" and np.any(pw.zero_point != 0)
    weight = patterns.worst_case_weight(model, "w", channels)
    bias = numpy_helper.to_array(next(i for i in model.graph.graph.initializer if i.name == "b")).astype(np.int64)
    x, xq = patterns.extreme_input(model, channels, SIZE, channels)
    px = patterns.params(model, "x")
    acc = ref.conv_acc(xq, weight - _zero_points(pw, 0, 4), pads=pads, group=group) + bias.reshape(1, -1, 1, 1)
    patterns.spread_output(model, "t", acc, px.scale[0], pw.scale)
    expected = ref.requantize(acc, px.scale[0], pw.scale, patterns.params(model, "t"), channel_axis=1)
    assert len(np.unique(expected)) > 20
    np.testing.assert_array_equal(patterns.run_integers(model, x, ["t"])["t"], expected)


@pytest.mark.parametrize("channels,kernel", [(16, 2), (512, 4)])
def test_conv_transpose_with_weight_zero_points_is_bit_exact(tmp_path, channels, kernel):
    rng = np.random.default_rng(channels)
    pads = [kernel // 2 - 1 if kernel > 2 else 0] * 4
    w = numpy_helper.from_array(rng.normal(0.1, 0.3, (channels, 8, kernel, kernel)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.normal(0, 0.1, 8).astype(np.float32), "b")
    model = _build(tmp_path, [helper.make_node("ConvTranspose", ["x", "w", "b"], ["t"], name="layer",
                                               strides=[2, 2], pads=pads)], [w, b], channels, 8)
    pw = patterns.params(model, "w")
    assert np.any(pw.zero_point != 0)
    weight = patterns.worst_case_weight(model, "w", channels)
    bias = numpy_helper.to_array(next(i for i in model.graph.graph.initializer if i.name == "b")).astype(np.int64)
    x, xq = patterns.extreme_input(model, channels, SIZE, channels)
    px = patterns.params(model, "x")
    centred = weight - _zero_points(pw, model.quant_params["w"]["axis"], 4)
    acc = ref.conv_transpose_acc(xq, centred, strides=(2, 2), pads=pads) + bias.reshape(1, -1, 1, 1)
    patterns.spread_output(model, "t", acc, px.scale[0], pw.scale)
    expected = ref.requantize(acc, px.scale[0], pw.scale, patterns.params(model, "t"), channel_axis=1)
    np.testing.assert_array_equal(patterns.run_integers(model, x, ["t"])["t"], expected)


def test_weights_use_the_asymmetric_grid(tmp_path):
    """Each output channel's range is [min(w, 0), max(w, 0)] over 255 steps, zero point from it."""
    rng = np.random.default_rng(1)
    samples = [rng.uniform(0, 1, (1, 3, 16, 16)).astype(np.float32) for _ in range(3)]
    rknn = quantized_build(make_conv_model(tmp_path / "m.onnx"), samples, **ASYMMETRIC)
    model = rknn._model
    record = next(r for n, r in model.quant_params.items() if r.get("axis") is not None and r["dtype"] == "int8")
    lo, hi = np.minimum(np.asarray(record["min"]), 0), np.maximum(np.asarray(record["max"]), 0)
    np.testing.assert_allclose(record["scale"], (hi - lo) / 255, rtol=1e-6)
    np.testing.assert_array_equal(record["zero_point"], np.round(-128 - lo / ((hi - lo) / 255)))


def test_export_tflite_refuses_asymmetric_weights(tmp_path, capsys):
    pytest.importorskip("flatbuffers")
    rng = np.random.default_rng(1)
    samples = [rng.uniform(0, 1, (1, 3, 16, 16)).astype(np.float32) for _ in range(3)]
    rknn = quantized_build(make_conv_model(tmp_path / "m.onnx"), samples, **ASYMMETRIC)
    assert rknn.export_tflite(str(tmp_path / "m.tflite")) == -1
    assert "symmetric int8 weights" in capsys.readouterr().out
    assert not (tmp_path / "m.tflite").exists()


@pytest.mark.parametrize("kwargs,message", [
    ({"weight_qtype": "sym"}, "weight_qtype='sym' is not valid"),
    ({"weight_qtype": "asymmetric_quantized", "target_platform": "rk1808"}, "for quantized_dtype 'w8a8' only")])
def test_bad_weight_qtype_is_refused(kwargs, message, capsys):
    assert RKNN().config(**{"target_platform": "rk3588", **kwargs}) == -1
    assert message in capsys.readouterr().out


def test_hybrid_step2_keeps_asymmetric_weights(tmp_path, monkeypatch):
    """The step-1 files carry the option: step 2 rebuilds with the same weight grid."""
    rng = np.random.default_rng(2)
    samples = [rng.uniform(0, 1, (1, 3, 16, 16)).astype(np.float32) for _ in range(3)]
    rknn = quantized_build(make_conv_model(tmp_path / "m.onnx"), samples, **ASYMMETRIC)
    monkeypatch.chdir(tmp_path)
    step1 = RKNN()
    assert step1.config(target_platform="rk3588", **ASYMMETRIC) == 0
    assert step1.load_onnx(model="m.onnx") == 0
    assert step1.hybrid_quantization_step1(dataset="ds.txt") == 0
    step2 = RKNN()
    assert step2.hybrid_quantization_step2("m.model", "m.data", "m.quantization.cfg") == 0
    weights = {n: r for n, r in step2._model.quant_params.items() if r.get("axis") is not None and r["dtype"] == "int8"}
    assert weights and all(r["qtype"] == "asymmetric_quantized" for r in weights.values())
    assert weights == {n: r for n, r in rknn._model.quant_params.items() if n in weights}


def test_cli_convert_takes_weight_qtype(tmp_path, capsys):
    """``openrknn convert --weight-qtype asymmetric_quantized`` reaches the build (a TFLite export then refuses it)."""
    pytest.importorskip("flatbuffers")
    from openrknn.cli.main import main
    model = make_conv_model(tmp_path / "m.onnx")
    rng = np.random.default_rng(0)
    for i in range(3):
        np.save(tmp_path / f"s{i}.npy", rng.uniform(0, 1, (1, 3, 16, 16)).astype(np.float32))
    (tmp_path / "ds.txt").write_text("s0.npy\ns1.npy\ns2.npy\n")
    assert main(["convert", str(model), "-t", "rk3588", "--dataset", str(tmp_path / "ds.txt"), "--format", "tflite",
                 "--weight-qtype", "asymmetric_quantized", "-o", str(tmp_path / "m.tflite")]) == 1
    assert "symmetric int8 weights" in capsys.readouterr().out
