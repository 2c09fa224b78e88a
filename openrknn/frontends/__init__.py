"""Frontends: every source format becomes an ONNX graph (the graph in the middle).

Each loader returns a :class:`SourceModel`. Loaders keep source layer names as node names,
emit float32 ONNX (opset ``FRONTEND_OPSET``), and raise ``ModelLoadError`` /
``UnsupportedOpError`` naming the layer and the problem.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import onnx

from openrknn.errors import ConfigError, ModelLoadError

FRONTEND_OPSET = 17


def require_file(path: Any, kind: str, hint: str = "") -> None:
    """Raise ``ModelLoadError`` naming the missing file, where it was looked for, and the fix."""
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


# ---------------------------------------------------------------- the one framework → loader table
# framework → (what its model file is, its second file or None): the workbench's form shows these
FRAMEWORKS: dict[str, tuple[str, str | None]] = {
    "onnx": (".onnx", None), "tflite": (".tflite", None), "pytorch": ("TorchScript .pt", None),
    "tensorflow": ("frozen .pb", None), "caffe": (".prototxt", ".caffemodel"), "darknet": (".cfg", ".weights"),
    "mxnet": ("symbol .json", ".params"),
}
# framework → the facade's load_<framework> argument names: (model file, second file, the options it takes)
_LOAD_ARGUMENTS: dict[str, tuple[str, str | None, tuple[str, ...]]] = {
    "onnx": ("model", None, ("inputs", "outputs", "input_size_list")),
    "tflite": ("model", None, ()),
    "pytorch": ("model", None, ("input_size_list",)),
    "tensorflow": ("tf_pb", None, ("inputs", "outputs", "input_size_list")),
    "caffe": ("model", "blobs", ()),
    "darknet": ("model", "weight", ()),
    "mxnet": ("symbol", "params", ("input_size_list",)),
}
_EXTENSIONS = {".onnx": "onnx", ".tflite": "tflite", ".pt": "pytorch", ".pth": "pytorch", ".pb": "tensorflow",
               ".prototxt": "caffe", ".cfg": "darknet"}


def framework_of(path: str) -> str | None:
    """The framework a model file's extension names (None when the extension does not tell)."""
    return _EXTENSIONS.get(os.path.splitext(str(path))[1].lower())


def load(rknn: Any, framework: str, model: str, weights: str | None = None, inputs: Any = None,
         outputs: Any = None, input_size_list: Any = None) -> int:
    """Load ``model`` (and its second file ``weights``) of ``framework`` into ``rknn`` — an ``RKNN`` object —
    through its documented ``load_<framework>`` call, so the E lines, return code and state are the facade's.

    The one place that turns a framework name into a loader call (the CLI, ``rknn_convert`` and the
    workbench all go through it). Options a framework's loader does not take are not passed;
    TensorFlow's required inputs/outputs/input_size_list default to empty lists.

    Raises:
        ConfigError: ``framework`` is not one of :data:`FRAMEWORKS`.
    """
    if framework not in _LOAD_ARGUMENTS:
        raise ConfigError(f"framework '{framework}' is not one of {list(FRAMEWORKS)}")
    model_arg, weights_arg, takes = _LOAD_ARGUMENTS[framework]
    kwargs: dict[str, Any] = {model_arg: model}
    if weights_arg:
        kwargs[weights_arg] = weights
    given = {"inputs": inputs, "outputs": outputs, "input_size_list": input_size_list}
    for name in takes:
        value = given[name]
        kwargs[name] = (value or []) if framework == "tensorflow" else value
    return getattr(rknn, f"load_{framework}")(**kwargs)
