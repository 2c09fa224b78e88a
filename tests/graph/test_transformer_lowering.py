"""Transformer blocks as rknn-toolkit2 2.5.0 lowers them (oracle corpus: its transformer encoder and
PP-OCRv4 rec's SVTR blocks): a projection ``MatMul(x, W) → Add(b) → Add(residual)`` is one
``ConvAdd`` layer, and an ONNX ``LayerNormalization`` is an ``exNorm`` layer that reads and stores
int8 (float inside), not a float16 layer."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from openrknn.chips import get_chip
from openrknn.graph import npu_layers
from openrknn.profile import estimate_perf
from tests.helpers import cosine, quantized_build, reference_session

T, D = 6, 16


def encoder_block(path: Path) -> Path:
    """x → MatMul(W1) + b1 → Relu → MatMul(W2) + b2 → Add(x) → LayerNormalization → y (opset 17)."""
    rng = np.random.default_rng(0)
    arrays = {"w1": rng.normal(0, 0.3, (D, D)), "b1": rng.normal(0, 0.1, D), "w2": rng.normal(0, 0.3, (D, D)),
              "b2": rng.normal(0, 0.1, D), "gamma": rng.uniform(0.5, 1.5, D), "beta": rng.normal(0, 0.1, D)}
    inits = [numpy_helper.from_array(np.asarray(v, np.float32), k) for k, v in arrays.items()]
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["m1"], name="fc1"),
             helper.make_node("Add", ["b1", "m1"], ["a1"], name="fc1_bias"),   # bias first, as torch exports it
             helper.make_node("Relu", ["a1"], ["r1"], name="relu"),
             helper.make_node("MatMul", ["r1", "w2"], ["m2"], name="fc2"),
             helper.make_node("Add", ["m2", "b2"], ["a2"], name="fc2_bias"),
             helper.make_node("Add", ["x", "a2"], ["res"], name="residual"),
             helper.make_node("LayerNormalization", ["res", "gamma", "beta"], ["y"], name="norm", axis=-1)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, T, D])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, T, D])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def _samples(count=4):
    rng = np.random.default_rng(1)
    return [rng.normal(0, 1, (1, T, D)).astype(np.float32) for _ in range(count)]


def _built(tmp_path):
    path = encoder_block(tmp_path / "m.onnx")
    return path, quantized_build(path, _samples())


def test_projection_with_bias_and_residual_is_one_convadd_layer(tmp_path):
    _, rknn = _built(tmp_path)
    records = {r.name: r for r in npu_layers.model_records(rknn._model)}
    fc2 = records["fc2"]
    assert fc2.op_name == "ConvAdd" and fc2.kind == "conv+add"
    assert fc2.nodes == ("fc2", "fc2_bias", "residual") and fc2.stored == ("res",)
    assert records["fc1"].op_name == "ConvRelu"   # bias then activation: no residual
    assert "a2" not in rknn._model.tensor_dtypes or "a2" not in rknn._model.quant_params   # never stored


def test_layer_normalization_is_an_int8_exnorm_layer(tmp_path):
    path, rknn = _built(tmp_path)
    norm = next(r for r in npu_layers.model_records(rknn._model) if r.name == "norm")
    assert (norm.op_name, norm.kind, norm.dtype) == ("exNorm", "function", "int8")
    assert rknn._model.tensor_dtypes["y"] == "int8" and rknn._model.tensor_dtypes["res"] == "int8"
    rows = [(row.op_type, row.data_type.upper()) for row in estimate_perf(rknn._model, get_chip("rk3588")).layers]
    assert rows[1:] == [("ConvRelu", "INT8"), ("ConvAdd", "INT8"), ("exNorm", "INT8"), ("OutputOperator", "INT8")]
    # int8 in and out, float inside: the simulator stays close to float
    x = _samples(5)[4]
    expected = reference_session(path).run(None, {"x": x})[0]
    assert rknn.init_runtime() == 0
    assert cosine(rknn.inference(inputs=[x])[0], expected) > 0.999
