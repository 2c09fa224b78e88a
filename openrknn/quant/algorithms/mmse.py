"""``mmse``: the range minimising the mean squared quantization error (seed 002 (6-9)).

``argmin_{lo, hi} E[(V − V̂(lo, hi))²]``, evaluated on the tensor's histogram instead of
re-quantizing the data per candidate. For a value ``x`` (a bin centre, weighted by its count)::

    err(x) = (x − clip(x, lo, hi))²          clipping error, outside the range
           + s² / 12                          rounding error, inside (uniform within a step)

with ``s = (hi − lo) / levels``; exact zeros (ReLU) are representable and cost nothing. The
search is a grid of ``GRID×GRID`` shrink factors of ``(min, max)``; the two clipping sums
separate, so a tensor costs ``2·GRID·512 + GRID²`` operations. Weights: per row, a grid of clip ratios of ``max|w|``
is quantized exactly and the ratio with the smallest squared error kept.
"""
from __future__ import annotations

import numpy as np

from openrknn.quant.algorithms.base import CalibrationAlgorithm, register_algorithm
from openrknn.quant.observer import TensorStats

GRID = 40
SEARCH_BINS = 512
WEIGHT_RATIOS = np.linspace(1.0, 0.5, 26)


def histogram_mse(centers: np.ndarray, counts: np.ndarray, zeros: int, lo: np.ndarray, hi: np.ndarray,
                  levels: int) -> np.ndarray:
    """Expected squared error for every pair ``(lo[i], hi[j])``: a ``[len(lo), len(hi)]`` matrix.

    The clipping terms separate (``lo`` only clips below, ``hi`` above), so each side costs
    ``O(GRID·bins)`` and the pairs only combine vectors.
    """
    lo_e, hi_e = np.minimum(lo, 0.0), np.maximum(hi, 0.0)
    below = np.maximum(lo_e[:, None] - centers[None, :], 0.0)
    above = np.maximum(centers[None, :] - hi_e[:, None], 0.0)
    clip_lo = (below ** 2 * counts).sum(axis=1)
    clip_hi = (above ** 2 * counts).sum(axis=1)
    out_lo = ((below > 0) * counts).sum(axis=1)
    out_hi = ((above > 0) * counts).sum(axis=1)
    inside = np.maximum(counts.sum() - out_lo[:, None] - out_hi[None, :] - zeros, 0.0)
    step = (hi_e[None, :] - lo_e[:, None]) / levels
    return clip_lo[:, None] + clip_hi[None, :] + step ** 2 / 12.0 * inside


@register_algorithm
class MMSE(CalibrationAlgorithm):
    name = "mmse"
    needs_histogram = True

    def activation_range(self, stats: TensorStats, levels: int) -> tuple[float, float]:
        if stats.hist is None or stats.max <= stats.min:
            return stats.min, stats.max
        counts = stats.hist.reshape(SEARCH_BINS, -1).sum(axis=1).astype(np.float64)
        edges = np.linspace(stats.min, stats.max, SEARCH_BINS + 1)
        centers = (edges[:-1] + edges[1:]) / 2
        ratios = np.geomspace(1.0, 0.02, GRID)
        lo, hi = stats.min * ratios, stats.max * ratios
        err = histogram_mse(centers, counts, stats.zeros, lo, hi, levels)
        i, j = np.unravel_index(int(np.argmin(err)), err.shape)
        return float(lo[i]), float(hi[j])

    def weight_range(self, rows: np.ndarray, levels: int, symmetric: bool) -> tuple[np.ndarray, np.ndarray]:
        lo, hi = super().weight_range(rows, levels, symmetric)
        best_err = np.full(rows.shape[0], np.inf)
        best = np.ones(rows.shape[0])
        for ratio in WEIGHT_RATIOS:
            l, h = np.minimum(lo * ratio, 0.0), np.maximum(hi * ratio, 0.0)
            step = np.maximum((h - l) / levels, 1e-30)[:, None]
            zero = np.rint(-l[:, None] / step)
            q = np.clip(np.rint(rows / step) + zero, 0, levels)
            err = ((rows - (q - zero) * step) ** 2).sum(axis=1)
            better = err < best_err
            best_err[better], best[better] = err[better], ratio
        return lo * best, hi * best
