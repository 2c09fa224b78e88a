"""``from rknn.api import RKNN`` — RKNN-Toolkit / RKNN-Toolkit2 compatible entry point."""
from openrknn.api.rknn import RKNN

__all__ = ["RKNN"]
