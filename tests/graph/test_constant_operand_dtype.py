"""A layer whose first input is a constant (paddle2onnx's learnable scale ``Mul(c, x)`` after an
activation, PP-LCNetV3 / PP-OCRv4 rec) — after a hard-swish or a ReLU a layer of its own: rknn-toolkit2 2.5.0 prints the type it stores that
constant in — ``Mul FLOAT`` for one scale, ``Mul INT16`` per channel in int8 builds, ``FLOAT16``
per channel in float16 builds — while the layer reads and stores int8 (its Feature Tensor table:
the Mul's output INT8). Measured on these probe graphs; ``Mul(x, c) → Add`` is one
``BatchNormalization`` layer instead."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from openrknn.chips import get_chip
from openrknn.graph import npu_layers
from openrknn.profile import estimate_perf
from tests.helpers import quantized_build

C = 8


def scaled_hardswish(path: Path, scale_shape: tuple[int, ...], constant_first: bool = True,
                     relu: bool = False) -> Path:
    """Conv → hard-swish (or ReLU) → Mul(scale, x) → Add(offset) → Conv."""
    rng = np.random.default_rng(0)
    arrays = {"w0": rng.normal(0, 0.3, (C, 3, 3, 3)), "b0": rng.normal(0, 0.1, C), "three": [3.0], "lo": 0.0,
              "hi": 6.0, "six": [6.0], "scale": rng.uniform(0.5, 1.5, scale_shape),
              "offset": rng.uniform(-0.2, 0.2, scale_shape), "w1": rng.normal(0, 0.3, (C, C, 3, 3))}
    inits = [numpy_helper.from_array(np.asarray(v, np.float32), k) for k, v in arrays.items()]
    act = "r" if relu else "h"
    nodes = [helper.make_node("Conv", ["x", "w0", "b0"], ["c0"], name="conv0", pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["c0", "three"], ["h_a"]),
             helper.make_node("Clip", ["h_a", "lo", "hi"], ["h_c"]),
             helper.make_node("Mul", ["c0", "h_c"], ["h_m"]),
             helper.make_node("Div", ["h_m", "six"], ["h"]),
             helper.make_node("Relu", ["c0"], ["r"]),
             helper.make_node("Mul", ["scale", act] if constant_first else [act, "scale"], ["scaled"], name="scale"),
             helper.make_node("Add", ["scaled", "offset"], ["shifted"], name="offset"),
             helper.make_node("Conv", ["shifted", "w1"], ["y"], name="conv1", pads=[1, 1, 1, 1])]
    nodes = [n for n in nodes if n.output[0] not in (("h_a", "h_c", "h_m", "h") if relu else ("r",))]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, C, 8, 8])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)
    return path


def _samples():
    rng = np.random.default_rng(1)
    return [rng.uniform(0, 1, (1, 3, 8, 8)).astype(np.float32) for _ in range(3)]


def _rows(rknn) -> list[tuple[str, str]]:
    return [(r.op_type, r.data_type.upper()) for r in estimate_perf(rknn._model, get_chip("rk3588")).layers]


@pytest.mark.parametrize("shape, printed", [((1,), "FLOAT"), ((), "FLOAT"), ((1, C, 1, 1), "INT16")])
def test_scale_constant_first_prints_the_constants_type_and_stays_int8(tmp_path, shape, printed):
    rknn = quantized_build(scaled_hardswish(tmp_path / "m.onnx", shape), _samples())
    assert _rows(rknn) == [("InputOperator", "INT8"), ("ConvHardSwish", "INT8"), ("Mul", printed), ("Add", "INT8"),
                           ("Conv", "INT8"), ("OutputOperator", "INT8")]
    record = next(r for r in npu_layers.model_records(rknn._model) if r.op_name == "Mul")
    assert record.operand_dtype == printed.lower() and record.dtype == "int8"
    assert rknn._model.tensor_dtypes["scaled"] == "int8"


def test_scale_constant_first_in_a_float16_build(tmp_path):
    from rknn.api import RKNN
    for shape, printed in (((1,), "FLOAT"), ((1, C, 1, 1), "FLOAT16")):
        rknn = RKNN()
        assert rknn.config(target_platform="rk3588") == 0
        assert rknn.load_onnx(str(scaled_hardswish(tmp_path / f"m{len(shape)}.onnx", shape))) == 0
        assert rknn.build(do_quantization=False) == 0
        assert ("Mul", printed) in _rows(rknn) and ("Add", "FLOAT16") in _rows(rknn)


def test_scale_constant_second_is_one_batchnorm_layer(tmp_path):
    rknn = quantized_build(scaled_hardswish(tmp_path / "m.onnx", (1,), constant_first=False), _samples())
    assert ("BatchNormalization", "INT8") in _rows(rknn) and not any(op == "Mul" for op, _ in _rows(rknn))


@pytest.mark.parametrize("constant_first, layers", [
    (True, [("ConvRelu", "INT8"), ("Mul", "FLOAT"), ("Add", "INT8")]),
    (False, [("ConvRelu", "INT8"), ("BatchNormalization", "INT8")])])
def test_scale_and_offset_after_relu_are_layers_of_their_own(tmp_path, constant_first, layers):
    """The scale and offset are not folded into the ReLU's layer (they were: one ``ConvRelu``)."""
    rknn = quantized_build(scaled_hardswish(tmp_path / "m.onnx", (1,), constant_first, relu=True), _samples())
    assert _rows(rknn) == [("InputOperator", "INT8")] + layers + [("Conv", "INT8"), ("OutputOperator", "INT8")]
    assert rknn._model.tensor_dtypes["r"] == "int8"   # the ReLU's output is stored


