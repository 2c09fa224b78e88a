"""Streaming statistics of one tensor over the calibration set, in bounded memory.

Pass 1 (:meth:`TensorStats.update_range`) keeps min, max and the count of exact zeros; pass 2
(:meth:`TensorStats.update_histogram`), run only for algorithms that need it, fills a fixed
``BINS``-bin histogram over ``[min, max]``. Nothing else about the tensor is kept.
"""
from __future__ import annotations

import numpy as np

BINS = 2048


class TensorStats:
    """Observer of one float tensor: ``update_*`` take values, the algorithms read the fields.

    Attributes:
        min / max: extreme finite values seen.
        count / zeros: number of values seen, and of exact zeros among them (ReLU outputs).
        hist: ``BINS`` counts over ``[min, max]`` (None until pass 2).
    """

    def __init__(self) -> None:
        self.min = np.inf
        self.max = -np.inf
        self.count = 0
        self.zeros = 0
        self.hist: np.ndarray | None = None
        self.channel_sum: np.ndarray | None = None   # per channel (axis 1, or the last axis of 2-D/3-D)
        self.channel_count = 0
        # per update (one calibration sample): its channel means and its mean square, so bias
        # correction can be checked on held-out samples (quantizer._correct_biases)
        self.sample_means: list[np.ndarray] = []
        self.sample_power: list[float] = []

    @property
    def seen(self) -> bool:
        return self.count > 0

    def update_range(self, values: np.ndarray) -> None:
        values = np.asarray(values, np.float32)
        if values.size == 0:
            return
        finite = values if np.isfinite(values).all() else values[np.isfinite(values)]
        if finite.size == 0:
            return
        self.min = min(self.min, float(finite.min()))
        self.max = max(self.max, float(finite.max()))
        self.count += int(finite.size)
        self.zeros += int(finite.size - np.count_nonzero(finite))
        if values.ndim >= 2 and np.isfinite(values).all():
            axis = 1 if values.ndim == 4 else values.ndim - 1
            sums = np.moveaxis(values, axis, 0).reshape(values.shape[axis], -1).sum(axis=1, dtype=np.float64)
            per_channel = values.size // values.shape[axis]
            if self.channel_sum is None or self.channel_sum.shape != sums.shape:
                self.channel_sum, self.channel_count = sums, per_channel
                self.sample_means, self.sample_power = [], []
            else:
                self.channel_sum += sums
                self.channel_count += per_channel
            self.sample_means.append(sums / per_channel)
            self.sample_power.append(float(np.mean(np.square(values, dtype=np.float64))))

    def channel_mean(self) -> np.ndarray | None:
        """Mean of each channel over everything seen (for bias correction)."""
        return None if self.channel_sum is None or not self.channel_count else self.channel_sum / self.channel_count

    def update_histogram(self, values: np.ndarray) -> None:
        if not self.seen:
            return
        if self.hist is None:
            self.hist = np.zeros(BINS, np.int64)
        values = np.asarray(values, np.float32).ravel()
        values = values[np.isfinite(values)]
        width = (self.max - self.min) / BINS
        if width <= 0:
            self.hist[0] += values.size
            return
        index = ((values - np.float32(self.min)) * np.float32(1.0 / width)).astype(np.int32)
        np.clip(index, 0, BINS - 1, out=index)
        self.hist += np.bincount(index, minlength=BINS)

    def edges(self) -> np.ndarray:
        return np.linspace(self.min, self.max, BINS + 1)
