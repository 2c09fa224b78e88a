"""Frontends: every source format becomes an ONNX graph (the graph in the middle).

Each loader returns a :class:`SourceModel`. Loaders keep source layer names as node names,
emit float32 ONNX (opset ``FRONTEND_OPSET``), and raise ``ModelLoadError`` /
``UnsupportedOpError`` naming the layer and the problem.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import onnx

FRONTEND_OPSET = 17


@dataclass
class SourceModel:
    """A loaded source model, already converted to ONNX.

    Attributes:
        model: the ONNX model (float32 weights unless the source was quantized).
        framework: 'onnx', 'tflite', 'pytorch', 'tensorflow', 'caffe', 'darknet' or 'mxnet'.
        input_layouts: layout of each graph input as the user feeds it: 'NCHW', 'NHWC' or
            'UNDEFINED'. Missing entries mean NCHW for 4-D inputs, UNDEFINED otherwise.
        quant_params: quantization parameters imported from a pre-quantized source
            (tensor name -> {'scale': [...], 'zero_point': [...], 'axis': int|None, 'dtype': 'int8'|'uint8'|...}).
        input_values: constant initial values for inputs (load_onnx ``input_initial_val``).
    """

    model: onnx.ModelProto
    framework: str
    input_layouts: dict[str, str] = field(default_factory=dict)
    quant_params: dict[str, dict[str, Any]] = field(default_factory=dict)
    input_values: dict[str, Any] = field(default_factory=dict)
