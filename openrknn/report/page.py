"""The HTML page frame shared by the report files and the workbench: inline CSS, no external files."""
from __future__ import annotations

from typing import Sequence

from openrknn.report.svg import esc

STYLE = """
body{font-family:system-ui,sans-serif;margin:0;color:#222}
header{background:#1d3557;color:#fff;padding:8px 16px}
header a{color:#fff;margin-right:12px;text-decoration:none}
header a.here{text-decoration:underline}
main{padding:12px 16px}
table{border-collapse:collapse;font-size:12px}
td,th{border:1px solid #ccc;padding:2px 6px;text-align:left}
.error{color:#b00;font-weight:bold}
.field{margin:6px 0}
.field label{display:inline-block;min-width:280px}
.hint{color:#666;font-size:11px}
pre.log{background:#f4f4f4;max-height:320px;overflow:auto;font-size:11px}
.scroll{overflow:auto;border:1px solid #ddd;max-height:640px}
svg.chart{max-width:100%;height:auto}
.side-by-side{display:flex;flex-wrap:wrap;gap:16px;align-items:flex-start}
.side-by-side>.chip{flex:1 1 420px;min-width:0}
.table-scroll{max-width:100%;overflow-x:auto}
td.name{word-break:break-all;max-width:40em}
"""


def page(title: str, body: str, nav: str = "") -> str:
    """A complete HTML document; ``body`` and ``nav`` are already-escaped HTML."""
    return (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{esc(title)}</title>'
            f'<style>{STYLE}</style></head><body>{nav}<main><h1>{esc(title)}</h1>{body}</main></body></html>')


def table(headers: Sequence[str], rows: Sequence[Sequence[object]], css_class: str = "",
          name_column: int | None = None) -> str:
    """An HTML table of escaped cells; the ``name_column`` cells (long tensor names) may break anywhere."""
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f'<td class="name">{esc(c)}</td>' if i == name_column else f"<td>{esc(c)}</td>"
                                    for i, c in enumerate(row)) + "</tr>" for row in rows)
    return f'<table class="{esc(css_class)}"><tr>{head}</tr>{body}</table>'
