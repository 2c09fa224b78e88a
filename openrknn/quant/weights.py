"""Weight and bias quantization (per layer, per output channel, or per group of input values)."""
from __future__ import annotations

import numpy as np

from openrknn.quant import numerics
from openrknn.quant.algorithms.base import CalibrationAlgorithm
from openrknn.quant.numerics import QuantParams


def params_from_range(lo: np.ndarray, hi: np.ndarray, dtype: str, qtype: str, **extra) -> QuantParams:
    """Parameters of ``dtype``/``qtype`` covering ``[lo, hi]`` (arrays of one value per row)."""
    lo, hi = np.atleast_1d(np.asarray(lo, np.float64)), np.atleast_1d(np.asarray(hi, np.float64))
    if qtype == "asymmetric_quantized":
        scale, zero = numerics.asymmetric(lo, hi, dtype)
    elif qtype == "dynamic_fixed_point":
        scale, zero = numerics.dynamic_fixed_point(np.maximum(np.abs(lo), np.abs(hi)), dtype)
    else:
        scale, zero = numerics.symmetric(np.maximum(np.abs(lo), np.abs(hi)), dtype)
    return QuantParams(dtype=dtype, scale=scale, zero_point=zero, qtype=qtype,
                       range_min=lo.astype(np.float32), range_max=hi.astype(np.float32), **extra)


def narrowed(params: QuantParams, dtype: str, qtype: str) -> QuantParams:
    """The ``dtype``/``qtype`` parameters an 8-bit layer reads a 16-bit tensor with: the range the
    16-bit parameters represent, ``[s·(q_min − z), s·(q_max − z)]``, requantized."""
    scale, zero = float(params.scale.ravel()[0]), float(params.zero_point.ravel()[0])
    return params_from_range(scale * (params.qmin - zero), scale * (params.qmax - zero), dtype, qtype)


def quantize_weight(array: np.ndarray, axis: int, group_axis: int, dtype: str, qtype: str, method: str,
                    group_size: int | None, algorithm: CalibrationAlgorithm) -> tuple[np.ndarray, QuantParams]:
    """Quantize a float weight; returns the integer array and its parameters.

    ``layer``: one range for the whole tensor; ``channel``: one per index of ``axis``; ``groupN``:
    one per output channel and run of N values along ``group_axis`` (2-D weights; others fall back
    to ``channel``).
    """
    lo_q, hi_q = numerics.qrange(dtype, qtype)
    levels = hi_q - lo_q
    symmetric = qtype != "asymmetric_quantized"
    if method == "layer":
        lo, hi = algorithm.weight_range(array.reshape(1, -1).astype(np.float64), levels, symmetric)
        params = params_from_range(lo, hi, dtype, qtype)
    elif group_size and array.ndim == 2:
        rows, groups = _group_rows(array, axis, group_size)
        lo, hi = algorithm.weight_range(rows, levels, symmetric)
        params = params_from_range(lo, hi, dtype, qtype, axis=axis, group_size=group_size, group_axis=group_axis)
        shape = (array.shape[axis], groups)
        params = QuantParams(dtype=params.dtype, scale=params.scale.reshape(shape),
                             zero_point=params.zero_point.reshape(shape), qtype=qtype, axis=axis,
                             group_size=group_size, group_axis=group_axis, range_min=params.range_min,
                             range_max=params.range_max)
    else:
        rows = np.moveaxis(array, axis, 0).reshape(array.shape[axis], -1).astype(np.float64)
        lo, hi = algorithm.weight_range(rows, levels, symmetric)
        params = params_from_range(lo, hi, dtype, qtype, axis=axis)
    return numerics.quantize(array, params), params


def _group_rows(array: np.ndarray, axis: int, group_size: int) -> tuple[np.ndarray, int]:
    matrix = np.moveaxis(array, axis, 0).astype(np.float64)   # [channels, K]
    k = matrix.shape[1]
    groups = -(-k // group_size)
    padded = np.zeros((matrix.shape[0], groups * group_size))
    padded[:, :k] = matrix
    return padded.reshape(-1, group_size), groups


def quantize_bias(bias: np.ndarray, input_params: QuantParams, weight_params: QuantParams) -> tuple[np.ndarray, dict]:
    """int32 bias with scale ``s_x·s_w[c]`` and zero point 0, and its parameter record."""
    s_w = weight_params.scale.ravel()
    if s_w.size == 1:
        s_w = np.full(bias.size, s_w[0], np.float32)
    q = numerics.quantize_bias(bias.ravel(), float(input_params.scale.ravel()[0]), s_w)
    scale = (np.float32(input_params.scale.ravel()[0]) * s_w).astype(np.float32)
    record = {"dtype": "int32", "qtype": "symmetric_quantized", "qmethod": "channel", "axis": 0,
              "scale": [float(v) for v in scale], "zero_point": [0] * int(scale.size)}
    return q.reshape(bias.shape), record
