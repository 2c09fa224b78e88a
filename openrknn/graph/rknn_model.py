"""The compiled model record passed between stages (build → sim / profile / model_file).

``graph`` is the *structural* graph: the source model after the passes of ``optimization_level``
with the input normalisation embedded, one ONNX node per NPU layer. How each tensor executes on
the NPU is data beside it (``tensor_dtypes``, ``quant_params``); the simulator lowers that to an
executable ONNX graph (fp16 rounding casts, Quantize/DequantizeLinear) when the runtime starts.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import onnx

LAYOUT_NCHW = "NCHW"
LAYOUT_NHWC = "NHWC"
LAYOUT_UNDEFINED = "UNDEFINED"


@dataclass
class TensorSpec:
    """A model input or output as the user sees it (original framework layout)."""

    name: str
    shape: list[int]
    dtype: str = "float32"          # numpy dtype name of the original model's tensor
    layout: str = LAYOUT_UNDEFINED  # NCHW (ONNX/Caffe/PyTorch images), NHWC (TF/TFLite), UNDEFINED otherwise

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "shape": list(self.shape), "dtype": self.dtype, "layout": self.layout}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "TensorSpec":
        return cls(name=d["name"], shape=[int(v) for v in d["shape"]], dtype=d["dtype"], layout=d["layout"])


@dataclass
class InputPreprocess:
    """Normalisation baked into the model for one input: ``x' = (x[reorder] - mean) / std``."""

    input_name: str
    mean: list[float] | None = None
    std: list[float] | None = None
    reorder: list[int] | None = None     # Toolkit1 reorder_channel; None keeps the order
    normalized_name: str = ""            # graph tensor holding the normalised input

    def to_dict(self) -> dict[str, Any]:
        return {"input_name": self.input_name, "mean": self.mean, "std": self.std,
                "reorder": self.reorder, "normalized_name": self.normalized_name}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "InputPreprocess":
        return cls(**d)


@dataclass
class RKNNModel:
    """Everything needed to run, profile or save a built model.

    Attributes:
        graph: structural ONNX graph (float32 values for float layers; quantized layers carry
            their weights as quantized initializers described by ``quant_params``).
        inputs / outputs: user-visible tensors in the original layout.
        preprocess: one entry per input that has normalisation embedded in ``graph``.
        platforms: target platforms (lower case).
        float_dtype: how float layers run: 'float16' (the NPU) or 'float32' (reference path).
        quantized_dtype: None for a float model, else the config name (e.g. 'w8a8').
        tensor_dtypes: execution dtype of each graph tensor ('float16', 'int8', 'uint8', 'int16', ...).
        quant_params: per-tensor quantization parameters (see ``openrknn.quant``).
        custom_string: user string stored in the model.
        rknn_batch_size: batch the model was built for.
        metadata: free-form build facts (toolkit version, source framework, options).
        golden: float32 graph before quantization/fp16 (kept in memory only, for accuracy analysis).
    """

    graph: onnx.ModelProto
    inputs: list[TensorSpec]
    outputs: list[TensorSpec]
    preprocess: list[InputPreprocess] = field(default_factory=list)
    platforms: list[str] = field(default_factory=lambda: ["rk3566"])
    float_dtype: str = "float16"
    quantized_dtype: str | None = None
    tensor_dtypes: dict[str, str] = field(default_factory=dict)
    quant_params: dict[str, dict[str, Any]] = field(default_factory=dict)
    custom_string: str | None = None
    rknn_batch_size: int = 1
    metadata: dict[str, Any] = field(default_factory=dict)
    golden: onnx.ModelProto | None = None

    @property
    def is_quantized(self) -> bool:
        return self.quantized_dtype is not None
