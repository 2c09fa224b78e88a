"""A fully int8-quantized TFLite model keeps its scales and zero points (QDQ graph + quant_params)."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("tflite")
litert = pytest.importorskip("ai_edge_litert.interpreter")

from openrknn.frontends.tflite import load_tflite  # noqa: E402
from tflite_writer import ModelWriter, options  # noqa: E402
from tests.conftest import reference_session

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


def test_int8_model_keeps_quantization(tmp_path):
    path = int8_model(tmp_path / "q.tflite")
    x = RNG.uniform(-2, 2, [1, 8, 8, 3]).astype(np.float32)
    interp = litert.Interpreter(model_path=str(path))
    interp.allocate_tensors()
    interp.set_tensor(interp.get_input_details()[0]["index"], x)
    interp.invoke()
    ref = interp.get_tensor(interp.get_output_details()[0]["index"])

    source = load_tflite(str(path))
    params = source.quant_params
    assert params["conv"] == {"scale": [pytest.approx(S_OUT)], "zero_point": [Z_OUT], "axis": None, "dtype": "int8"}
    assert params["x_int8"]["zero_point"] == [Z_IN]
    weight = next(k for k in params if k.startswith("conv/weights"))
    assert params[weight]["axis"] == 0 and params[weight]["scale"] == pytest.approx(list(S_W))
    ops = [n.op_type for n in source.model.graph.node]
    assert ops.count("QuantizeLinear") == 3 and "Conv" in ops
    out = reference_session(source.model.SerializeToString()).run(None, {"x": x})[0]
    # integer kernels round the accumulator differently: allow one output step
    assert np.abs(out - ref).max() <= S_OUT * 1.01


def test_int8_model_builds_with_imported_parameters(tmp_path):
    quant = pytest.importorskip("openrknn.quant")
    if not hasattr(quant, "import_quantized"):
        pytest.skip("openrknn.quant has no import_quantized yet")
    from rknn.api import RKNN

    path = int8_model(tmp_path / "q.tflite")
    rknn = RKNN()
    assert rknn.config(target_platform="rk3588") == 0
    assert rknn.load_tflite(str(path)) == 0
    assert rknn.build(do_quantization=False) == 0
    assert rknn.init_runtime() == 0
    x = RNG.uniform(-2, 2, [1, 8, 8, 3]).astype(np.float32)
    out = rknn.inference(inputs=[x])[0]
    ref = reference_session(load_tflite(str(path)).model.SerializeToString()).run(None, {"x": x})[0]
    assert out.shape == (1, 4, 4, 4)
    assert np.abs(out - ref).max() <= 2 * S_OUT


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
