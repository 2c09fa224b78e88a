"""Public API: the ``RKNN`` facade (``rknn.api.RKNN``) and ``RKNNLite`` (``rknnlite.api.RKNNLite``)."""
from __future__ import annotations

from openrknn.api.rknn import RKNN

__all__ = ["RKNN"]
