"""Pre-quantized ONNX (QDQ and QOperator) models keep their own scales and zero points."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from openrknn.quant import is_prequantized
from rknn.api import RKNN
from tests.helpers import cosine, make_conv_model, reference_session


def _quantize(tmp_path, quant_format, op_types=None):
    quantization = pytest.importorskip("onnxruntime.quantization")
    float_path = make_conv_model(tmp_path / "float.onnx")
    # onnxruntime's quantizer opens the file itself: stamp an IR version every supported release knows
    model = onnx.load(float_path)
    model.ir_version = min(model.ir_version, 8)
    onnx.save(model, float_path)
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
    expected = reference_session(str(path)).run(None, {"x": x})[0]
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
    got = reference_session(lowered.SerializeToString()).run(None, {"x": x})[0]
    expected = reference_session(graph.SerializeToString()).run(None, {"x": x})[0]
    assert cosine(got, expected) >= 0.999


def test_integer_model_input_and_output_are_imported(tmp_path):
    """uint8 input → DequantizeLinear … QuantizeLinear → uint8 output: the input is fed as uint8, the
    output comes back dequantized, bit-exact with onnxruntime on the source model."""
    from onnx import TensorProto, helper
    rng = np.random.default_rng(0)
    nodes = [helper.make_node("DequantizeLinear", ["x", "xs", "xz"], ["xf"]),
             helper.make_node("DequantizeLinear", ["w", "ws", "wz"], ["wf"]),
             helper.make_node("Conv", ["xf", "wf"], ["c"]),
             helper.make_node("QuantizeLinear", ["c", "ys", "yz"], ["y"])]
    inits = [numpy_helper.from_array(rng.integers(-100, 100, (4, 3, 1, 1)).astype(np.int8), "w"),
             numpy_helper.from_array(np.float32(0.01), "ws"), numpy_helper.from_array(np.int8(0), "wz"),
             numpy_helper.from_array(np.float32(0.02), "xs"), numpy_helper.from_array(np.uint8(128), "xz"),
             numpy_helper.from_array(np.float32(0.05), "ys"), numpy_helper.from_array(np.uint8(128), "yz")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.UINT8, [1, 3, 4, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.UINT8, [1, 4, 4, 4])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), tmp_path / "q.onnx")
    rknn = RKNN()
    assert rknn.config(target_platform="rk3588") == 0
    assert rknn.load_onnx(model=str(tmp_path / "q.onnx")) == 0
    assert rknn.build(do_quantization=False) == 0
    assert rknn._model.outputs[0].dtype == "float32" and rknn._model.inputs[0].dtype == "uint8"
    assert rknn.init_runtime() == 0
    x = rng.integers(0, 256, (1, 3, 4, 4)).astype(np.uint8)
    got = rknn.inference(inputs=[x], data_format="nchw")[0]
    source = reference_session(str(tmp_path / "q.onnx")).run(None, {"x": x})[0]
    np.testing.assert_array_equal(got, (source.astype(np.float32) - 128) * np.float32(0.05))
