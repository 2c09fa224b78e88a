"""The input stage of a quantized build: ``(x − mean) / std`` quantized with the configured values.

rknn-toolkit2's simulator quantizes the normalised input with the exact mean/std; openrknn rounded them
to float16 like a float layer's constants, which moved about 5 % of a picture's input integers by one
step (found with bench/vendor_layers.py on the PP-OCR classifier).
"""
from __future__ import annotations

import numpy as np

from openrknn.analysis.accuracy import _expose_quantized, _lowered, _run_all
from tests.helpers import make_conv_model, quantized_build

MEAN, STD = [123.675, 116.28, 103.53], [58.395, 57.12, 57.375]   # not float16 numbers


def test_input_integers_use_the_exact_mean_and_std(tmp_path):
    rng = np.random.default_rng(3)
    samples = [rng.integers(0, 256, (1, 3, 16, 16)).astype(np.float32) for _ in range(4)]
    rknn = quantized_build(make_conv_model(tmp_path / "m.onnx"), samples, mean_values=[MEAN], std_values=[STD])
    model = rknn._model
    pre = model.preprocess[0]
    params = model.quant_params[pre.normalized_name]
    scale, zero = float(params["scale"][0]), int(np.asarray(params["zero_point"]).ravel()[0])
    x = rng.integers(0, 256, (1, 3, 16, 16)).astype(np.float32)
    values = _run_all(_expose_quantized(_lowered(model)), {pre.input_name: x})
    got = np.round(values[f"{pre.normalized_name}__dq"] / scale).astype(np.int64) + zero
    mean, std = np.reshape(MEAN, (1, 3, 1, 1)), np.reshape(STD, (1, 3, 1, 1))
    expected = np.clip(np.round((x.astype(np.float64) - mean) / std / scale) + zero, -128, 127)
    np.testing.assert_array_equal(got, expected)
