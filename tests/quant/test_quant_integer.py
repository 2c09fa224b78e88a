"""Integer semantics: the simulator's quantized Conv and MatMul equal an integer numpy reference."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from openrknn.quant import numerics
from openrknn.sim.quantized import lower_quantized
from tests.helpers import quantized_build, reference_session


def _model(path):
    rng = np.random.default_rng(3)
    inits = [numpy_helper.from_array(rng.normal(0, 0.4, (8, 3, 3, 3)).astype(np.float32), "w1"),
             numpy_helper.from_array(rng.normal(0, 0.2, 8).astype(np.float32), "b1"),
             numpy_helper.from_array(rng.normal(0, 0.4, (8, 8)).astype(np.float32), "wm"),
             numpy_helper.from_array(rng.normal(0, 0.3, (4, 8, 1, 1)).astype(np.float32), "w2")]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("MatMul", ["r1", "wm"], ["m"], name="matmul"),
             helper.make_node("Conv", ["m", "w2"], ["c2"], name="conv2"),
             helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
             helper.make_node("GlobalAveragePool", ["r2"], ["y"], name="pool")]
    graph = helper.make_graph(nodes, "int_test", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 1, 1])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)


def _int8(values: np.ndarray) -> np.ndarray:
    """The simulator holds int8 activations as uint8 with z + 128."""
    return values.astype(np.int64) - 128


def _conv_int(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    n, c, h, wd = x.shape
    pad = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    out = np.zeros((n, w.shape[0], h, wd), np.int64)
    for i in range(3):
        for j in range(3):
            out += np.einsum("nchw,oc->nohw", pad[:, :, i:i + h, j:j + wd], w[:, :, i, j])
    return out


def test_conv_and_matmul_match_integer_reference(tmp_path):
    _model(tmp_path / "m.onnx")
    rng = np.random.default_rng(0)
    rknn = quantized_build(tmp_path / "m.onnx", [rng.uniform(-1, 1, (1, 3, 8, 8)).astype(np.float32) for _ in range(4)])
    model = rknn._model
    lowered = lower_quantized(model)
    ops = {n.op_type for n in lowered.graph.node}
    assert {"QLinearConv", "MatMulInteger"} <= ops
    wanted = ["x__q", "r1__q", "m__q"]
    for name in wanted:
        lowered.graph.output.append(helper.make_empty_tensor_value_info(name))
    session = reference_session(lowered.SerializeToString())
    x = rng.uniform(-1.2, 1.2, (1, 3, 8, 8)).astype(np.float32)
    values = dict(zip([o.name for o in session.get_outputs()], session.run(None, {"x": x})))
    qp, inits = model.quant_params, {i.name: numpy_helper.to_array(i) for i in model.graph.graph.initializer}

    # input quantization
    px = numerics.QuantParams.from_dict(qp["x"])
    np.testing.assert_array_equal(_int8(values["x__q"]), numerics.quantize(x, px))

    # Conv: int32 accumulation + int32 bias, per-channel requantization, Relu by saturation
    xq = _int8(values["x__q"]) - px.zero_point[0]
    acc = _conv_int(xq, inits["w1"].astype(np.int64)) + inits["b1"].astype(np.int64).reshape(1, -1, 1, 1)
    pw, pr = numerics.QuantParams.from_dict(qp["w1"]), numerics.QuantParams.from_dict(qp["r1"])
    m = numerics.requant_multiplier(px.scale[0], pw.scale, pr.scale[0])
    ref = numerics.requantize(acc, m, int(pr.zero_point[0]), "int8", channel_axis=1)
    got = _int8(values["r1__q"])
    np.testing.assert_array_equal(got, ref)   # bit-exact
    assert got.min() >= pr.zero_point[0]          # Relu: nothing below the zero point

    # MatMul: (a − z_a)·W in int32, per-column requantization
    a = got - pr.zero_point[0]
    acc = np.einsum("nchk,kj->nchj", a, inits["wm"].astype(np.int64))
    pwm, pm = numerics.QuantParams.from_dict(qp["wm"]), numerics.QuantParams.from_dict(qp["m"])
    m = numerics.requant_multiplier(pr.scale[0], pwm.scale, pm.scale[0])
    ref = numerics.requantize(acc, m, int(pm.zero_point[0]), "int8", channel_axis=3)
    got = _int8(values["m__q"])
    np.testing.assert_array_equal(got, ref)   # bit-exact


def test_three_channel_conv_is_deterministic(tmp_path):
    """A 3-channel input Conv (every image model's first layer) gives the same integers on every run
    (onnxruntime 1.23, the newest for Python 3.10, did not unless the lowering pads the channels)."""
    rng = np.random.default_rng(1)
    w = numpy_helper.from_array(rng.normal(0, 0.3, (24, 3, 5, 5)).astype(np.float32), "w")
    w2 = numpy_helper.from_array(rng.normal(0, 0.3, (8, 24, 1, 1)).astype(np.float32), "w2")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 2, 2], strides=[2, 2]),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("Conv", ["r", "w2"], ["y"], name="conv2")]   # keeps the first Conv integer
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 64, 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w, w2])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), tmp_path / "m.onnx")
    rknn = quantized_build(tmp_path / "m.onnx", [rng.uniform(-1, 1, (1, 3, 64, 64)).astype(np.float32) for _ in range(3)])
    assert "QLinearConv" in {n.op_type for n in lower_quantized(rknn._model).graph.node}
    assert rknn.init_runtime() == 0
    x = rng.uniform(-1, 1, (1, 3, 64, 64)).astype(np.float32)
    runs = [rknn.inference(inputs=[x], data_format="nchw")[0] for _ in range(6)]
    for other in runs[1:]:
        np.testing.assert_array_equal(other, runs[0])
