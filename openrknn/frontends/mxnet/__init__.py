"""MXNet frontend: symbol ``.json`` + ``.params`` read directly (no MXNet needed), converted to ONNX."""
from __future__ import annotations

from openrknn.frontends.mxnet.loader import load_mxnet

__all__ = ["load_mxnet"]
