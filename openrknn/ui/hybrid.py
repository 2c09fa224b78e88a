"""Hybrid quantization from the workbench: rebuild with chosen layers kept in float16.

The same mechanism as ``hybrid_quantization_step1/2`` (``QuantOverrides.float_layers``), without the
step-1 files in the current folder that those documented calls write.
"""
from __future__ import annotations

from typing import Any, Sequence

from openrknn import log
from openrknn.errors import RKNNError


def rebuild_with_float_layers(rknn: Any, dataset: str, layers: Sequence[str]) -> int:
    """Quantize ``rknn``'s loaded model again, ``layers`` (node names) in float16; 0 or -1 like the API."""
    from openrknn.compile import build_model
    from openrknn.quant.overrides import QuantOverrides
    if rknn._source is None:
        log.error("hybrid: the source model is not loaded (a loaded .rknn cannot be re-quantized)")
        return -1
    try:
        model = build_model(rknn._source, rknn._cfg(), True, dataset, None, rknn._custom_ops,
                            QuantOverrides(float_layers=frozenset(layers)))
    except RKNNError as e:
        log.error(f"hybrid: {e}")
        return -1
    rknn._model, rknn._runtime, rknn._export_path = model, None, None   # what build() leaves behind
    log.info(f"hybrid: rebuilt with {len(layers)} layer(s) in float16: {list(layers)}")
    return 0
