"""Quantization arithmetic: one small pure module every other part of ``openrknn.quant`` uses.

Affine quantization of a real value ``r`` to an integer ``q`` of a given dtype::

    q = clamp(round_half_even(r / s) + z, q_min, q_max)        (quantize, float32 division)
    r ≈ s · (q − z)                                              (dequantize)

with ``s`` the scale (float32 > 0) and ``z`` the zero point (integer in [q_min, q_max]).
Requantizing an int32 accumulator ``acc`` (scale ``s_x·s_w``) to an output of scale ``s_y``::

    M = float32(float32(s_x · s_w) / s_y)
    q_y = clamp(round_half_even(float32(acc) · M) + z_y, q_min, q_max)

Dynamic fixed point ("dfp") is the symmetric case with ``s = 2^-fl`` and ``z = 0``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

# Integer range of each stored dtype (full range; symmetric weights use the narrow range, see below).
RANGES: dict[str, tuple[int, int]] = {
    "int4": (-8, 7), "int8": (-128, 127), "uint8": (0, 255), "int16": (-32768, 32767),
}
NUMPY_TYPES: dict[str, type] = {"int4": np.int8, "int8": np.int8, "uint8": np.uint8, "int16": np.int16}
_TINY = np.float32(1e-12)
# Scale floors. A range of width 0 (a dead tensor, a constant 0) gets ``DEAD_SCALE``: any scale
# represents 0 exactly. Any other range, however small (outputs of 1e-14 with PyTorch's default
# init), gets the scale it needs, down to ``MIN_SCALE``; with weight scales ≥ 1e-12 the
# accumulator scale ``s_x·s_w`` stays a normal float32 (≥ 2^-120).
DEAD_SCALE = 1e-12
MIN_SCALE = 2.0 ** -80


def _scale_floor(raw: np.ndarray) -> np.ndarray:
    raw = np.asarray(raw, np.float64)
    return np.where(raw > 0, np.maximum(raw, MIN_SCALE), DEAD_SCALE)


@dataclass(frozen=True, eq=False)
class QuantParams:
    """The frozen quantization parameters of one tensor: ``r = scale·(q − zero_point)``.

    Attributes:
        dtype: stored integer type ('int4', 'int8', 'uint8', 'int16').
        scale: float32 array, one value (per tensor) or one per channel / group.
        zero_point: integer array of the same shape as ``scale``.
        qtype: 'asymmetric_quantized', 'symmetric_quantized' or 'dynamic_fixed_point'.
        axis: channel axis for per-channel parameters, None per tensor.
        group_size: elements per group along ``group_axis`` (w4a16 ``groupN``), None otherwise.
        group_axis: the reduction axis groups are cut along.
        range_min / range_max: the real range the parameters were computed from.
    """

    dtype: str
    scale: np.ndarray
    zero_point: np.ndarray
    qtype: str = "asymmetric_quantized"
    axis: int | None = None
    group_size: int | None = None
    group_axis: int | None = None
    range_min: np.ndarray = field(default_factory=lambda: np.zeros(1, np.float32))
    range_max: np.ndarray = field(default_factory=lambda: np.zeros(1, np.float32))

    @property
    def qmin(self) -> int:
        return qrange(self.dtype, self.qtype)[0]

    @property
    def qmax(self) -> int:
        return qrange(self.dtype, self.qtype)[1]

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable form (stored in ``RKNNModel.quant_params`` and the .rknn header)."""
        out: dict[str, Any] = {
            "dtype": self.dtype, "qtype": self.qtype,
            "qmethod": "layer" if self.axis is None else ("group" if self.group_size else "channel"),
            "scale": [float(v) for v in self.scale.ravel()],
            "zero_point": [int(v) for v in self.zero_point.ravel()],
            "axis": self.axis, "min": [float(v) for v in self.range_min.ravel()],
            "max": [float(v) for v in self.range_max.ravel()],
        }
        if self.group_size:
            out["group_size"] = self.group_size
            out["group_axis"] = self.group_axis
            out["scale_shape"] = list(self.scale.shape)
        if self.qtype == "dynamic_fixed_point":
            out["fl"] = [int(round(-np.log2(float(s)))) for s in self.scale.ravel()]
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "QuantParams":
        shape = tuple(d.get("scale_shape") or (len(d["scale"]),))
        return cls(dtype=d["dtype"], qtype=d.get("qtype", "asymmetric_quantized"),
                   scale=np.asarray(d["scale"], np.float32).reshape(shape),
                   zero_point=np.asarray(d["zero_point"], np.int64).reshape(shape),
                   axis=d.get("axis"), group_size=d.get("group_size"), group_axis=d.get("group_axis"),
                   range_min=np.asarray(d.get("min", [0.0]), np.float32),
                   range_max=np.asarray(d.get("max", [0.0]), np.float32))


