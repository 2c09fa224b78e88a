"""rknn-toolkit2 2.5.0's int8 Conv weights and biases, read back from its simulator on probes
(``bench/vendor_weight_grid.py``): per output channel asymmetric weights rounded to the nearest step,
the float bias kept (no bias correction), and no depthwise equalization. ``QuantSettings`` reproduces
each with ``weight_qtype='asymmetric_quantized'``, ``bias_correction=False``, ``equalize_depthwise=False``.

The probe Conv's weight range is pinned by weights the probe picture never reaches (+1.0 and −0.5, so
the vendor's step is 1.5/255) and its calibrated output range is small, so the vendor's output grid is
29× finer than its weight grid and each weight's integer can be read off. Its probe weights sit 0.2–0.45
steps off the grid, where round-to-nearest and the running-sum rounding (``conv_weight_rounding``) give
different integers: the vendor's are the nearest ones. ``config(weight_qtype='asymmetric_quantized')``
stores the same integers; with ``QuantSettings(bias_correction=False)`` the layer adds the float bias,
as the vendor's does.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from tests.helpers import quantized_build, reference_session

STEP = 1.5 / 255
# The vendor's integers (q − zero point) for the probe weights, decoded from its simulator's output.
VENDOR = np.array([[3, -2, 5, 1, -4, 2], [1, 2, 3, -1, -2, -3]])
# Running sums kept instead (in memory order, the pins last) would give these for the same weights.
RUNNING_SUMS = np.array([[3, -1, 5, 1, -4, 2], [1, 3, 3, 0, -2, -2]])
# The vendor's output of the bias-correction probe at x = 1 (float 0.4424; its nearest weights sum to 0.4176).
VENDOR_OUTPUT = 0.41806695


def _two_convs(path, weight: np.ndarray, height: int):
    """An identity 1×1 Conv (every weight on the grid) feeding the probe Conv, as the vendor ran it."""
    channels = weight.shape[1]
    eye = numpy_helper.from_array(np.eye(channels, dtype=np.float32)[:, :, None, None], "eye")
    nodes = [helper.make_node("Conv", ["x", "eye"], ["x1"], kernel_shape=[1, 1]),
             helper.make_node("Conv", ["x1", "w"], ["y"], kernel_shape=[1, 1])]
    graph = helper.make_graph(nodes, "probe",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, channels, height, height])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, weight.shape[0], height, height])],
                              [numpy_helper.from_array(weight, "w"), eye])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)
    return path


def _stored(rknn, name: str) -> tuple[np.ndarray, np.ndarray]:
    stored = next(i for i in rknn._model.graph.graph.initializer if i.name == name)
    zero = np.asarray(rknn._model.quant_params[name]["zero_point"]).reshape(-1, 1, 1, 1)
    return numpy_helper.to_array(stored).astype(np.int64), zero


def test_asymmetric_weights_are_the_vendors_nearest_integers(tmp_path):
    fraction = np.array([[0.3, 0.4, 0.45, -0.3, 0.2, 0.35], [0.45] * 6])
    weight = np.zeros((2, 8, 1, 1))
    weight[:, :6, 0, 0] = (np.array([[3, -2, 5, 1, -4, 2], [1, 2, 3, -1, -2, -3]]) + fraction) * STEP
    weight[:, 6], weight[:, 7] = 1.0, -0.5
    picture = np.zeros((1, 8, 3, 3), np.float32)
    for channel in range(6):
        picture[0, channel, channel // 3, channel % 3] = 1.0
    path = _two_convs(tmp_path / "probe.onnx", weight.astype(np.float32), 3)
    rknn = quantized_build(path, [picture.transpose(0, 2, 3, 1)], weight_qtype="asymmetric_quantized")
    q, zero = _stored(rknn, "w")
    assert np.array_equal((q - zero)[:, :6, 0, 0], VENDOR), "the vendor's weights are the nearest integers"
    assert not np.array_equal(VENDOR, RUNNING_SUMS)


def _bias_correction_probe(tmp_path):
    """16 inputs, the last 14 weights 0.3 steps above the grid: rounding loses 4.2 steps per output."""
    weight = np.zeros((4, 16, 1, 1))
    weight[:, 0], weight[:, 1] = 1.0, -0.5
    weight[:, 2:] = (np.rint((np.arange(2, 16) * 0.6 + 0.06))[None, :, None, None] + 0.3) * STEP
    pictures = []
    for value in (0.25, 1.0):
        x = np.zeros((1, 16, 4, 4), np.float32)
        x[:, 2:] = value
        x[0, 2:, 0, 0] = 0.0
        pictures.append(x)
    return _two_convs(tmp_path / "bc.onnx", weight.astype(np.float32), 4), pictures, weight


def test_without_bias_correction_the_layer_adds_the_float_bias_as_the_vendor_does(tmp_path, monkeypatch):
    import openrknn.compile as compile_stage
    path, pictures, weight = _bias_correction_probe(tmp_path)
    exact = float(weight[0, 2:].sum())                     # 0.4424 in float at x = 1
    setup = compile_stage.calibration_setup

    def without_correction(*args, **kwargs):
        settings, samples = setup(*args, **kwargs)
        return dataclasses.replace(settings, bias_correction=False), samples

    outputs = {}
    for corrected in (True, False):
        if not corrected:
            monkeypatch.setattr(compile_stage, "calibration_setup", without_correction)
        rknn = quantized_build(path, [p.transpose(0, 2, 3, 1) for p in pictures], weight_qtype="asymmetric_quantized")
        assert rknn.init_runtime() == 0
        outputs[corrected] = float(rknn.inference(inputs=[pictures[1]], data_format="nchw")[0][0, 0, 1, 1])
    step = exact / 255                                     # the output's calibrated range is [0, 0.4424]
    assert abs(outputs[False] - VENDOR_OUTPUT) <= step / 2, outputs
    # the correction (for the calibration's mean input, 0.625 here) moves the output toward float
    assert abs(outputs[True] - exact) < abs(outputs[False] - exact) - 5 * step, outputs


def test_without_equalization_weak_channels_keep_the_vendors_coarse_grid(tmp_path, monkeypatch):
    """Conv (channel gains 1, 1, 0.01, 0.01) → ReLU → depthwise 3×3 (gains 1, 1, 100, 100): the vendor
    does not equalize, and its weak channels read cosine 0.998 (bench/vendor_weight_grid.py);
    openrknn's equalization gives them their precision back."""
    import openrknn.compile as compile_stage
    rng = np.random.default_rng(5)
    gain = np.array([1, 1, 0.01, 0.01])
    eye = numpy_helper.from_array((np.eye(4) * gain[:, None]).astype(np.float32)[:, :, None, None], "eye")
    weight = (rng.uniform(0.2, 1.0, (4, 1, 3, 3)) / gain[:, None, None, None]).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "eye"], ["x1"], kernel_shape=[1, 1]), helper.make_node("Relu", ["x1"], ["x2"]),
             helper.make_node("Conv", ["x2", "w"], ["y"], kernel_shape=[3, 3], pads=[1] * 4, group=4)]
    graph = helper.make_graph(nodes, "eq", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 12, 12])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 12, 12])],
                              [numpy_helper.from_array(weight, "w"), eye])
    path = tmp_path / "eq.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)
    pictures = rng.uniform(0, 1, (4, 1, 4, 12, 12)).astype(np.float32)
    held_out = pictures[3]
    want = reference_session(path).run(None, {"x": held_out})[0][0]
    setup = compile_stage.calibration_setup
    weak = {}
    for equalize in (True, False):
        def chosen(*args, **kwargs):
            settings, samples = setup(*args, **kwargs)
            return dataclasses.replace(settings, equalize_depthwise=equalize), samples
        monkeypatch.setattr(compile_stage, "calibration_setup", chosen)
        rknn = quantized_build(path, [p.transpose(0, 2, 3, 1) for p in pictures[:3]])
        assert rknn.init_runtime() == 0
        got = np.asarray(rknn.inference(inputs=[held_out], data_format="nchw")[0])[0]
        weak[equalize] = min(float(np.dot(got[c].ravel(), want[c].ravel()) /
                                   (np.linalg.norm(got[c]) * np.linalg.norm(want[c]))) for c in (2, 3))
    assert weak[True] > 0.9999, weak
    assert weak[False] < 0.9995, weak
