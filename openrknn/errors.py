"""The exception tree of openrknn.

Library code raises these; the public ``RKNN`` API turns them into the documented
``E`` log line and a ``-1`` return value.
"""
from __future__ import annotations


class RKNNError(Exception):
    """Base class of every error openrknn raises on purpose."""


class ConfigError(RKNNError):
    """A ``config()`` value is invalid."""


class ModelLoadError(RKNNError):
    """A source model file is missing, malformed or cannot be converted."""


class UnsupportedOpError(ModelLoadError):
    """The model uses an operator the toolkit does not support."""

    def __init__(self, op_type: str, node_name: str = "", framework: str = "ONNX", hint: str = "") -> None:
        where = f" (node '{node_name}')" if node_name else ""
        msg = f"{framework} operator '{op_type}'{where} is not supported"
        if hint:
            msg += f"; {hint}"
        super().__init__(msg)
        self.op_type = op_type
        self.node_name = node_name


class BuildError(RKNNError):
    """``build()`` failed (graph passes, lowering, quantization)."""


class QuantizationError(BuildError):
    """Calibration data or quantization settings are unusable."""


class ModelFileError(RKNNError):
    """A ``.rknn`` file is corrupt, foreign or of an unknown version."""


class RuntimeStateError(RKNNError):
    """An API was called in the wrong order (e.g. inference before init_runtime)."""


class InferenceInputError(RKNNError):
    """Inputs given to ``inference()`` do not match the model."""


class NotSupportedError(RKNNError):
    """A documented option that this toolkit cannot provide (the message says why)."""


class MissingExtraError(RKNNError):
    """An optional dependency is not installed; the message names the extra that brings it."""

    def __init__(self, purpose: str, extra: str, module: str = "") -> None:
        needs = f" ({module})" if module else ""
        super().__init__(f"{purpose} needs the '{extra}' extra{needs}: pip install 'openrknn[{extra}]'")
        self.extra = extra
        self.module = module


# Optional modules and the extra that installs each (pyproject.toml's optional-dependencies).
EXTRA_OF_MODULE = {
    "msgpack": "serve", "cryptography": "crypto", "tflite": "tflite", "flatbuffers": "tflite",
    "ai_edge_litert": "litert", "matplotlib": "plot", "pycocotools": "eval", "scipy": "eval", "ray": "ray",
    "torch": "torch", "starlette": "ui", "uvicorn": "ui", "multipart": "ui", "python_multipart": "ui",
}


def missing_extra_from(error: ImportError, purpose: str) -> MissingExtraError | None:
    """The ``MissingExtraError`` an ImportError of an optional module stands for (None for other modules)."""
    if isinstance(error, MissingExtraError):
        return error
    module = (getattr(error, "name", None) or "").split(".")[0]
    extra = EXTRA_OF_MODULE.get(module)
    return MissingExtraError(purpose, extra, module) if extra else None
