"""PyTorch frontend: TorchScript ``.pt`` files become ONNX through torch's own exporter."""
from __future__ import annotations

from openrknn.frontends.pytorch.loader import load_pytorch

__all__ = ["load_pytorch"]
