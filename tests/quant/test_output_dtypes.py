"""Graph outputs in the dtype rknn-toolkit2 2.5.0 stores them: int8 after an integer layer
(``OutputOperator INT8`` on every CNN of the oracle corpus, yolov5's decode tail included), float16
after a float16 layer (Softmax → Reshape: ``OutputOperator FLOAT16``, PP-OCR cls)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from openrknn.chips import get_chip
from openrknn.graph import npu_layers
from openrknn.profile import estimate_perf
from tests.helpers import cosine, quantized_build


def _save(path: Path, nodes, inits, out_shape) -> Path:
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)
    return path


def _samples(count=3):
    rng = np.random.default_rng(1)
    return [rng.uniform(0, 1, (1, 3, 8, 8)).astype(np.float32) for _ in range(count)]


def _rows(rknn):
    return [(row.op_type, row.data_type.upper()) for row in estimate_perf(rknn._model, get_chip("rk3588")).layers]


def test_conv_sigmoid_output_is_int8_as_the_vendor_stores_it(tmp_path):
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.normal(0, 0.5, (4, 3, 3, 3)).astype(np.float32), "w")]
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Sigmoid", ["c"], ["y"])]
    path = _save(tmp_path / "m.onnx", nodes, inits, [1, 4, 8, 8])
    rknn = quantized_build(path, _samples())
    assert rknn._model.tensor_dtypes["y"] == "int8"
    records = npu_layers.model_records(rknn._model)
    assert [(r.op_name, r.dtype) for r in records if r.kind != "alias"][-1] == ("ConvSigmoid", "int8")
    assert _rows(rknn)[-1] == ("OutputOperator", "INT8")
    # the simulator returns the int8 the NPU stores, dequantized: close to float
    from tests.helpers import reference_session
    x = _samples(1)[0]
    expected = reference_session(path).run(None, {"x": x})[0]
    assert rknn.init_runtime() == 0
    got = rknn.inference(inputs=[x], data_format="nchw")[0]
    steps = np.unique(np.round(got.ravel() / rknn._model.quant_params["y"]["scale"][0], 3))
    assert np.allclose(steps, np.round(steps)), "the output is not on the int8 grid"
    assert cosine(got, expected) > 0.999


def test_output_after_softmax_stays_float16(tmp_path):
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.normal(0, 0.5, (4, 3, 8, 8)).astype(np.float32), "w"),
             numpy_helper.from_array(np.array([1, 4], np.int64), "flat"),
             numpy_helper.from_array(np.array([1, 2, 2], np.int64), "back")]
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"]),
             helper.make_node("Reshape", ["c", "flat"], ["f"]),
             helper.make_node("Softmax", ["f"], ["p"], axis=1),
             helper.make_node("Reshape", ["p", "back"], ["y"])]
    rknn = quantized_build(_save(tmp_path / "m.onnx", nodes, inits, [1, 2, 2]), _samples())
    assert rknn._model.tensor_dtypes["p"] == "float16" and rknn._model.tensor_dtypes["y"] == "float16"
    assert _rows(rknn)[-1] == ("OutputOperator", "FLOAT16")


def test_lopsided_concat_on_the_output_is_int8_and_warned(tmp_path, capsys):
    """The stock ultralytics head: boxes (0–320) and class scores (0–1) concatenated into the output.
    The record keeps it int8 as rknn-toolkit2 does; the build says what that does to the scores."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.normal(0, 0.5, (4, 3, 1, 1)).astype(np.float32), "w1"),
             numpy_helper.from_array(np.float32(320.0), "gain")]
    nodes = [helper.make_node("Conv", ["x", "w1"], ["feat"]),
             helper.make_node("Relu", ["feat"], ["pos"]),
             helper.make_node("Mul", ["pos", "gain"], ["boxes"]),
             helper.make_node("Sigmoid", ["feat"], ["scores"]),
             helper.make_node("Concat", ["boxes", "scores"], ["y"], name="head_concat", axis=1)]
    rknn = quantized_build(_save(tmp_path / "m.onnx", nodes, inits, [1, 8, 8, 8]), _samples())
    assert rknn._model.tensor_dtypes["y"] == "int8"
    lines = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("W build: Concat")]
    assert len(lines) == 1 and "'head_concat'" in lines[0] and "into one int8 tensor" in lines[0], lines


def _decode(path: Path, exponent: float) -> Path:
    """yolov5's box decode tail: Conv → Sigmoid → ·2 → Pow(exponent) → ·anchor, joined with the
    scores (so the Sigmoid is stored, as after yolov5's Split) → output."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.normal(0, 0.5, (4, 3, 1, 1)).astype(np.float32), "w"),
             numpy_helper.from_array(np.float32(2.0), "two"), numpy_helper.from_array(np.float32(exponent), "e"),
             numpy_helper.from_array(np.float32(16.0), "anchor")]
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"]), helper.make_node("Sigmoid", ["c"], ["s"]),
             helper.make_node("Mul", ["s", "two"], ["d"]), helper.make_node("Pow", ["d", "e"], ["p"], name="pow"),
             helper.make_node("Mul", ["p", "anchor"], ["wh"]), helper.make_node("Concat", ["wh", "s"], ["y"], axis=1)]
    return _save(path, nodes, inits, [1, 8, 8, 8])


def test_square_in_a_box_decode_is_int8_as_the_vendor_runs_it(tmp_path):
    """rknn-toolkit2 prints yolov5's ``Pow`` by 2 as ``Pow INT8`` and keeps the tail after it int8."""
    rknn = quantized_build(_decode(tmp_path / "m.onnx", 2.0), _samples())
    assert rknn._model.tensor_dtypes["p"] == "int8" and rknn._model.tensor_dtypes["y"] == "int8"
    assert ("Pow", "INT8") in _rows(rknn)
    other = quantized_build(_decode(tmp_path / "m2.onnx", 0.5), _samples())   # any other power: float16
    assert other._model.tensor_dtypes["p"] == "float16" and ("Pow", "FLOAT16") in _rows(other)
