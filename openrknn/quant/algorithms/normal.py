"""``normal``: the range is the observed minimum and maximum (seed 002 (6-6), (6-7)).

``q_min = min V``, ``q_max = max V``: no clipping error, one pass over the dataset, but a single
outlier widens the scale for every value.
"""
from __future__ import annotations

import importlib.util

from openrknn.quant.algorithms.base import CalibrationAlgorithm, register_algorithm


@register_algorithm
class Normal(CalibrationAlgorithm):
    name = "normal"


@register_algorithm
class AdaRound(Normal):
    """``adaround``: the ranges of ``normal``; the weight rounding is learned by :mod:`openrknn.quant.adaround`."""

    name = "adaround"
    install_hint = "quantized_algorithm 'adaround' needs PyTorch: pip install 'openrknn[torch]'"

    @classmethod
    def available(cls) -> bool:
        try:
            return importlib.util.find_spec("torch") is not None
        except ValueError:   # torch set to None in sys.modules (import blocked)
            return False
