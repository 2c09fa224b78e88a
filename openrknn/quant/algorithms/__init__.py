"""Calibration algorithms, one per module, registered by name (see ``base``)."""
from __future__ import annotations

from openrknn.quant.algorithms.base import (CalibrationAlgorithm, algorithm_class, algorithm_names, get_algorithm,
                                            register_algorithm)
from openrknn.quant.algorithms import kl_divergence, mmse, normal  # noqa: F401  (registration)

__all__ = ["CalibrationAlgorithm", "algorithm_class", "algorithm_names", "get_algorithm", "register_algorithm"]
