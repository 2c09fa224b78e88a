"""Darknet frontend: ``.cfg`` + ``.weights`` read directly (no Darknet needed), converted to ONNX."""
from __future__ import annotations

from openrknn.frontends.darknet.loader import load_darknet

__all__ = ["load_darknet"]
