"""``openrknn info MODEL.rknn``: inputs, outputs, dtypes, targets, size, op counts, quantization."""
from __future__ import annotations

import collections
import os

from openrknn.graph.rknn_model import RKNNModel


def describe_model(path: str) -> str:
    from openrknn.model_file import load_model
    model = load_model(path)
    return format_model(model, os.path.getsize(path), path)


def format_model(model: RKNNModel, size: int, path: str = "") -> str:
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
    from openrknn.graph import npu_layers
    from openrknn.profile.layers import layer_count
    records = [r for r in npu_layers.model_records(model) if r.kind != "alias"]
    counts = collections.Counter(r.op_name for r in records)
    try:
        total = str(layer_count(model))
    except Exception as e:  # noqa: BLE001 - a model without static shapes still gets its other lines
        total = f"? ({e})"
    lines.append(f"layers: {total} (with {len(model.inputs)} input and {len(model.outputs)} output operators)")
    lines += [f"  {op:<24} {n}" for op, n in counts.most_common()]
    if model.tensor_dtypes and model.is_quantized:
        kinds = collections.Counter(model.tensor_dtypes.values())
        lines.append("tensor dtypes:    " + ", ".join(f"{k} {n}" for k, n in sorted(kinds.items())))
    if model.quant_params:
        lines.append(f"quantization parameters ({len(model.quant_params)} tensors; r = scale·(q − zero_point)):")
        for name, params in sorted(model.quant_params.items()):
            lines.append(f"  {name}: " + " ".join(f"{k}={_short(v)}" for k, v in sorted(params.items())))
    return "\n".join(lines)


def _short(value: object) -> str:
    if isinstance(value, list) and len(value) > 4:
        return "[" + ", ".join(f"{v:.6g}" if isinstance(v, float) else str(v) for v in value[:4]) + f", ... ({len(value)})]"
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)
