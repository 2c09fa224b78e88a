"""A numpy integer reference for the quantized layers (the test oracle of the integer simulator).

Accumulation is exact (int64); requantization is the documented one (docs/quantization.md,
``openrknn.quant.numerics.requantize``): ``clamp(rne(float32(acc)·M) + z_y)``. Element-wise layers
follow the documented ``quantize(op(dequantize(q…)))`` in float32, step by step as the simulator's
DequantizeLinear / op / QuantizeLinear do. Layouts are NCHW; integers are given as int64 arrays.
"""
from __future__ import annotations

import numpy as np

from openrknn.quant import numerics


def conv_acc(x: np.ndarray, w: np.ndarray, strides=(1, 1), pads=(0, 0, 0, 0), dilations=(1, 1),
             group: int = 1) -> np.ndarray:
    """``Σ x·w`` of a 2-D convolution in int64; ``x`` [N, C, H, W] and ``w`` [M, C/group, kh, kw]
    already minus their zero points; ``pads`` is (top, left, bottom, right)."""
    n, c, _, _ = x.shape
    m, cg, kh, kw = w.shape
    x = np.pad(x.astype(np.int64), ((0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])))
    out_h = (x.shape[2] - dilations[0] * (kh - 1) - 1) // strides[0] + 1
    out_w = (x.shape[3] - dilations[1] * (kw - 1) - 1) // strides[1] + 1
    out = np.zeros((n, m, out_h, out_w), np.int64)
    per_group = m // group
    for g in range(group):
        xs = x[:, g * cg:(g + 1) * cg]
        ws = w[g * per_group:(g + 1) * per_group].astype(np.int64)
        for i in range(kh):
            for j in range(kw):
                top, left = i * dilations[0], j * dilations[1]
                patch = xs[:, :, top:top + strides[0] * out_h:strides[0], left:left + strides[1] * out_w:strides[1]]
                out[:, g * per_group:(g + 1) * per_group] += np.einsum("nchw,mc->nmhw", patch, ws[:, :, i, j])
    return out


def conv_transpose_acc(x: np.ndarray, w: np.ndarray, strides=(1, 1), pads=(0, 0, 0, 0)) -> np.ndarray:
    """``Σ x·w`` of a 2-D transposed convolution (group 1) in int64; ``w`` [C, M, kh, kw]."""
    n, _, h, wd = x.shape
    _, m, kh, kw = w.shape
    full = np.zeros((n, m, (h - 1) * strides[0] + kh, (wd - 1) * strides[1] + kw), np.int64)
    for i in range(kh):
        for j in range(kw):
            full[:, :, i:i + strides[0] * h:strides[0], j:j + strides[1] * wd:strides[1]] += \
                np.einsum("nchw,cm->nmhw", x.astype(np.int64), w[:, :, i, j].astype(np.int64))
    return full[:, :, pads[0]:full.shape[2] - pads[2], pads[1]:full.shape[3] - pads[3]]


def matmul_acc(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a @ b`` in int64 (both already minus their zero points)."""
    return np.matmul(a.astype(np.int64), b.astype(np.int64))


def requantize(acc: np.ndarray, s_x: float, s_w: np.ndarray, y: numerics.QuantParams, channel_axis: int) -> np.ndarray:
    """The integer layers' output stage: ``clamp(rne(float32(acc)·M[c]) + z_y)``, as int64."""
    multiplier = numerics.requant_multiplier(s_x, np.resize(s_w, acc.shape[channel_axis]), float(y.scale.ravel()[0]))
    return numerics.requantize(acc, multiplier, int(y.zero_point.ravel()[0]), y.dtype,
                               channel_axis=channel_axis).astype(np.int64)


def elementwise(op, inputs: list[tuple[np.ndarray, numerics.QuantParams]], y: numerics.QuantParams) -> np.ndarray:
    """``quantize(op(dequantize(q_a), dequantize(q_b)…))``: dequantize is ``float32(q − z)·s``,
    the op one float32 operation, quantize ``clamp(rne(r / s_y) + z_y)``."""
    floats = [(q.astype(np.int64) - int(p.zero_point.ravel()[0])).astype(np.float32) * np.float32(p.scale.ravel()[0])
              for q, p in inputs]
    result = op(*floats).astype(np.float32)
    return numerics.quantize(result, y).astype(np.int64)
