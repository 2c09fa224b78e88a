"""With ``conv_weight_rounding='running_sum'``, 8-bit Conv weights are rounded so each output
channel's running sums stay exact to half a step: no per-channel offset proportional to the input's mean
is left over. (It is an experiment, not rknn-toolkit2's rounding: ``tests/quant/test_vendor_weight_grid.py``.)

The probe is the one the rule was measured with: a dense 3×3 Conv whose kernels all sit 0.3 steps
above (odd input channels) or below (even ones) the grid, calibrated where every channel's mean is 1
and run where only the odd channels are on. Round-to-nearest leaves 0.3 steps per weight, which
bias correction cancels only for the calibration's channel means; this rounding leaves the interior
output at +0.0136 (one output step is 0.23), round-to-nearest at −0.217.
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from openrknn.quant.numerics import dequantize
from openrknn.quant.weights import params_from_range, sum_preserving_integers
from tests.helpers import quantized_build, reference_session

C, O, H = 16, 4, 16


def _probe(path):
    weight = np.empty((O, C, 3, 3), np.float32)
    weight[:, 1::2] = (20 + 0.3) / 127
    weight[:, 0::2] = (20 + 0.7) / 127
    weight[:, 0, 0, 0] = 1.0                      # sets every channel's scale to 1/127
    graph = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])], "probe",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, C, H, H])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, O, H, H])],
                              [numpy_helper.from_array(weight, "w")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)
    return path


def _picture(odd: float, even: float) -> np.ndarray:
    x = np.zeros((1, C, H, H), np.float32)
    x[0, 1::2], x[0, 0::2] = odd, even
    x[0, :, 0, 0], x[0, :, 0, 1] = 0.0, 2.55       # the calibration range: [0, 2.55], 1.0 on its grid
    return x


def _running_sum_rounding(patch) -> None:
    """``QuantSettings(conv_weight_rounding='running_sum')`` for the builds of one test."""
    from openrknn.quant import quantizer, weights
    original = weights.weight_integers
    chosen = lambda array, params, rounding="nearest": original(array, params, "running_sum")   # noqa: E731
    patch.setattr(weights, "weight_integers", chosen)
    patch.setattr(quantizer, "weight_integers", chosen)


def test_conv_read_with_other_channel_means_has_no_weight_offset(tmp_path, monkeypatch):
    path = _probe(tmp_path / "probe.onnx")
    _running_sum_rounding(monkeypatch)
    rknn = quantized_build(path, [_picture(1.0, 1.0).transpose(0, 2, 3, 1)] * 4)
    assert rknn.init_runtime() == 0
    test = _picture(1.0, 0.0)
    got = np.asarray(rknn.inference(inputs=[test], data_format="nchw")[0]).reshape(1, O, H, H)
    want = reference_session(path).run(None, {"x": test})[0]
    offset = float((got - want)[:, :, 4:-4, 4:-4].mean())
    assert abs(offset) < 0.05, f"interior output offset {offset:.4f} (round-to-nearest gives -0.217)"


def test_running_sums_stay_within_half_a_step():
    rng = np.random.default_rng(3)
    weight = rng.normal(0, 0.1, (8, 5, 3, 3)).astype(np.float32)
    amax = np.abs(weight).reshape(8, -1).max(axis=1)
    params = params_from_range(-amax, amax, "int8", "symmetric_quantized", axis=0)
    q = sum_preserving_integers(weight, params)
    steps = (weight / params.scale.reshape(-1, 1, 1, 1)).reshape(8, -1).astype(np.float64)
    assert np.abs(q.reshape(8, -1) - steps).max() < 1.0          # every weight within one step
    running = np.cumsum(q.reshape(8, -1), axis=1) - np.cumsum(steps, axis=1)
    assert np.abs(running).max() <= 0.5 + 1e-6
    assert np.abs(dequantize(q, params) - weight).max() <= params.scale.max()


def test_default_rounding_is_round_to_nearest(tmp_path):
    """The default keeps round-to-nearest (the running-sum rounding measured worse on the shared
    models, quant/weights.weight_integers): the probe's weights are the nearest integers."""
    path = _probe(tmp_path / "probe.onnx")
    rknn = quantized_build(path, [_picture(1.0, 1.0).transpose(0, 2, 3, 1)] * 4)
    stored = next(i for i in rknn._model.graph.graph.initializer if i.name == "w")
    assert np.array_equal(numpy_helper.to_array(stored)[:, 1, 1, 1], np.full(O, 20))   # 20.3 → 20
