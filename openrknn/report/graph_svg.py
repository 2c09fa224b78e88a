"""The NPU layer graph as SVG: one box per layer (the layers of ``graph/npu_layers.py`` as
``profile.layers.build_layers`` lists them), fused ONNX nodes listed inside, rows by depth.

Fill colour = data type, border = target (NPU solid blue, CPU dashed orange).
"""
from __future__ import annotations

from typing import Any, Sequence

from openrknn.report.svg import esc

DTYPE_COLORS = {"int8": "#cfe3ff", "uint8": "#cfe3ff", "int16": "#d8f0d0", "float16": "#ffe2c4",
                "float32": "#ffd0d0", "int4": "#e8dcff"}
TARGET_STROKE = {"NPU": ("#2f6fd0", ""), "CPU": ("#e07800", ' stroke-dasharray="5,3"')}
BOX_W, LINE_H, GAP_X, GAP_Y = 210, 13, 20, 34
BOLD = ' font-weight="bold"'


def _depths(layers: Sequence[Any]) -> list[int]:
    """Longest path from a graph input, through the tensors layers write and read (graph order)."""
    written: dict[str, int] = {}
    depths = []
    for index, layer in enumerate(layers):
        depth = 1 + max((depths[written[t.name]] for t in layer.inputs if t.name in written), default=-1)
        depths.append(depth)
        for t in layer.outputs:
            written[t.name] = index
    return depths


def layer_graph_svg(layers: Sequence[Any]) -> str:
    """Zoomable (``viewBox``) SVG of the layers; each box carries ``data-layer``/``data-dtype``/``data-target``."""
    depths = _depths(layers)
    rows: dict[int, list[int]] = {}
    for index, depth in enumerate(depths):
        rows.setdefault(depth, []).append(index)
    heights = {d: max(3 + len(layers[i].nodes) for i in members) * LINE_H + 8 for d, members in rows.items()}
    tops, y = {}, 10
    for depth in sorted(rows):
        tops[depth] = y
        y += heights[depth] + GAP_Y
    width = max(len(m) for m in rows.values()) * (BOX_W + GAP_X) + GAP_X if rows else 200
    boxes: dict[int, tuple[float, float, float]] = {}
    for depth, members in rows.items():
        offset = (width - len(members) * (BOX_W + GAP_X) + GAP_X) / 2
        for k, index in enumerate(members):
            boxes[index] = (offset + k * (BOX_W + GAP_X), tops[depth], heights[depth] - 8)
    producer = {t.name: i for i, layer in enumerate(layers) for t in layer.outputs}
    edges = []
    for index, layer in enumerate(layers):
        x, top, _ = boxes[index]
        for t in layer.inputs:
            if t.name in producer and producer[t.name] != index:
                px, ptop, ph = boxes[producer[t.name]]
                edges.append(f'<line x1="{px + BOX_W / 2:.0f}" y1="{ptop + ph:.0f}" x2="{x + BOX_W / 2:.0f}" '
                             f'y2="{top:.0f}" stroke="#888" marker-end="url(#arrow)"/>')
    parts = [f'<svg id="layer-graph" class="graph" xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" '
             f'height="{y:.0f}" viewBox="0 0 {width:.0f} {y:.0f}" data-layers="{len(layers)}">',
             '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="6" markerHeight="6" '
             'orient="auto"><path d="M0,0 L10,5 L0,10 z" fill="#888"/></marker></defs>', *edges]
    for index, layer in enumerate(layers):
        x, top, h = boxes[index]
        stroke, dash = TARGET_STROKE.get(layer.target, ("#555", ""))
        fill = DTYPE_COLORS.get(layer.dtype, "#eee")
        lines = [f"{layer.op_type}  [{layer.dtype}, {layer.target}]", layer.name[:34]]
        lines += [f"· {node[:32]}" for node in layer.nodes]
        text = "".join(f'<text x="{x + 6:.0f}" y="{top + 14 + k * LINE_H:.0f}" font-size="{11 if k == 0 else 10}"'
                       f'{BOLD if k == 0 else ""}>{esc(line)}</text>' for k, line in enumerate(lines))
        parts.append(f'<g class="layer" data-layer="{esc(layer.name)}" data-op="{esc(layer.op_type)}" '
                     f'data-dtype="{esc(layer.dtype)}" data-target="{esc(layer.target)}" '
                     f'data-nodes="{len(layer.nodes)}"><title>{esc(layer.full_name)}</title>'
                     f'<rect x="{x:.0f}" y="{top:.0f}" width="{BOX_W}" height="{h:.0f}" rx="4" fill="{fill}" '
                     f'stroke="{stroke}" stroke-width="2"{dash}/>{text}</g>')
    parts.append("</svg>")
    return "".join(parts)


def legend() -> str:
    """HTML legend of the colours."""
    fills = "".join(f'<span style="background:{c};padding:0 6px;margin-right:4px">{esc(d)}</span>'
                    for d, c in DTYPE_COLORS.items())
    return (f'<p class="hint">fill = data type: {fills} border = target: <b style="color:#2f6fd0">NPU solid</b>, '
            f'<b style="color:#e07800">CPU dashed</b>; the dotted lines inside a box are the fused ONNX nodes.</p>')
