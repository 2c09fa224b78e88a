"""Hybrid quantization from the workbench: rebuild with chosen layers kept in float16.

The same mechanism as ``hybrid_quantization_step1/2`` (``QuantOverrides.float_layers``), without the
step-1 files in the current folder that those documented calls write.
"""
from __future__ import annotations

from typing import Any, Sequence

from openrknn import log, pipeline
from openrknn.analysis.tradeoff import TradeoffPoint
from openrknn.errors import RKNNError
from openrknn.report.svg import esc
from openrknn.report.tradeoff import tradeoff_svg


def rebuild_with_float_layers(rknn: Any, dataset: str, layers: Sequence[str]) -> int:
    """Quantize ``rknn``'s loaded model again, ``layers`` (node names) in float16; 0 or -1 like the API."""
    if rknn._source is None:
        log.error("hybrid: the source model is not loaded (a loaded .rknn cannot be re-quantized)")
        return -1
    try:
        model = pipeline.rebuild_with_float_layers(rknn._source, rknn._cfg(), dataset, rknn._custom_ops, layers)
    except RKNNError as e:
        log.error(f"hybrid: {e}")
        return -1
    rknn._model, rknn._runtime, rknn._export_path = model, None, None   # what build() leaves behind
    log.info(f"hybrid: rebuilt with {len(layers)} layer(s) in float16: {list(layers)}")
    return 0


def auto_hybrid_section(facts: dict[str, Any] | None) -> str:
    """The Hybrid page's auto_hybrid part: what ``build(auto_hybrid=True)`` chose, at what estimated
    speed, and the trade-off plot — the points ``auto_hybrid_report`` measured, else the plain
    build against the choice. Empty when the model was not built with auto_hybrid."""
    if not facts:
        return ""
    platform = facts.get("platform", "")
    before, after = (facts.get("time_us") or [0.0, 0.0])[:2]
    fps = [round(1e6 / t, 1) if t else 0.0 for t in (before, after)]
    layers = facts.get("custom_quantize_layers") or {}
    cosines = facts.get("output_cosine") or [float("nan")]
    points = [TradeoffPoint(**{**p, "fps": dict(p["fps"])}) for p in facts.get("tradeoff") or []]
    if not points and platform and "plain_cosine" in facts:
        points = [TradeoffPoint(0, 0, 0, facts["plain_cosine"], False, {platform: fps[0]}),
                  TradeoffPoint(len(layers), len(facts.get("float16_layers", [])), len(facts.get("int16_layers", [])),
                                min(cosines), bool(facts.get("met")), {platform: fps[1]}, chosen=True)]
    summary = (f"auto_hybrid moved {len(layers)} layer(s) ({', '.join(f'{k}: {v}' for k, v in layers.items()) or 'none'}); "
               f"output cosine {min(cosines):.5f}{'' if facts.get('met') else ' (threshold missed)'}; "
               f"estimated {fps[0]} → {fps[1]} FPS on {platform}"
               + (f"; the pruning pass dropped {len(facts['pruned_layers'])} of the first {facts.get('prefix_moves')} "
                  f"moves of the search order" if facts.get("pruned_layers") else ""))
    return (f'<section id="auto-hybrid"><h2>auto_hybrid</h2><p class="hint">{esc(summary)}</p>'
            + (tradeoff_svg(points, facts.get("cos_thresh", min(cosines))) if points else "") + "</section>")
