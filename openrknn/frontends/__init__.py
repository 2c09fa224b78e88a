"""Frontends: every source format becomes an ONNX graph (the graph in the middle).

Each loader returns a :class:`SourceModel`. Loaders keep source layer names as node names,
emit float32 ONNX (opset ``FRONTEND_OPSET``), and raise ``ModelLoadError`` /
``UnsupportedOpError`` naming the layer and the problem.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import os

import onnx

FRONTEND_OPSET = 17


def require_file(path: Any, kind: str, hint: str = "") -> None:
    """Raise ``ModelLoadError`` naming the missing file, where it was looked for, and the fix."""
    from openrknn.errors import ModelLoadError
    if isinstance(path, (str, os.PathLike)) and os.path.isfile(path):
        return
    if not isinstance(path, (str, os.PathLike)) or not str(path):
        raise ModelLoadError(f"{kind} path {path!r} is not a file name; pass the path of the file")
    where = os.path.abspath(path)
    what = "is a folder, not a file" if os.path.isdir(path) else "does not exist"
    fix = ("pass the file inside it" if os.path.isdir(path) else
           f"check the path (relative paths start from the current folder '{os.getcwd()}') "
           "or download/copy the model there first")
    raise ModelLoadError(f"{kind} '{path}' {what} (looked for '{where}'){'; ' + hint if hint else ''}; {fix}")


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
