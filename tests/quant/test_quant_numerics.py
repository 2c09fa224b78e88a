"""Numerics and calibration algorithms: properties of quantize/dequantize and of each range search."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from openrknn.quant import numerics
from openrknn.quant.algorithms import algorithm_names, get_algorithm, register_algorithm
from openrknn.quant.algorithms.base import CalibrationAlgorithm
from openrknn.quant.observer import TensorStats
from openrknn.quant.weights import params_from_range


@settings(max_examples=50, deadline=None)
@given(lo=st.floats(-100, 0), width=st.floats(1e-3, 200), dtype=st.sampled_from(["int8", "uint8", "int16"]))
def test_round_trip_error_within_half_step(lo, width, dtype):
    params = params_from_range(lo, lo + width, dtype, "asymmetric_quantized")
    x = np.linspace(lo, lo + width, 101, dtype=np.float32)
    q = numerics.quantize(x, params)
    err = np.abs(numerics.dequantize(q, params) - x)
    assert err.max() <= params.scale[0] * 0.5 * 1.001 + 4 * np.finfo(np.float32).eps * np.abs(x).max() + 1e-6
    assert numerics.dequantize(numerics.quantize(np.zeros(1), params), params)[0] == 0.0   # zero is exact


def test_symmetric_and_dfp():
    s, z = numerics.symmetric(np.array([2.54]), "int8")
    assert z[0] == 0 and np.isclose(s[0], 0.02)
    s, z = numerics.dynamic_fixed_point(np.array([3.0]), "int8")
    assert s[0] == 2.0 ** -5 and z[0] == 0      # 3·2^5 = 96 ≤ 127 < 3·2^6
    p = params_from_range(-3.0, 3.0, "int8", "dynamic_fixed_point")
    assert numerics.quantize(np.array([100.0]), p)[0] == 127 and numerics.quantize(np.array([-100.0]), p)[0] == -127


def test_round_half_to_even_and_requantize():
    p = params_from_range(-128.0, 127.0, "int8", "asymmetric_quantized")
    assert np.isclose(p.scale[0], 1.0)
    assert numerics.quantize(np.array([0.5, 1.5, 2.5], np.float32), p).tolist() == [0, 2, 2]
    acc = np.array([[100, -100, 50000]], np.int32)
    out = numerics.requantize(acc, np.array([0.01, 0.01, 0.01], np.float32), 3, "int8", channel_axis=1)
    assert out.tolist() == [[4, 2, 127]]


def test_group_params_expand():
    rng = np.random.default_rng(0)
    from openrknn.quant.weights import quantize_weight
    w = rng.normal(size=(4, 70)).astype(np.float32)
    q, p = quantize_weight(w, 0, 1, "int4", "symmetric_quantized", "group32", 32, get_algorithm("normal"))
    assert p.scale.shape == (4, 3) and q.min() >= -7 and q.max() <= 7
    assert np.abs(numerics.dequantize(q, p) - w).max() <= p.scale.max() / 2 + 1e-6


def _stats(values: np.ndarray, histogram: bool = True) -> TensorStats:
    stats = TensorStats()
    stats.update_range(values)
    if histogram:
        stats.update_histogram(values)
    return stats


def test_algorithms_clip_outliers_but_normal_does_not():
    rng = np.random.default_rng(0)
    values = np.concatenate([rng.normal(0, 1, 200_000), [60.0, -55.0]]).astype(np.float32)
    stats = _stats(values)
    assert get_algorithm("normal").activation_range(stats, 255) == (stats.min, stats.max)
    for name in ("kl_divergence", "mmse"):
        lo, hi = get_algorithm(name).activation_range(stats, 255)
        assert hi < 0.8 * stats.max and lo > 0.8 * stats.min, name


def test_mmse_weight_search_not_worse_than_minmax():
    rng = np.random.default_rng(1)
    rows = rng.standard_t(2, (8, 2000))
    absmax = np.abs(rows).max(axis=1)

    def mse(limit):
        step = (limit / 127)[:, None]
        return ((rows - np.clip(np.rint(rows / step), -127, 127) * step) ** 2).sum(axis=1)

    lo, hi = get_algorithm("mmse").weight_range(rows, 254, True)
    assert np.all(hi <= absmax + 1e-9) and np.any(hi < absmax)
    assert np.all(mse(hi) <= mse(absmax) * 1.0001)


def test_registry():
    assert algorithm_names() == ["adaround", "kl_divergence", "mmse", "normal"]
    with pytest.raises(ValueError, match="registered twice"):
        @register_algorithm
        class Again(CalibrationAlgorithm):
            name = "normal"
