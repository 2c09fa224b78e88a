"""The side-by-side table of an evaluation, its per-class breakdown and worst images."""
from __future__ import annotations

from openrknn.evaluation.engine import EvalReport


def _cell(value: float | None, digits: int = 4) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def format_report(report: EvalReport, per_class: bool = False) -> str:
    """The table (one row per model, the float reference first)."""
    rows = report.rows
    k = rows[0].top_k if rows else 5
    headers = ["model", "images"]
    if report.task == "classification":
        headers += ["top1", f"top{k}", "agree_top1"]
    if report.task == "detection":
        headers += ["mAP@0.5", "mAP@0.5:0.95"]
    headers += ["cos_mean", "cos_min"]
    table = []
    for r in rows:
        line = [r.name, str(r.images)]
        if report.task == "classification":
            line += [_cell(r.top1), _cell(r.topk), _cell(r.agreement)]
        if report.task == "detection":
            line += [_cell(r.map50), _cell(r.map)]
        line += [_cell(r.cosine_mean, 6), _cell(r.cosine_min, 6)]
        table.append(line)
    widths = [max(len(h), *(len(t[i]) for t in table)) for i, h in enumerate(headers)]
    rule = "-" * (sum(widths) + 2 * (len(widths) - 1))
    lines = [rule, "  ".join(h.ljust(w) for h, w in zip(headers, widths)), rule]
    lines += ["  ".join(c.ljust(w) for c, w in zip(t, widths)) for t in table]
    lines += [rule, f"{report.images} image(s), {report.computed} result(s) computed, {report.cached} from the cache, "
              f"{report.seconds:.1f} s on {report.backend}"]
    if per_class and report.task in ("classification", "detection"):
        lines += _per_class(report)
    for r in rows:
        if r.worst:
            lines.append(f"worst images of {r.name} (output cosine): "
                         + ", ".join(f"{key} {cos:.5f}" for key, cos in r.worst))
    return "\n".join(lines)


def _per_class(report: EvalReport) -> list[str]:
    metric = "top1" if report.task == "classification" else "AP@0.5:0.95"
    classes = list(report.rows[0].per_class)
    width = max([len("class")] + [len(c) for c in classes])
    columns = [max(len(r.name), 6) for r in report.rows]
    lines = ["", f"per class ({metric})",
             "class".ljust(width) + "  " + "  ".join(r.name.ljust(w) for r, w in zip(report.rows, columns))]
    for name in classes:
        cells = [f"{r.per_class.get(name, float('nan')):.4f}".ljust(w) for r, w in zip(report.rows, columns)]
        lines.append(name.ljust(width) + "  " + "  ".join(cells))
    return lines
