"""Bias correction checked on held-out calibration samples (``QuantSettings.bias_correction_check``).

A Conv whose input channel means flip sign between calibration samples: the correction estimated
on some samples adds the opposite of the held-out samples' offset, so the check must drop it and
the layer keep its float bias; a layer that reads the picture is corrected either way."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from tests.helpers import quantized_build

BIAS = np.array([0.05, -0.1, 0.2, 0.0], np.float32)


def flipping_means_model(path: Path) -> Path:
    """x → Conv 'first' (2→2, 1×1, identity) → Conv 'second' (2→4, 1×1, weights between grid steps)."""
    rng = np.random.default_rng(3)
    w2 = rng.uniform(-1, 1, (4, 2, 1, 1)).astype(np.float32)
    inits = [numpy_helper.from_array(np.eye(2, dtype=np.float32).reshape(2, 2, 1, 1), "w1"),
             numpy_helper.from_array(np.zeros(2, np.float32), "b1"),
             numpy_helper.from_array(w2, "w2"), numpy_helper.from_array(BIAS, "b2")]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["h"], name="first"),
             helper.make_node("Conv", ["h", "w2", "b2"], ["y"], name="second")]
    graph = helper.make_graph(nodes, "flip", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 6, 6])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 6, 6])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)
    return path


def flipping_samples() -> list[np.ndarray]:
    """Six pictures; the held-out ones (every third) have the opposite channel means of the others."""
    rng = np.random.default_rng(4)
    means = [1.0, 1.0, -1.0, 1.0, 1.0, -1.0]
    return [(m + rng.uniform(-0.2, 0.2, (1, 2, 6, 6))).astype(np.float32) for m in means]


def float_bias_of(model, layer: str) -> np.ndarray:
    """The float bias a quantized layer adds: its int32 bias times its scale ``s_x·s_w``."""
    node = next(n for n in model.graph.graph.node if n.name == layer)
    q = numpy_helper.to_array(next(i for i in model.graph.graph.initializer if i.name == node.input[2]))
    return q.astype(np.float64) * np.asarray(model.quant_params[node.input[2]]["scale"], np.float64)


def build(tmp_path: Path, check: bool):
    from openrknn.quant import QuantSettings, quantize_model
    from openrknn.quant.hybrid import float_record
    samples = flipping_samples()
    built = quantized_build(flipping_means_model(tmp_path / "m.onnx"), samples)._model
    settings = dataclasses.replace(QuantSettings(), bias_correction_check=check)
    return quantize_model(float_record(built), [[s] for s in samples], settings)


def test_a_correction_that_fails_on_held_out_samples_is_dropped(tmp_path, capsys):
    plain = build(tmp_path, check=False)
    step = np.asarray(plain.quant_params["b2"]["scale"], np.float64)
    assert np.abs(float_bias_of(plain, "second") - BIAS).max() > 5 * step.max()   # corrected: the bias moved
    capsys.readouterr()
    checked = build(tmp_path, check=True)
    printed = capsys.readouterr().out
    step = np.asarray(checked.quant_params["b2"]["scale"], np.float64)
    assert np.all(np.abs(float_bias_of(checked, "second") - BIAS) <= step)   # kept the float bias
    assert "bias correction applied to 1 of 2 layer(s); 1 kept their bias" in printed   # 'first' reads the picture
    assert "second" in printed.split("kept their bias")[1]
