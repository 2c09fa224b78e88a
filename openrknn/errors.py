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
