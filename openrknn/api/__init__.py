"""Public API: the ``RKNN`` facade (``rknn.api.RKNN``) and ``RKNNLite`` (``rknnlite.api.RKNNLite``).

``RKNN`` is imported on first use, so the helpers in ``api/common.py`` (``api_call``) and ``api/devices.py``
can be used by ``runtime/`` without loading the facade and every stage behind it.
"""
from __future__ import annotations

from typing import Any

__all__ = ["RKNN"]


def __getattr__(name: str) -> Any:
    if name == "RKNN":
        from openrknn.api.rknn import RKNN
        return RKNN
    raise AttributeError(f"module 'openrknn.api' has no attribute '{name}'")