def test_the_simulator_scales_in_float_and_requantizes(tmp_path):
    """The Mul layer: int8 in, a float scale, int8 out — the simulator's stored value is the float
    product of the stored input, rounded onto the output's int8 grid."""
    from openrknn.sim.session import lower
    from tests.helpers import reference_session
    rknn = quantized_build(scaled_hardswish(tmp_path / "m.onnx", (1,)), _samples())
    model = rknn._model
    scale = float(numpy_helper.to_array(next(i for i in model.graph.graph.initializer if i.name == "scale")).ravel()[0])
    lowered = lower(model)
    zero_types = {i.name: i.data_type for i in lowered.graph.initializer}   # a QuantizeLinear writes its zero's type
    lowered.graph.output.extend([helper.make_tensor_value_info(f"{t}__q", zero_types[f"{t}__z"], None)
                                 for t in ("h", "scaled")])
    feed = {lowered.graph.input[0].name: _samples()[0]}
    h_q, out_q = reference_session(lowered).run([f"{t}__q" for t in ("h", "scaled")], feed)
    consts = {i.name: numpy_helper.to_array(i).astype(np.float64) for i in lowered.graph.initializer}
    h = (h_q - consts["h__z"]) * consts["h__s"]
    info = np.iinfo(out_q.dtype)   # the lowering may store int8 as uint8 with the zero point shifted
    expected = np.clip(np.round(h * scale / consts["scaled__s"]) + consts["scaled__z"], info.min, info.max)
    assert model.quant_params["scaled"]["dtype"] == "int8"
    assert np.abs(expected - out_q).max() <= 1 and np.mean(expected == out_q) > 0.99


def test_a_float16_layers_weights_cost_float16_bytes(tmp_path):
    """eval_perf: the weights of a layer hybrid quantization keeps in float16 are not quantized and
    are read as float16 (they were counted as int8)."""
    from rknn.api import RKNN
    from openrknn.profile.cost_table import cost_table
    from openrknn.profile.layers import build_layers
    from openrknn.quant.overrides import QuantOverrides
    from openrknn.quant.quantizer import quantize_model
    from openrknn.quant.settings import QuantSettings
    rknn = RKNN()
    assert rknn.config(target_platform="rk3588") == 0
    assert rknn.load_onnx(str(scaled_hardswish(tmp_path / "m.onnx", (1,)))) == 0
    assert rknn.build(do_quantization=False) == 0
    table = cost_table(get_chip("rk3588"))
    for float_layers, dtype in ((frozenset(), "int8"), (frozenset({"conv1"}), "float16")):
        hybrid = quantize_model(rknn._model, [[s] for s in _samples()], QuantSettings(),
                                QuantOverrides(float_layers=float_layers))
        conv1 = next(layer for layer in build_layers(hybrid, table) if layer.name == "conv1")
        assert [t.dtype for t in conv1.inputs if t.name == "w1"] == [dtype]
