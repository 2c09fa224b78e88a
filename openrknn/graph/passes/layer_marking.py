"""Pass: mark the NPU layer graph onto the nodes (``openrknn.graph.npu_layers``)."""
from __future__ import annotations

import onnx

from openrknn.graph import npu_layers
from openrknn.graph.passes.base import PassResult


def mark_npu_layers(model: onnx.ModelProto) -> PassResult:
    """Group nodes into NPU layers and record the grouping in their metadata."""
    return PassResult(model, npu_layers.mark_layers(model))
