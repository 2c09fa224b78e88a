"""Small SVG charts as strings: a line/dot plot, horizontal bars, histograms.

Every data point carries ``data-*`` attributes (label and value) so pages and tests can read what a
chart shows; every label goes through :func:`esc`.
"""
from __future__ import annotations

import html
import math
from typing import Sequence

PALETTE = ("#2f6fd0", "#f08c14", "#2ca05a", "#c8323c", "#8c5ac8", "#7f7f7f")


def esc(value: object) -> str:
    """Text for HTML/SVG content and attribute values (quotes escaped too)."""
    return html.escape(str(value), quote=True)


def _finite(values: Sequence[float | None]) -> list[float]:
    return [float(v) for v in values if v is not None and math.isfinite(float(v))]


def _fmt(value: float | None) -> str:
    return "nan" if value is None or not math.isfinite(value) else f"{value:.6g}"


def line_plot(labels: Sequence[str], series: dict[str, Sequence[float | None]], *, title: str = "",
              links: Sequence[str] | None = None, width: int = 900, height: int = 320,
              floor: float | None = None) -> str:
    """One dot per label and series (lines join a series' dots); ``links[i]`` makes dot ``i`` clickable.

    Non-finite values (an fp16 overflow gives NaN) are drawn on the floor in red.
    """
    left, right, top, bottom = 60, width - 15, 28, height - 30
    values = _finite([v for vs in series.values() for v in vs])
    low = min(values, default=0.0) if floor is None else min(min(values, default=floor), floor)
    high = max(values, default=1.0)
    if high - low < 1e-9:
        low, high = low - 0.5, high + 0.5
    count = max(len(labels), 1)

    def x_of(i: int) -> float:
        return left + (right - left) * (i + 0.5) / count

    def y_of(v: float) -> float:
        return bottom - (bottom - top) * (v - low) / (high - low)

    parts = [f'<svg class="chart line-plot" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" role="img"><title>{esc(title)}</title>',
             f'<rect x="{left}" y="{top}" width="{right - left}" height="{bottom - top}" fill="none" stroke="#999"/>',
             f'<text x="{left}" y="16" font-size="12">{esc(title)}</text>']
    for frac in (0.0, 0.5, 1.0):
        v = low + (high - low) * frac
        parts.append(f'<text x="4" y="{y_of(v) + 4:.1f}" font-size="10">{_fmt(v)}</text>')
    for s, (name, vs) in enumerate(series.items()):
        color = PALETTE[s % len(PALETTE)]
        parts.append(f'<text x="{left + 10 + 120 * s}" y="{height - 8}" font-size="11" fill="{color}">'
                     f'● {esc(name)}</text>')
        points = [(x_of(i), y_of(float(v))) for i, v in enumerate(vs) if v is not None and math.isfinite(float(v))]
        if len(points) > 1:
            parts.append(f'<polyline fill="none" stroke="{color}" stroke-width="1.2" stroke-opacity="0.6" points="'
                         + " ".join(f"{x:.1f},{y:.1f}" for x, y in points) + '"/>')
        for i, v in enumerate(vs):
            if v is None:
                continue
            bad = not math.isfinite(float(v))
            cx, cy = x_of(i), (bottom if bad else y_of(float(v)))
            dot = (f'<circle class="pt" data-series="{esc(name)}" data-label="{esc(labels[i])}" '
                   f'data-value="{_fmt(float(v))}" cx="{cx:.1f}" cy="{cy:.1f}" r="3" '
                   f'fill="{"#d00" if bad else color}"><title>{esc(labels[i])}: {esc(name)} {_fmt(float(v))}'
                   f'</title></circle>')
            if links is not None:
                dot = f'<a href="{esc(links[i])}">{dot}</a>'
            parts.append(dot)
    parts.append("</svg>")
    return "".join(parts)


