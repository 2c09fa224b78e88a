"""A fully int8-quantized TFLite model keeps its scales and zero points (QDQ graph + quant_params)."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

pytest.importorskip("tflite")
litert = pytest.importorskip("ai_edge_litert.interpreter")

from openrknn.frontends.tflite import load_tflite  # noqa: E402
from tflite_writer import ModelWriter, options  # noqa: E402
from tests.helpers import reference_session

RNG = np.random.default_rng(3)
S_IN, Z_IN, S_OUT, Z_OUT = 0.02, -3, 0.05, -128
S_W = np.array([0.004, 0.006, 0.005, 0.003], np.float32)


def int8_model(path, input_dtype=np.float32):
    """x(float) → QUANTIZE → CONV_2D int8 (per-channel weights, relu) → AVERAGE_POOL_2D → DEQUANTIZE."""
    w = ModelWriter()
    x = w.tensor("x", [1, 8, 8, 3])
    xq = w.tensor("x_int8", [1, 8, 8, 3], np.int8, quant=(S_IN, Z_IN, 0))
    weights = RNG.integers(-127, 128, [4, 3, 3, 3]).astype(np.int8)
    wt = w.tensor("conv/weights", [4, 3, 3, 3], np.int8, weights, quant=(S_W, np.zeros(4), 0))
    bias = w.tensor("conv/bias", [4], np.int32, RNG.integers(-500, 500, 4).astype(np.int32),
                    quant=(S_W * S_IN, np.zeros(4), 0))
    c = w.tensor("conv", [1, 8, 8, 4], np.int8, quant=(S_OUT, Z_OUT, 0))
    p = w.tensor("pool", [1, 4, 4, 4], np.int8, quant=(S_OUT, Z_OUT, 0))
    y = w.tensor("y", [1, 4, 4, 4])
    w.op("QUANTIZE", [x], [xq])
    w.op("CONV_2D", [xq, wt, bias], [c], options("Conv2DOptions", padding=0, strideW=1, strideH=1,
                                                  dilationWFactor=1, dilationHFactor=1, fusedActivationFunction=1),
         version=3)
    w.op("AVERAGE_POOL_2D", [c], [p], options("Pool2DOptions", padding=1, strideW=2, strideH=2, filterWidth=2,
                                              filterHeight=2), version=2)
    w.op("DEQUANTIZE", [p], [y], version=2)
    return w.save(path, [x], [y])


def _litert(path, x, resolver=None):
    """LiteRT's output and every int8 tensor (by name); XNNPACK runs the int8 kernels by default."""
    kwargs = {"experimental_preserve_all_tensors": True}
    if resolver is not None:
        kwargs["experimental_op_resolver_type"] = resolver
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # preserve_all_tensors is a debugging option: it says so
        interp = litert.Interpreter(model_path=str(path), **kwargs)
    interp.allocate_tensors()
    interp.set_tensor(interp.get_input_details()[0]["index"], x)
    interp.invoke()
    tensors = {t["name"]: interp.get_tensor(t["index"]) for t in interp.get_tensor_details()}
    return interp.get_tensor(interp.get_output_details()[0]["index"]), tensors


def test_int8_model_keeps_quantization(tmp_path):
    """The imported QDQ graph means what the TFLite model means: run as written (float dequantize →
    op → quantize; the simulator's sessions keep onnxruntime from fusing it into integer kernels),
    it is within one output step of LiteRT."""
    path = int8_model(tmp_path / "q.tflite")
    x = RNG.uniform(-2, 2, [1, 8, 8, 3]).astype(np.float32)
    ref, _ = _litert(path, x)

    source = load_tflite(str(path))
    params = source.quant_params
    assert params["conv"] == {"scale": [pytest.approx(S_OUT)], "zero_point": [Z_OUT], "axis": None, "dtype": "int8"}
    assert params["x_int8"]["zero_point"] == [Z_IN]
    weight = next(k for k in params if k.startswith("conv/weights"))
    assert params[weight]["axis"] == 0 and params[weight]["scale"] == pytest.approx(list(S_W))
    ops = [n.op_type for n in source.model.graph.node]
    assert ops.count("QuantizeLinear") == 3 and "Conv" in ops
    out = reference_session(source.model.SerializeToString()).run(None, {"x": x})[0]
    assert np.abs(out - ref).max() <= S_OUT * 1.01


