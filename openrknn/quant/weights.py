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
                    group_size: int | None, algorithm: CalibrationAlgorithm,
                    rounding: str = "nearest") -> tuple[np.ndarray, QuantParams]:
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
    return weight_integers(array, params, rounding), params


def weight_integers(array: np.ndarray, params: QuantParams, rounding: str = "nearest") -> np.ndarray:
    """The integers of a quantized weight: round-to-nearest, or with ``rounding='running_sum'``
    (``QuantSettings.conv_weight_rounding``) :func:`sum_preserving_integers` for symmetric 8-bit Conv
    weights with one scale per output channel.

    Round-to-nearest is the default, and it is rknn-toolkit2 2.5.0's rounding (on its asymmetric grid:
    read back weight by weight, ``bench/vendor_weight_grid.py``). The running-sum rounding is an
    experiment; on the shared models it measured worse:
    PP-OCR cls held-out cosine mean / worst 0.98917 / 0.94041 against 0.99708 / 0.98593, and with
    asymmetric weights handed to rknn-toolkit2 the two simulators agree to 0.99791 on PP-OCR cls
    instead of 1.00000 (``tests/export/test_rockchip_backend.py``)."""
    if (rounding == "running_sum" and array.ndim == 4 and params.axis is not None and params.axis % 4 == 0
            and not params.group_size and params.dtype in ("int8", "uint8")
            and params.scale.size == array.shape[0] and not np.any(params.zero_point)):
        return sum_preserving_integers(array, params)
    return numerics.quantize(array, params)


def sum_preserving_integers(array: np.ndarray, params: QuantParams) -> np.ndarray:
    """Round each output channel's weights (axis 0) so that every running sum, in memory order
    (input channel, kernel row, kernel column), stays within half a step of the exact one.

    Rounding each weight to the nearest step leaves a per-channel sum error that can be many steps
    (a kernel whose weights all sit 0.3 steps above the grid): the output then moves by that error
    times the input's mean, a shift bias correction only removes for inputs whose mean is the
    calibration mean. Each weight still moves by less than one step. This is not rknn-toolkit2's
    rounding (it rounds to nearest on an asymmetric grid and corrects no bias; probes whose output step
    was too coarse to tell had suggested otherwise, docs/quantization.md).
    """
    scale, zero = numerics.expand(params, array.shape)
    exact = (np.asarray(array, np.float32) / scale).astype(np.float64).reshape(array.shape[0], -1)
    running = np.rint(np.cumsum(exact, axis=1))
    steps = np.diff(running, axis=1, prepend=0.0).reshape(array.shape) + zero
    return np.clip(steps, params.qmin, params.qmax).astype(numerics.NUMPY_TYPES[params.dtype])


# Largest |int32 bias| allowed: half the int32 range, so the products the layer adds to it (and bias
# correction, applied after the weights are quantized) cannot carry the sum past 2^31.
BIAS_LIMIT = 2.0 ** 30


def bias_safe(params: QuantParams, bias: np.ndarray, input_scale: float) -> tuple[QuantParams, int]:
    """Weight parameters whose scale is large enough for ``bias / (s_x·s_w)`` to fit in int32.

    The int32 bias is in units of ``s_x·s_w[c]``. Where ``|b_c| / (s_x·s_w[c])`` would exceed
    :data:`BIAS_LIMIT`, channel ``c``'s weight range is widened until it fits (the rule of
    onnxruntime's static quantizer): the bias then stays exact to one accumulator unit and only
    that channel's weights lose precision — each moves by at most ``s_w[c]/2``, the channel's
    output by at most ``K·|b_c|·(q_max − q_min)/2^31`` for ``K`` inputs per output. Returns the
    parameters and the number of channels widened (0: unchanged). Grouped (w4a16) weights are
    returned as they are.
    """
    if params.group_size:
        return params, 0
    need = np.abs(np.asarray(bias, np.float64).ravel()) / (float(input_scale) * BIAS_LIMIT)
    scale = params.scale.astype(np.float64).ravel()
    if scale.size == 1:
        need = np.array([need.max(initial=0.0)])
    elif need.size != scale.size:
        return params, 0
    raise_ = need > scale
    if not raise_.any():
        return params, 0
    need = need * (1 + 2.0 ** -16)   # float32 rounding of the new scale stays above the need
    lo = np.resize(params.range_min.astype(np.float64), scale.size)
    hi = np.resize(params.range_max.astype(np.float64), scale.size)
    lo_q, hi_q = params.qmin, params.qmax
    if params.qtype == "asymmetric_quantized":
        span = np.maximum(hi, 0) - np.minimum(lo, 0)
        target = need * (hi_q - lo_q)
        grow = np.where(span > 0, target / np.where(span > 0, span, 1), 0)
        new_lo = np.where(span > 0, np.minimum(lo, 0) * grow, -target / 2)
        new_hi = np.where(span > 0, np.maximum(hi, 0) * grow, target / 2)
    else:   # symmetric and dynamic fixed point: max|w| sets the scale
        absmax = need * hi_q
        new_lo, new_hi = -absmax, absmax
    lo = np.where(raise_, new_lo, lo)
    hi = np.where(raise_, new_hi, hi)
    fresh = params_from_range(lo, hi, params.dtype, params.qtype)
    shape = params.scale.shape   # the untouched channels keep their parameters bit for bit
    widened = QuantParams(dtype=params.dtype, qtype=params.qtype, axis=params.axis,
                          scale=np.where(raise_, fresh.scale, params.scale.ravel()).astype(np.float32).reshape(shape),
                          zero_point=np.where(raise_, fresh.zero_point, params.zero_point.ravel()).reshape(shape),
                          range_min=lo.astype(np.float32), range_max=hi.astype(np.float32))
    return widened, int(raise_.sum())


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
