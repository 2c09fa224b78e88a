"""TensorFlow op converters, one module per op family, registered in ``CONVERTERS``.

A converter is ``fn(ctx, node) -> Value | list[Value]``: it reads its inputs from the
:class:`~openrknn.frontends.tensorflow.context.Context`, emits ONNX nodes named after the
TensorFlow node and returns the value of each TensorFlow output.
"""
from __future__ import annotations

from openrknn.frontends.onnx_builder import Registry

CONVERTERS = Registry("TensorFlow")

# Importing the modules registers their converters (explicit list, one family per module).
from openrknn.frontends.tensorflow.ops import conv, elementwise, pool, resize, shape, static  # noqa: E402,F401
