"""The auto_hybrid trade-off plot: measured output cosine against estimated FPS, one series per chip."""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from openrknn.report.page import page, table
from openrknn.report.svg import PALETTE, esc


def tradeoff_svg(points: Sequence[Any], cos_thresh: float, width: int = 900, height: int = 360) -> str:
    """Scatter of ``TradeoffPoint``s (``openrknn.analysis.tradeoff``): x = estimated FPS, y = cosine;
    a dashed line at the threshold, the auto_hybrid choice drawn larger. Each dot carries
    ``data-chip``, ``data-moves``, ``data-fps`` and ``data-cosine``."""
    left, right, top, bottom = 64, width - 20, 30, height - 44
    chips = list(points[0].fps) if points else []
    xs = [p.fps[c] for p in points for c in chips]
    ys = [p.cosine for p in points if math.isfinite(p.cosine)] + [cos_thresh]
    x_low, x_high = (min(xs, default=0.0), max(xs, default=1.0))
    y_low, y_high = min(ys), max(max(ys), 1.0)
    if x_high - x_low < 1e-9:
        x_low, x_high = x_low - 1, x_high + 1
    if y_high - y_low < 1e-9:
        y_low -= 1e-3

    def x_of(v: float) -> float:
        return left + (right - left) * (v - x_low) / (x_high - x_low)

    def y_of(v: float) -> float:
        return bottom - (bottom - top) * (v - y_low) / (y_high - y_low)

    parts = [f'<svg class="chart tradeoff" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" role="img"><title>output cosine against estimated FPS</title>',
             f'<rect x="{left}" y="{top}" width="{right - left}" height="{bottom - top}" fill="none" stroke="#999"/>',
             f'<text x="{left}" y="18" font-size="12">output cosine (measured) against FPS (estimated); '
             f'dashed: threshold {esc(cos_thresh)}</text>',
             f'<line class="threshold" x1="{left}" x2="{right}" y1="{y_of(cos_thresh):.1f}" y2="{y_of(cos_thresh):.1f}" '
             f'stroke="#c8323c" stroke-dasharray="5,4"/>']
    for frac in (0.0, 0.5, 1.0):
        yv, xv = y_low + (y_high - y_low) * frac, x_low + (x_high - x_low) * frac
        parts.append(f'<text x="4" y="{y_of(yv) + 4:.1f}" font-size="10">{yv:.4f}</text>')
        parts.append(f'<text x="{x_of(xv) - 12:.1f}" y="{bottom + 14}" font-size="10">{xv:.1f}</text>')
    for s, chip in enumerate(chips):
        color = PALETTE[s % len(PALETTE)]
        parts.append(f'<text x="{left + 10 + 140 * s}" y="{height - 8}" font-size="11" fill="{color}">'
                     f'● {esc(chip)} FPS</text>')
        ordered = sorted((p for p in points if math.isfinite(p.cosine)), key=lambda p: p.fps[chip])
        if len(ordered) > 1:
            parts.append(f'<polyline fill="none" stroke="{color}" stroke-opacity="0.5" points="'
                         + " ".join(f"{x_of(p.fps[chip]):.1f},{y_of(p.cosine):.1f}" for p in ordered) + '"/>')
        for p in ordered:
            label = f"{chip}: {p.moves} moves ({p.float16} fp16, {p.int16} int16), {p.fps[chip]} FPS, cosine {p.cosine:.5f}"
            parts.append(f'<circle class="pt{" chosen" if p.chosen else ""}" data-chip="{esc(chip)}" '
                         f'data-moves="{p.moves}" data-fps="{p.fps[chip]}" data-cosine="{p.cosine:.6f}" '
                         f'cx="{x_of(p.fps[chip]):.1f}" cy="{y_of(p.cosine):.1f}" r="{6 if p.chosen else 3}" '
                         f'fill="{color}" stroke="{"#000" if p.chosen else color}"><title>{esc(label)}'
                         f'{" (auto_hybrid choice)" if p.chosen else ""}</title></circle>')
    parts.append("</svg>")
    return "".join(parts)


def tradeoff_body(points: Sequence[Any], cos_thresh: float) -> str:
    """The plot and the table of points."""
    chips = list(points[0].fps) if points else []
    rows = [(("* " if p.chosen else "") + str(p.moves), p.float16, p.int16, f"{p.cosine:.5f}",
             "yes" if p.meets else "no", *[p.fps[c] for c in chips], getattr(p, "step", "prefix"), p.last_move)
            for p in points]
    return tradeoff_svg(points, cos_thresh) + table(
        ["moves", "float16", "int16", "cosine", "meets", *[f"{c} FPS" for c in chips], "step", "last move"], rows,
        "tradeoff")


def tradeoff_html(points: Sequence[Any], cos_thresh: float) -> str:
    """The whole auto_hybrid trade-off report page."""
    return page("auto_hybrid trade-off", tradeoff_body(points, cos_thresh))