def qrange(dtype: str, qtype: str = "asymmetric_quantized") -> tuple[int, int]:
    """Integer range: full for asymmetric, narrow (``±(2^(b−1)−1)``) for symmetric and dfp."""
    lo, hi = RANGES[dtype]
    if qtype != "asymmetric_quantized" and lo < 0:
        return -hi, hi
    return lo, hi


def asymmetric(lo: np.ndarray, hi: np.ndarray, dtype: str) -> tuple[np.ndarray, np.ndarray]:
    """Scale and zero point covering ``[lo, hi]`` (widened to contain 0, so 0 is exact).

    ``s = (hi − lo) / (q_max − q_min)``, ``z = clamp(q_min − round(lo / s), q_min, q_max)`` with ``s`` in
    float64 (returned as float32).
    """
    qmin, qmax = qrange(dtype)
    lo = np.minimum(np.asarray(lo, np.float64), 0.0)
    hi = np.maximum(np.asarray(hi, np.float64), 0.0)
    exact_scale = _scale_floor((hi - lo) / (qmax - qmin))
    # the zero point from the float64 scale, as rknn-toolkit2 derives it: a range symmetric about 0
    # lands exactly on a tie (−7/(14/255) = −127.5 → z = 0), which the float32 scale can tip (z = −1)
    zero = np.clip(qmin - np.rint(lo / exact_scale), qmin, qmax).astype(np.int64)
    return np.atleast_1d(exact_scale.astype(np.float32)), np.atleast_1d(zero)


def symmetric(absmax: np.ndarray, dtype: str) -> tuple[np.ndarray, np.ndarray]:
    """``s = max|r| / (2^(b−1) − 1)``, ``z = 0`` (narrow range, -128 unused for int8)."""
    _, qmax = qrange(dtype, "symmetric_quantized")
    scale = _scale_floor(np.asarray(absmax, np.float64) / qmax).astype(np.float32)
    return np.atleast_1d(scale), np.zeros(np.atleast_1d(scale).shape, np.int64)


def dynamic_fixed_point(absmax: np.ndarray, dtype: str) -> tuple[np.ndarray, np.ndarray]:
    """Power-of-two scale ``s = 2^-fl`` with the largest ``fl`` such that ``max|r|·2^fl ≤ 2^(b−1) − 1``."""
    _, qmax = qrange(dtype, "dynamic_fixed_point")
    absmax = np.asarray(absmax, np.float64)
    absmax = np.where(absmax > 0, absmax, DEAD_SCALE)
    fl = np.floor(np.log2(qmax / absmax))
    fl = np.clip(fl, -64, 64)
    scale = np.exp2(-fl).astype(np.float32)
    return np.atleast_1d(scale), np.zeros(np.atleast_1d(scale).shape, np.int64)


def _broadcast(values: np.ndarray, ndim: int, axis: int | None) -> np.ndarray:
    values = np.asarray(values)
    if axis is None or values.size == 1:
        return values.reshape(()) if values.size == 1 else values
    shape = [1] * ndim
    shape[axis] = values.size
    return values.reshape(shape)