def _sim_integers(rknn, x, tensors):
    """The simulator's integer values of ``tensors`` (int8 held as uint8 + 128), NHWC."""
    from onnx import helper
    from openrknn.sim.quantized import lower_quantized
    from openrknn.graph.runner import make_session
    lowered = lower_quantized(rknn._model)
    for name in tensors:
        lowered.graph.output.append(helper.make_empty_tensor_value_info(f"{name}__q"))
    session = make_session(lowered)
    feed = {lowered.graph.input[0].name: x}   # the graph keeps the TFLite model's NHWC input
    values = dict(zip([o.name for o in session.get_outputs()], session.run(None, feed)))
    return {name: values[f"{name}__q"].astype(np.int64).transpose(0, 2, 3, 1) - 128 for name in tensors}


def test_int8_model_runs_bit_exact_with_litert(tmp_path):
    """Imported as quantized, the int8 Conv gives LiteRT's integers bit for bit (XNNPACK requantizes
    in float32 as we do); AVERAGE_POOL_2D differs by one step exactly where the window average is a
    half (TFLite rounds halves away from zero, our pooling layer half to even), nowhere else."""
    from rknn.api import RKNN
    path = int8_model(tmp_path / "q.tflite")
    rknn = RKNN()
    assert rknn.config(target_platform="rk3588") == 0
    assert rknn.load_tflite(str(path)) == 0
    assert rknn.build(do_quantization=False) == 0
    assert rknn.init_runtime() == 0
    rng = np.random.default_rng(11)
    ties = 0
    for _ in range(10):
        x = rng.uniform(-2.5, 2.5, [1, 8, 8, 3]).astype(np.float32)
        ref, tensors = _litert(path, x)
        ours = _sim_integers(rknn, x, ["conv_pre_act", "pool"])
        np.testing.assert_array_equal(np.maximum(ours["conv_pre_act"], Z_OUT), tensors["conv"].astype(np.int64))
        conv = tensors["conv"].astype(np.int64) - Z_OUT
        window_sum = conv[:, 0::2, 0::2] + conv[:, 1::2, 0::2] + conv[:, 0::2, 1::2] + conv[:, 1::2, 1::2]
        differs = ours["pool"] != tensors["pool"]
        assert (np.abs(ours["pool"] - tensors["pool"]) <= 1).all()
        assert (window_sum[differs] % 4 == 2).all(), "a pooling difference that is not a half-way tie"
        ties += int(differs.sum())
        out = rknn.inference(inputs=[x])[0]
        assert np.abs(out - ref).max() <= S_OUT * 1.01
    assert ties > 0   # the rule was exercised


def test_int8_conv_chain_matches_litert_reference_kernels_within_one_step(tmp_path):
    """TFLite's built-in reference kernels requantize in fixed point (a 31-bit multiplier and a
    rounding shift, two roundings) instead of float32: one step at most, on rounding boundaries."""
    from rknn.api import RKNN
    path = int8_model(tmp_path / "q.tflite")
    rknn = RKNN()
    assert rknn.config(target_platform="rk3588") == 0
    assert rknn.load_tflite(str(path)) == 0
    assert rknn.build(do_quantization=False) == 0
    x = np.random.default_rng(12).uniform(-2.5, 2.5, [1, 8, 8, 3]).astype(np.float32)
    _, tensors = _litert(path, x, litert.OpResolverType.BUILTIN_REF)
    ours = _sim_integers(rknn, x, ["conv_pre_act"])
    assert np.abs(np.maximum(ours["conv_pre_act"], Z_OUT) - tensors["conv"].astype(np.int64)).max() <= 1


def test_weight_only_quantized_model_loads_as_float(tmp_path):
    w = ModelWriter()
    x, y = w.tensor("x", [2, 16]), w.tensor("y", [2, 8])
    weights = RNG.integers(-127, 128, [8, 16]).astype(np.int8)
    wt = w.tensor("fc/weights", [8, 16], np.int8, weights, quant=(0.01, 0, 0))
    w.op("FULLY_CONNECTED", [x, wt, -1], [y], options("FullyConnectedOptions"))
    source = load_tflite(str(w.save(tmp_path / "hybrid.tflite", [x], [y])))
    assert not source.quant_params
    assert {n.op_type for n in source.model.graph.node} == {"Gemm"}
    feed = RNG.uniform(-1, 1, [2, 16]).astype(np.float32)
    out = reference_session(source.model.SerializeToString()).run(None, {"x": feed})[0]
    np.testing.assert_allclose(out, feed @ (weights.astype(np.float32) * 0.01).T, rtol=1e-5, atol=1e-6)
