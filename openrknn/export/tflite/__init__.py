"""Export a quantized model as a fully-int8 TFLite flatbuffer for the open NPU stack (Mesa Teflon)
or LiteRT on the CPU (docs/deployment.md).

Example:
    >>> # report = export_tflite(rknn_model, "model.tflite")   # the RKNN facade's export_tflite
"""
from __future__ import annotations

import json
import os

from openrknn import log
from openrknn.errors import NotSupportedError
from openrknn.export.tflite.convert import LayerRow, build_graph, build_layer_graph
from openrknn.export.tflite.flatbuffer import serialize
from openrknn.export.tflite.target import require_symmetric_weights
from openrknn.graph.rknn_model import RKNNModel
from openrknn.model_file.container import write_atomic
from openrknn.quant.settings import resolve_alias

__all__ = ["export_tflite", "tflite_bytes", "format_report", "build_layer_graph", "serialize", "LayerRow"]


def _require_packages() -> None:
    try:
        import flatbuffers  # noqa: F401
        import tflite  # noqa: F401
    except ImportError as e:
        raise NotSupportedError(f"the TFLite export needs the 'tflite' and 'flatbuffers' packages ({e}); "
                                "install them with: pip install 'openrknn[tflite]'") from e


def tflite_bytes(model: RKNNModel, float_io: bool = True) -> tuple[bytes, list[LayerRow]]:
    """The ``.tflite`` bytes of a quantized ``model`` and the per-layer report rows.

    Raises:
        NotSupportedError: the model is not int8-quantized, or a package is missing.
        UnsupportedOpError: a layer has no TFLite form (the message names the op).
    """
    _require_packages()
    if resolve_alias(model.quantized_dtype or "") != "w8a8":
        raise NotSupportedError(f"export_tflite needs a model built with do_quantization=True and "
                                f"quantized_dtype='w8a8' (this one is {model.quantized_dtype or model.float_dtype}): "
                                "TFLite's integer kernels and Teflon take int8")
    require_symmetric_weights(model, "export_tflite")
    graph, rows = build_graph(model, float_io)
    return serialize(graph), rows



def format_report(rows: list[LayerRow]) -> str:
    """The export report as a printed table: one row per NPU layer, where Teflon would run it and why."""
    width = max([len(r.layer) for r in rows] + [5])
    ops_width = max([len(r.ops) for r in rows] + [3])
    lines = [f"{'layer':<{width}}  {'tflite ops':<{ops_width}}  {'runs on':<12}  why",
             f"{'-' * width}  {'-' * ops_width}  {'-' * 12}  ---"]
    lines += [f"{r.layer:<{width}}  {r.ops:<{ops_width}}  {r.runs_on:<12}  {r.why}" for r in rows]
    npu = sum(r.runs_on.startswith("NPU") for r in rows)
    lines.append(f"{npu} of {len(rows)} layers on the NPU (the layers for Teflon's Rockchip backend); the others run "
                 "on the CPU in LiteRT")
    return "\n".join(lines)


def export_tflite(model: RKNNModel, path: str, float_io: bool = True, report_path: str | None = None,
                  quiet: bool = False) -> list[dict[str, str]]:
    """Write ``model`` as ``path`` (atomic) and return the report (one dict per layer); the report is
    printed and, with ``report_path``, written as JSON."""
    data, rows = tflite_bytes(model, float_io)
    per_channel = [n for n, r in model.quant_params.items() if r["dtype"] == "int8" and len(r["scale"]) > 1]
    if per_channel:
        log.warning(f"export_tflite: {len(per_channel)} weight tensors are quantized per channel "
                    "(quantized_method='channel'): Teflon's Rockchip backend needs per-tensor quantization, so those "
                    "layers run on the CPU; build with quantized_method='layer' for the open NPU path")
    write_atomic(path, data)
    report = [{"layer": r.layer, "ops": r.ops, "runs_on": r.runs_on, "why": r.why,
               "precision": "int8" if r.int8 else "float"} for r in rows]
    if report_path:
        write_atomic(report_path, json.dumps(report, indent=1).encode())
    if not quiet:
        print(format_report(rows))
    npu = sum(r.runs_on.startswith("NPU") for r in rows)
    log.info(f"export_tflite: {path} ({len(data) / 1024:.1f} KiB): {npu} of {len(rows)} layers on the NPU (Teflon)")
    return report
