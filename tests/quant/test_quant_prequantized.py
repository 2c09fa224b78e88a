"""Pre-quantized ONNX (QDQ and QOperator) models keep their own scales and zero points."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import numpy_helper

from openrknn.quant import is_prequantized
from rknn.api import RKNN
from tests.conftest import cosine, make_conv_model


def _quantize(tmp_path, quant_format, op_types=None):
    quantization = pytest.importorskip("onnxruntime.quantization")
    float_path = make_conv_model(tmp_path / "float.onnx")
    rng = np.random.default_rng(0)
    samples = [{"x": rng.uniform(-1, 1, (1, 3, 16, 16)).astype(np.float32)} for _ in range(8)]

    class Reader(quantization.CalibrationDataReader):
        def __init__(self):
            self.items = iter(samples)

        def get_next(self):
            return next(self.items, None)

    out = tmp_path / f"q_{quant_format}.onnx"
    quantization.quantize_static(str(float_path), str(out), Reader(), quant_format=quant_format,
                                 activation_type=quantization.QuantType.QInt8,
                                 weight_type=quantization.QuantType.QInt8, per_channel=True,
                                 op_types_to_quantize=op_types)
    return out


def test_prequantized_qdq_import_keeps_params(tmp_path):
    quantization = pytest.importorskip("onnxruntime.quantization")
    path = _quantize(tmp_path, quantization.QuantFormat.QDQ)
    source = onnx.load(path)
    assert is_prequantized(source)
    rknn = RKNN()
    assert rknn.config(target_platform="rk3588") == 0
    assert rknn.load_onnx(model=str(path)) == 0
    assert rknn.build(do_quantization=False) == 0
    model = rknn._model
    assert model.is_quantized
    inits = {i.name: numpy_helper.to_array(i) for i in source.graph.initializer}
    source_scales = {float(v) for name, v in inits.items() if name.endswith("_scale") for v in np.ravel(v)}
    kept = {s for p in model.quant_params.values() if p["dtype"] != "int32" for s in p["scale"]}
    assert kept and kept <= {float(np.float32(s)) for s in source_scales} | source_scales
    x = np.random.default_rng(5).uniform(-1, 1, (1, 3, 16, 16)).astype(np.float32)
    expected = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert rknn.init_runtime() == 0
    got = rknn.inference(inputs=[x], data_format="nchw")[0]
    assert cosine(got, expected) >= 0.999


def test_qoperator_convs_become_qdq(tmp_path):
    """QLinearConv / QLinearMatMul are rewritten to QDQ form before import (the loader's supported-op
    check still refuses QOperator models; this exercises the import itself)."""
    quantization = pytest.importorskip("onnxruntime.quantization")
    from openrknn.graph.rknn_model import RKNNModel, TensorSpec
    from openrknn.quant import import_quantized
    from openrknn.sim.quantized import lower_quantized
    graph = onnx.shape_inference.infer_shapes(onnx.load(_quantize(tmp_path, quantization.QuantFormat.QOperator,
                                                                            ["Conv"])))
    if any(n.domain not in ("", "ai.onnx") or n.op_type == "QGemm"
           or (n.op_type.startswith("QLinear") and n.op_type not in ("QLinearConv", "QLinearMatMul"))
           for n in graph.graph.node):
        pytest.skip("onnxruntime wrote QOperator ops beyond QLinearConv/QLinearMatMul for this model")
    model = import_quantized(RKNNModel(graph=graph, inputs=[TensorSpec("x", [1, 3, 16, 16])],
                                       outputs=[TensorSpec("prob", [1, 5])], quantized_dtype=None))
    assert not any(n.op_type == "QLinearConv" for n in model.graph.graph.node)
    assert any(p["dtype"] == "int8" for p in model.quant_params.values())
    lowered = lower_quantized(model)
    x = np.random.default_rng(5).uniform(-1, 1, (1, 3, 16, 16)).astype(np.float32)
    got = ort.InferenceSession(lowered.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    expected = ort.InferenceSession(graph.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert cosine(got, expected) >= 0.999