def bar_chart(labels: Sequence[str], values: Sequence[float], *, title: str = "", unit: str = "",
              width: int = 900, colors: Sequence[str] | None = None) -> str:
    """Horizontal bars, one row per label, longest first as given."""
    row, left, top = 18, min(320, 12 + 7 * max((len(str(t)) for t in labels), default=4)), 24
    height = top + row * len(labels) + 10
    high = max(_finite(values), default=0.0) or 1.0
    span = width - left - 90
    parts = [f'<svg class="chart bar-chart" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" role="img"><title>{esc(title)}</title>',
             f'<text x="4" y="14" font-size="12">{esc(title)}</text>']
    for i, (label, value) in enumerate(zip(labels, values)):
        y = top + i * row
        length = span * max(float(value), 0.0) / high
        color = colors[i] if colors else PALETTE[0]
        shown = str(label) if len(str(label)) <= 44 else str(label)[:41] + "..."
        parts.append(f'<text x="{left - 6}" y="{y + 12}" font-size="11" text-anchor="end">{esc(shown)}</text>'
                     f'<rect class="bar" data-label="{esc(label)}" data-value="{_fmt(float(value))}" x="{left}" '
                     f'y="{y + 2}" width="{length:.1f}" height="{row - 5}" fill="{color}">'
                     f'<title>{esc(label)}: {_fmt(float(value))} {esc(unit)}</title></rect>'
                     f'<text x="{left + length + 4:.1f}" y="{y + 12}" font-size="10">{_fmt(float(value))} '
                     f'{esc(unit)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _axis_range(values: list[float], tail: float) -> tuple[float, float]:
    """The range holding all but ``tail`` of the values at each end (a few outliers would squeeze the
    bars into a corner of the axis); the full range when that leaves nothing to draw."""
    if not values:
        return 0.0, 1.0
    ordered = sorted(values)
    cut = int(len(ordered) * tail)
    low, high = ordered[cut], ordered[len(ordered) - 1 - cut]
    if high - low < 1e-12:
        low, high = ordered[0], ordered[-1]
    if high - low < 1e-12:
        low, high = low - 0.5, high + 0.5
    return low, high


def histograms(series: dict[str, Sequence[float]], bins: int = 40, *, title: str = "", width: int = 900,
               height: int = 240, tail: float = 0.005) -> str:
    """Overlaid histograms of several value sets on shared bins (e.g. float vs quantized values).

    The axis spans all values but the ``tail`` fraction at each end; those few are counted in the end
    bins (the axis labels say how many), so the bulk of the values fills the axis.
    """
    finite = {name: [v for v in _finite(vs)] for name, vs in series.items()}
    everything = [v for vs in finite.values() for v in vs]
    low, high = _axis_range(everything, tail)
    edges = [low + (high - low) * k / bins for k in range(bins + 1)]
    counts = {}
    for name, vs in finite.items():
        c = [0] * bins
        for v in vs:
            c[max(0, min(int((v - low) / (high - low) * bins), bins - 1))] += 1
        counts[name] = c
    below = sum(1 for v in everything if v < low)
    above = sum(1 for v in everything if v > high)
    peak = max((max(c) for c in counts.values() if c), default=1) or 1
    left, right, top, bottom = 50, width - 10, 24, height - 40
    step = (right - left) / bins
    parts = [f'<svg class="chart histogram" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" role="img"><title>{esc(title)}</title>',
             f'<text x="4" y="14" font-size="12">{esc(title)}</text>',
             f'<text x="{left}" y="{bottom + 14}" font-size="10">{"≤ " if below else ""}{_fmt(low)}'
             f'{f" ({below} below)" if below else ""}</text>',
             f'<text x="{right}" y="{bottom + 14}" font-size="10" text-anchor="end">{"≥ " if above else ""}'
             f'{_fmt(high)}{f" ({above} above)" if above else ""}</text>']
    legend_x = left
    for s, (name, c) in enumerate(counts.items()):
        color = PALETTE[s % len(PALETTE)]
        label = f"■ {name} ({len(finite[name])} values)"
        parts.append(f'<text class="legend" x="{legend_x}" y="{height - 6}" font-size="11" fill="{color}">'
                     f'{esc(label)}</text>')
        legend_x += 7 * len(label) + 24   # ~7 px per character at 11 px: the next label starts after this one
        for k, n in enumerate(c):
            h = (bottom - top) * n / peak
            parts.append(f'<rect class="bin" data-series="{esc(name)}" data-count="{n}" '
                         f'data-from="{_fmt(edges[k])}" x="{left + k * step:.1f}" y="{bottom - h:.1f}" '
                         f'width="{max(step - 1, 1):.1f}" height="{h:.1f}" fill="{color}" fill-opacity="0.5"/>')
    parts.append("</svg>")
    return "".join(parts)
