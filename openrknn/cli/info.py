"""``openrknn info MODEL.rknn``: inputs, outputs, dtypes, targets, size, op counts, quantization."""
from __future__ import annotations

import collections
import os

from openrknn.export.rockchip import describe_rockchip_file
from openrknn.graph import npu_layers
from openrknn.graph.layer_index import count_layers
from openrknn.graph.rknn_model import RKNNModel
from openrknn.model_file import load_model
from openrknn.runtime.rockchip_backend import is_rockchip_file


def describe_model(path: str, params: bool = False) -> str:
    """``openrknn info``'s text; ``params`` lists every quantization parameter (otherwise a summary)."""
    if is_rockchip_file(path):   # Rockchip's closed format: what can be read without its runtime
        with open(path, "rb") as f:
            data = f.read()
        return "\n".join([f"model:            {path}", f"file size:        {len(data) / 1024:.1f} KiB"]
                         + describe_rockchip_file(data))
    model = load_model(path)
    return format_model(model, os.path.getsize(path), path, params)


def format_model(model: RKNNModel, size: int, path: str = "", params: bool = False) -> str:
    meta = model.metadata
    lines = [f"model:            {path}",
             f"file size:        {size / 1024:.1f} KiB",
             f"made by:          openrknn {meta.get('toolkit_version')} ({meta.get('created') or 'no build date'})",
             f"source framework: {meta.get('source_framework', '?')}",
             f"target platforms: {model.platforms}",
             f"precision:        {'quantized ' + model.quantized_dtype if model.quantized_dtype else model.float_dtype}",
             f"rknn_batch_size:  {model.rknn_batch_size}",
             f"custom_string:    {model.custom_string!r}",
             "inputs:"]
    for t in model.inputs:
        pre = next((p for p in model.preprocess if p.input_name == t.name), None)
        norm = f" mean={pre.mean} std={pre.std} reorder={pre.reorder}" if pre else ""
        lines.append(f"  {t.name}: {t.dtype} {t.shape} {t.layout}{norm}")
    lines.append("outputs:")
    lines += [f"  {t.name}: {t.dtype} {t.shape} {t.layout}" for t in model.outputs]
    records = [r for r in npu_layers.model_records(model) if r.kind != "alias"]
    counts = collections.Counter(r.op_name for r in records)   # as Rockchip's layer table prints them
    nodes = len(model.graph.graph.node)
    lines.append(f"layers: {count_layers(model.graph.graph)} NPU layers of {nodes} ONNX nodes:")
    lines += [f"  {op:<24} {n}" for op, n in counts.most_common()]
    if model.tensor_dtypes and model.is_quantized:
        kinds = collections.Counter(model.tensor_dtypes.values())
        lines.append("tensor dtypes:    " + ", ".join(f"{k} {n}" for k, n in sorted(kinds.items())))
    if model.quant_params and params:
        lines.append(f"quantization parameters ({len(model.quant_params)} tensors; r = scale·(q − zero_point)):")
        for name, values in sorted(model.quant_params.items()):
            lines.append(f"  {name}: " + " ".join(f"{k}={_short(v)}" for k, v in sorted(values.items())))
    elif model.quant_params:
        lines.append(_quant_summary(model.quant_params))
    return "\n".join(lines)


def _quant_summary(quant_params: dict[str, dict]) -> str:
    """One line: how many tensors, per-channel ones, the scale and zero_point ranges (``--params`` lists all)."""
    scales = [float(v) for p in quant_params.values() for v in _as_list(p.get("scale"))]
    zero_points = [float(v) for p in quant_params.values() for v in _as_list(p.get("zero_point"))]
    per_channel = sum(1 for p in quant_params.values() if len(_as_list(p.get("scale"))) > 1)
    text = f"quantization parameters: {len(quant_params)} tensors ({per_channel} per-channel)"
    if scales:
        text += f", scale {min(scales):.6g} … {max(scales):.6g}"
    if zero_points:
        text += f", zero_point {min(zero_points):g} … {max(zero_points):g}"
    return text + "; --params lists them all"


def _as_list(value: object) -> list:
    if value is None:
        return []
    return list(value) if isinstance(value, (list, tuple)) else [value]


def _short(value: object) -> str:
    if isinstance(value, list) and len(value) > 4:
        return "[" + ", ".join(f"{v:.6g}" if isinstance(v, float) else str(v) for v in value[:4]) + f", ... ({len(value)})]"
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)
