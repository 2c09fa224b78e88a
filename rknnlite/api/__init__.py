"""``from rknnlite.api import RKNNLite`` — RKNN-Toolkit Lite2 compatible entry point."""
from openrknn.runtime.lite import RKNNLite

__all__ = ["RKNNLite"]
