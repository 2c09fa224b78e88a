"""Self-contained HTML reports (inline SVG, no script or network needed to open them).

Core, like the text tables: plain string templates, every value written into the page is escaped.
The workbench (``openrknn ui``) shows the same charts.
"""
from openrknn.report.tradeoff import tradeoff_html
from openrknn.report.writers import accuracy_html, memory_html, perf_html, write_html

__all__ = ["accuracy_html", "perf_html", "memory_html", "tradeoff_html", "write_html"]
