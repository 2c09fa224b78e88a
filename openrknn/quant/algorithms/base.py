"""The calibration-algorithm interface and its registry.

An algorithm turns the statistics of a tensor into the real range ``[q_min, q_max]`` its
quantization parameters are computed from (seed 002 §6.1.6). Weights are ranged per row of a
``[rows, values]`` matrix (one row per channel or group; one row for a per-tensor weight).
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from openrknn.errors import ConfigError
from openrknn.quant.observer import TensorStats


class CalibrationAlgorithm:
    """Base class: ``normal`` behaviour (min/max) unless a subclass overrides a method.

    Attributes:
        name: the ``quantized_algorithm`` value.
        needs_histogram: whether a second pass over the dataset is needed.
    """

    name = ""
    needs_histogram = False
    install_hint = ""   # what to install when ``available()`` is False

    @classmethod
    def available(cls) -> bool:
        """Whether what the algorithm needs (an optional extra) is installed; probed without importing it."""
        return True

    def activation_range(self, stats: TensorStats, levels: int) -> tuple[float, float]:
        """Range of an activation quantized to ``levels + 1`` integer values."""
        return stats.min, stats.max

    def weight_range(self, rows: np.ndarray, levels: int, symmetric: bool) -> tuple[np.ndarray, np.ndarray]:
        """Per-row range of a weight matrix ``rows`` ([rows, values])."""
        lo, hi = rows.min(axis=1), rows.max(axis=1)
        if symmetric:
            absmax = np.maximum(np.abs(lo), np.abs(hi))
            return -absmax, absmax
        return lo, hi


_REGISTRY: dict[str, type[CalibrationAlgorithm]] = {}


def register_algorithm(cls: type[CalibrationAlgorithm]) -> type[CalibrationAlgorithm]:
    """Class decorator adding an algorithm under ``cls.name`` (a duplicate name is an error)."""
    if not cls.name or cls.name in _REGISTRY:
        raise ValueError(f"calibration algorithm '{cls.name}' is registered twice or has no name")
    _REGISTRY[cls.name] = cls
    return cls


def get_algorithm(name: str) -> CalibrationAlgorithm:
    """A new instance of the algorithm registered as ``name``."""
    if name not in _REGISTRY:
        raise ConfigError(f"quantized_algorithm '{name}' is not valid; choose one of {sorted(_REGISTRY)}")
    return _REGISTRY[name]()


def algorithm_class(name: str) -> type[CalibrationAlgorithm] | None:
    """The class registered as ``name`` (None when there is none)."""
    return _REGISTRY.get(name)


def algorithm_names() -> list[str]:
    return sorted(_REGISTRY)


Factory = Callable[[], CalibrationAlgorithm]
