"""Report bodies (accuracy analysis, eval_perf, eval_memory) and the atomic writer of the files."""
from __future__ import annotations

from typing import Any, Callable, Sequence

from openrknn.model_file.container import write_atomic
from openrknn.report.page import page, table
from openrknn.report.svg import bar_chart, esc, line_plot

TARGET_COLORS = {"NPU": "#2f6fd0", "CPU": "#f08c14", "GPU": "#2ca05a"}


def cos_text(value: float | None) -> str:
    return "" if value is None else f"{value:.5f}"


def accuracy_body(result: Any, link: Callable[[str], str] | None = None, layer_count: int | None = None) -> str:
    """Per-layer cosine plot (entire vs single), the worst layers and the full table.

    ``result`` is an :class:`openrknn.analysis.AnalysisResult`; ``link(tensor)`` makes each dot a link;
    ``layer_count`` is the model's NPU layer count (``graph/layer_index``), printed as every page prints it.
    Only stored tensors (layer outputs and inputs) have values; tensors inside a fused layer are counted, not listed.
    """
    rows = [r for r in result.rows if r.entire_cos is not None or r.single_cos is not None]
    labels = [r.tensor for r in rows]
    inside = len(result.rows) - len(rows)
    count = f"{len(result.rows)} layers" if layer_count is None else f"{layer_count} layers" + (
        f" ({inside} tensors inside fused layers are not stored, so not compared)" if inside else "")
    plot = line_plot(labels, {"entire": [r.entire_cos for r in rows], "single": [r.single_cos for r in rows]},
                     title="cosine per layer output (graph order)",
                     links=[link(t) for t in labels] if link else None, floor=0.99)
    worst = table(["layer", "op", "single cos", "entire cos"],
                  [(r.tensor, r.op_type, cos_text(r.single_cos), cos_text(r.entire_cos)) for r in result.worst(5)])
    full = table(["op", "layer", "entire cos", "entire euc", "single cos", "single euc"],
                 [(r.op_type, r.tensor, cos_text(r.entire_cos), "" if r.entire_euc is None else f"{r.entire_euc:.5g}",
                   cos_text(r.single_cos), "" if r.single_euc is None else f"{r.single_euc:.5g}") for r in rows],
                 "layers")
    return (f'<p class="layer-count">{esc(count)}</p>{plot}<h2>Worst layers (single)</h2>{worst}'
            f"<h2>All layers</h2>{full}")


def accuracy_html(result: Any) -> str:
    """The whole accuracy analysis report page."""
    return page("Accuracy analysis", accuracy_body(result))


def perf_body(reports: Sequence[Any], top: int = 40) -> str:
    """Time per layer (the ``top`` slowest, coloured by target), time by op kind, and chips side by side.

    ``reports``: :class:`openrknn.profile.perf.PerfReport` objects of one model on one or more chips.
    """
    width = 900 if len(reports) == 1 else 560
    parts = []
    if len(reports) > 1:
        parts.append(bar_chart([r.chip for r in reports], [r.total_time_us for r in reports],
                               title="total time per chip", unit="us"))
    parts.append('<div class="side-by-side">')   # wraps to rows on a narrow window; long names break (page.py)
    for report in reports:
        slow = sorted(report.layers, key=lambda layer: -layer.time_us)[:top]
        ranking = report.ranking()
        parts.append(
            f'<div class="chip"><h2>{esc(report.chip)}: {report.total_time_us} us, {report.fps:.1f} FPS, '
            f'{len(report.layers)} rows</h2>'
            + bar_chart([f"{layer.id} {layer.op_type} {layer.name}" for layer in slow],
                        [layer.time_us for layer in slow], unit="us", width=width,
                        title=f"time per layer (slowest {len(slow)}; blue NPU, orange CPU)",
                        colors=[TARGET_COLORS.get(layer.target, "#777") for layer in slow])
            + bar_chart([r["op_type"] for r in ranking], [r["total"] for r in ranking], unit="us", width=width,
                        title="time by op kind")
            + '<div class="table-scroll">'
            + table(["ID", "OpType", "DataType", "Target", "Time(us)", "FullName"],
                    [(layer.id, layer.op_type, layer.data_type, layer.target, round(layer.time_us),
                      layer.full_name) for layer in report.layers], "layers", name_column=5)
            + "</div>"
            + "</div>")
    parts.append("</div>")
    return "".join(parts)


def perf_html(reports: Sequence[Any]) -> str:
    """The whole eval_perf report page."""
    return page("eval_perf", perf_body(reports))


def memory_body(report: Any) -> str:
    """Weight / internal / other memory as bars (bytes) and the numbers."""
    names = ["weight", "internal tensors", "other"]
    values = [report.weight_memory, report.internal_memory, report.other_memory]
    return (bar_chart(names, [v / 1024 for v in values], unit="KiB",
                      title=f"{report.chip}: NPU memory, total {report.total_memory / 1024:.2f} KiB")
            + table(["part", "bytes"], list(zip(names + ["total", "model size"],
                                                values + [report.total_memory, report.model_size]))))


def memory_html(report: Any) -> str:
    """The whole eval_memory report page."""
    return page("eval_memory", memory_body(report))


def write_html(path: str, text: str) -> str:
    """Write a report page atomically (readers never see half a file); returns ``path``."""
    write_atomic(path, text.encode("utf-8"))
    return path
