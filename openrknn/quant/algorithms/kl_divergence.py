"""``kl_divergence``: the range whose quantized histogram is closest to the float one (seed 002 (6-8)).

For each candidate range ``[r·min, r·max]`` (``r`` on a grid from 1 down to the smallest range
that still spans ``levels`` histogram bins)::

    P = histogram bins inside the range, values outside folded into the edge bins
    Q = the bins inside the range (outliers not folded) merged into ``levels`` equal steps, each
        step's mass spread evenly over the bins non-empty in P
    KL(P‖Q) = Σ P_i · log(P_i / Q_i)         (normalised, empty P_i contribute 0)

and the range with the smallest divergence is kept. Exact zeros (ReLU) are left out of the
histogram: they are representable whatever the range. Candidates stop at half the observed range
(``MIN_RATIO``): with 255 levels and sparse tails the divergence otherwise rewards clipping more
than the output accuracy does. One histogram per tensor, no re-run of the
network. 16-bit types have more levels than histogram bins: their range stays min/max.
"""
from __future__ import annotations

import numpy as np

from openrknn.quant.algorithms.base import CalibrationAlgorithm, register_algorithm
from openrknn.quant.observer import BINS, TensorStats

CANDIDATES = 64
MIN_RATIO = 0.5


def kl_of_range(hist: np.ndarray, first: int, last: int, levels: int) -> float:
    """KL divergence of bins ``[first, last)`` (outliers folded in) against their quantized copy."""
    inside = hist[first:last].astype(np.float64)
    p = inside.copy()
    p[0] += hist[:first].sum()
    p[-1] += hist[last:].sum()
    nonzero = p > 0
    bounds = np.linspace(0, p.size, levels + 1).astype(np.int64)
    bounds = np.unique(bounds[:-1])
    mass = np.add.reduceat(inside, bounds)
    used = np.add.reduceat(nonzero.astype(np.float64), bounds)
    per_bin = np.divide(mass, used, out=np.zeros_like(mass), where=used > 0)
    q = np.repeat(per_bin, np.diff(np.append(bounds, p.size))) * nonzero
    p_sum, q_sum = p.sum(), q.sum()
    if p_sum == 0 or q_sum == 0:
        return np.inf
    p, q = p / p_sum, q / q_sum
    mask = p > 0
    return float(np.sum(p[mask] * np.log(p[mask] / np.maximum(q[mask], 1e-30))))


@register_algorithm
class KLDivergence(CalibrationAlgorithm):
    name = "kl_divergence"
    needs_histogram = True

    def activation_range(self, stats: TensorStats, levels: int) -> tuple[float, float]:
        if stats.hist is None or stats.max <= stats.min or levels >= BINS // 2:
            return stats.min, stats.max
        width = (stats.max - stats.min) / BINS
        zero_bin = int(np.clip(np.floor(-stats.min / width), 0, BINS - 1))
        hist = stats.hist.copy()
        hist[zero_bin] = max(0, hist[zero_bin] - stats.zeros)   # exact zeros (ReLU) are representable
        best, best_range = np.inf, (stats.min, stats.max)
        for ratio in np.linspace(1.0, MIN_RATIO, CANDIDATES):
            first = int(round(zero_bin * (1 - ratio)))
            last = int(round(zero_bin + (BINS - zero_bin) * ratio))
            if last - first < levels:
                break
            kl = kl_of_range(hist, first, last, levels)
            if kl < best:
                best = kl
                best_range = (stats.min + first * width, stats.min + last * width)
        return min(best_range[0], 0.0) if stats.min < 0 else best_range[0], best_range[1]