def quantize(x: np.ndarray, params: QuantParams) -> np.ndarray:
    """``q = clamp(round_half_even(x / s) + z, q_min, q_max)`` in the params' numpy dtype."""
    x = np.asarray(x, np.float32)
    scale, zero = expand(params, x.shape)
    q = np.rint(x / scale) + zero
    return np.clip(q, params.qmin, params.qmax).astype(NUMPY_TYPES[params.dtype])


def dequantize(q: np.ndarray, params: QuantParams) -> np.ndarray:
    """``r = s · (q − z)`` as float32."""
    q = np.asarray(q)
    scale, zero = expand(params, q.shape)
    return (scale * (q.astype(np.float32) - zero.astype(np.float32))).astype(np.float32)


def expand(params: QuantParams, shape: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """Scale and zero point broadcastable to a tensor of ``shape`` (per tensor, channel or group)."""
    if params.group_size:
        return _group_expand(params.scale, shape, params), _group_expand(params.zero_point, shape, params)
    axis = None if params.axis is None else params.axis % len(shape)
    return (_broadcast(params.scale.astype(np.float32), len(shape), axis),
            _broadcast(params.zero_point, len(shape), axis))


def _group_expand(values: np.ndarray, shape: tuple[int, ...], params: QuantParams) -> np.ndarray:
    """Group values have shape ``[channels, groups]``; repeat each group ``group_size`` times."""
    axis, gaxis = params.axis % len(shape), params.group_axis % len(shape)
    rep = np.repeat(values, params.group_size, axis=1)[:, :shape[gaxis]]
    view = [1] * len(shape)
    view[axis], view[gaxis] = shape[axis], shape[gaxis]
    order = sorted((axis, gaxis))
    rep = rep if order == [axis, gaxis] else rep.T
    return rep.reshape(view)


def requant_multiplier(s_x: np.ndarray, s_w: np.ndarray, s_y: float) -> np.ndarray:
    """``M = float32(float32(s_x·s_w) / s_y)``, one per output channel."""
    acc_scale = (np.float32(s_x) * np.asarray(s_w, np.float32)).astype(np.float32)
    m = (acc_scale / np.float32(s_y)).astype(np.float32)
    tiny = acc_scale < np.finfo(np.float32).tiny   # a subnormal product: keep its bits in float64
    if np.any(tiny):
        exact = (np.float64(s_x) * np.asarray(s_w, np.float64) / np.float64(s_y)).astype(np.float32)
        m = np.where(tiny, exact, m).astype(np.float32)
    return m


def requantize(acc: np.ndarray, multiplier: np.ndarray, zero_point: int, dtype: str,
               channel_axis: int | None = None) -> np.ndarray:
    """``clamp(round_half_even(float32(acc)·M) + z_y)`` — the integer layers' output stage."""
    m = _broadcast(np.asarray(multiplier, np.float32), acc.ndim, channel_axis)
    y = np.rint(acc.astype(np.float32) * m) + zero_point
    lo, hi = RANGES[dtype]
    return np.clip(y, lo, hi).astype(NUMPY_TYPES[dtype])


def quantize_bias(bias: np.ndarray, s_x: float, s_w: np.ndarray) -> np.ndarray:
    """Bias as int32 with scale ``s_x·s_w`` and zero point 0 (saturated to int32)."""
    acc_scale = (np.float32(s_x) * np.asarray(s_w, np.float32)).astype(np.float32)
    acc_scale = np.where(acc_scale < np.finfo(np.float32).tiny, np.float64(s_x) * np.asarray(s_w, np.float64),
                         acc_scale)
    q = np.rint(np.asarray(bias, np.float64) / acc_scale)
    return np.clip(q, -2**31, 2**31 - 1).astype(np.int32)
