"""A squeeze-and-excitation block's ConvHardSigmoid: the Conv output is requantized to int8 inside the
layer, its range clamped to the HardSigmoid's linear part (±3), as rknn-toolkit2 2.5.0 does."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from openrknn.graph import npu_layers
from tests.helpers import quantized_build, reference_session

C, R = 8, 4


def _se_model(path, outputs=("out",)):
    """Conv-Relu → GAP → fc1-Relu → fc2 → HardSigmoid(1/6, 0.5) → Mul → Conv: MobileNetV3's SE block."""
    rng = np.random.default_rng(0)

    def init(name, shape, scale):
        return numpy_helper.from_array(rng.normal(0, scale, shape).astype(np.float32), name)

    inits = [init("w0", (C, 3, 3, 3), 0.3), init("b0", (C,), 0.1), init("w1", (R, C, 1, 1), 0.5),
             init("b1", (R,), 0.5), init("w2", (C, R, 1, 1), 20.0), init("b2", (C,), 1.0),
             init("w3", (4, C, 1, 1), 0.3)]
    nodes = [helper.make_node("Conv", ["x", "w0", "b0"], ["c0"], name="conv0", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c0"], ["r0"], name="relu0"),
             helper.make_node("GlobalAveragePool", ["r0"], ["gap"], name="gap"),
             helper.make_node("Conv", ["gap", "w1", "b1"], ["fc1"], name="fc1"),
             helper.make_node("Relu", ["fc1"], ["fc1r"], name="fc1_relu"),
             helper.make_node("Conv", ["fc1r", "w2", "b2"], ["fc2"], name="fc2"),
             helper.make_node("HardSigmoid", ["fc2"], ["s"], name="hsig", alpha=1 / 6, beta=0.5),
             helper.make_node("Mul", ["r0", "s"], ["y"], name="se_mul"),
             helper.make_node("Conv", ["y", "w3"], ["out"], name="project")]
    shapes = {"out": [1, 4, 8, 8], "fc2": [1, C, 1, 1], "s": [1, C, 1, 1]}
    graph = helper.make_graph(nodes, "se", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info(o, TensorProto.FLOAT, shapes[o]) for o in outputs], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)
    return path


def _samples():
    return [np.random.default_rng(i).normal(0, 1, (1, 8, 8, 3)).astype(np.float32) for i in range(6)]


def test_conv_before_hardsigmoid_is_requantized_to_plus_minus_three(tmp_path):
    path = _se_model(tmp_path / "se.onnx")
    calibrated = reference_session(_se_model(tmp_path / "probe.onnx", outputs=("fc2",)))
    reach = max(float(np.abs(calibrated.run(None, {"x": s.transpose(0, 3, 1, 2)})[0]).max()) for s in _samples())
    assert reach > 6, "the test needs SE logits beyond HardSigmoid's linear part"
    rknn = quantized_build(path, _samples())
    model = rknn._model
    params = model.quant_params["fc2"]
    assert params["dtype"] == "int8"
    assert np.allclose(params["min"], -3.0) and np.allclose(params["max"], 3.0)
    assert np.allclose(params["scale"], 6 / 255)
    # still one ConvHardSigmoid layer: the int8 step is inside it, not a stored tensor
    record = next(r for r in npu_layers.model_records(model) if "fc2" in r.nodes)
    assert "hsig" in record.nodes and "fc2" not in record.stored and record.op_name == "ConvHardSigmoid"


def test_hardsigmoid_reads_the_requantized_conv_output(tmp_path):
    """The simulator runs the layer with its int8 step: the SE scale stays within one Conv-output step
    and one output step of HardSigmoid(int8 Conv output) (a sanity check of the lowering; the test
    above is the one that tells the step is there)."""
    path = _se_model(tmp_path / "se.onnx", outputs=("out", "s"))
    rknn = quantized_build(path, _samples())
    assert rknn.init_runtime() == 0
    logits = reference_session(_se_model(tmp_path / "probe.onnx", outputs=("fc2",)))
    for sample in _samples()[:3]:
        got = np.asarray(rknn.inference(inputs=[sample])[1], np.float64).ravel()
        z = logits.run(None, {"x": sample.transpose(0, 3, 1, 2)})[0].astype(np.float64).ravel()
        step = 6 / 255
        requantized = np.clip(np.round(z / step), -128, 127) * step
        expected = np.clip(requantized / 6 + 0.5, 0, 1)
        # one output step for rounding, one Conv-output step (1/255 in s) for the int8 weights
        assert np.abs(got - expected).max() <= 2.05 / 255
    rknn.release()
