"""Quantization stage: calibration datasets, settings, algorithms, weight/activation quantization.

Entry points used by ``openrknn.compile``:

* :func:`is_prequantized` / :func:`import_quantized` — QDQ / QOperator ONNX sources keep their parameters;
* :class:`QuantSettings` — the validated ``quantized_dtype`` / ``quantized_method`` / ``quantized_algorithm``;
* :func:`openrknn.quant.dataset.load_dataset` — the documented ``dataset.txt``;
* :func:`quantize_model` — calibrate and quantize a built float model.

The arithmetic is in :mod:`openrknn.quant.numerics`; docs/quantization.md states it in full.
"""
from __future__ import annotations

from openrknn.quant import dataset
from openrknn.quant.prequantized import import_quantized, is_prequantized
from openrknn.quant.quantizer import quantize_model
from openrknn.quant.settings import DTYPES, QuantSettings

__all__ = ["DTYPES", "QuantSettings", "dataset", "import_quantized", "is_prequantized", "quantize_model"]
