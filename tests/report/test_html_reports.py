"""HTML report files: the data points they show, and that every name written into them is escaped."""
from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from openrknn.analysis.accuracy import AnalysisResult, LayerError
from openrknn.report import accuracy_html, memory_html, perf_html
from openrknn.report.graph_svg import layer_graph_svg
from openrknn.report.svg import bar_chart, histograms, line_plot
from tests.helpers import make_conv_model, quantized_build

HOSTILE = '<script>alert("x")</script>&\'<img src=x onerror=1>'


def assert_escaped(text: str) -> None:
    assert "<script" not in text and "<img" not in text
    assert "&lt;script&gt;" in text


def test_line_plot_has_one_dot_per_value_and_links():
    svg = line_plot(["a", "b", "c"], {"entire": [1.0, 0.5, None], "single": [0.9, float("nan"), 0.7]},
                    links=["/l?a", "/l?b", "/l?c"])
    dots = re.findall(r'<circle class="pt" data-series="(\w+)" data-label="(\w)" data-value="([^"]+)"', svg)
    assert dots == [("entire", "a", "1"), ("entire", "b", "0.5"), ("single", "a", "0.9"), ("single", "b", "nan"),
                    ("single", "c", "0.7")]
    assert svg.count('<a href="/l?') == 5


def test_bar_chart_and_histograms_carry_the_values():
    svg = bar_chart(["conv", "relu"], [12.5, 3.0], unit="us")
    assert re.findall(r'class="bar" data-label="(\w+)" data-value="([^"]+)"', svg) == [("conv", "12.5"),
                                                                                          ("relu", "3")]
    hist = histograms({"float": [0.0, 0.1, 1.0], "quantized": [0.0, 1.0]}, bins=4)
    counts = {s: sum(int(c) for c in re.findall(rf'data-series="{s}" data-count="(\d+)"', hist))
              for s in ("float", "quantized")}
    assert counts == {"float": 3, "quantized": 2}


def test_hostile_names_are_escaped_everywhere():
    result = AnalysisResult(rows=[LayerError("Conv", HOSTILE, 0.99, 0.1, 0.98, 0.2)])
    assert_escaped(accuracy_html(result))
    assert_escaped(line_plot([HOSTILE], {HOSTILE: [1.0]}, title=HOSTILE, links=[HOSTILE]))
    assert_escaped(bar_chart([HOSTILE], [1.0], title=HOSTILE, unit=HOSTILE))
    assert_escaped(histograms({HOSTILE: [1.0]}, title=HOSTILE))
    layer = SimpleNamespace(name=HOSTILE, op_type=HOSTILE, dtype="int8", target="NPU", nodes=(HOSTILE,),
                            inputs=[], outputs=[], full_name=HOSTILE)
    assert_escaped(layer_graph_svg([layer]))
    perf_layer = SimpleNamespace(id=0, op_type=HOSTILE, name=HOSTILE, time_us=5.0, target="NPU", data_type="INT8",
                                 full_name=HOSTILE)
    report = SimpleNamespace(chip=HOSTILE, total_time_us=5, fps=2e5, layers=[perf_layer],
                             ranking=lambda: [{"op_type": HOSTILE, "total": 5.0}])
    assert_escaped(perf_html([report, report]))
    memory = SimpleNamespace(chip=HOSTILE, weight_memory=1, internal_memory=2, other_memory=3, total_memory=6,
                             model_size=9)
    assert_escaped(memory_html(memory))


def test_api_writes_the_three_reports(tmp_path: Path):
    rng = np.random.default_rng(0)
    model = make_conv_model(tmp_path / "m.onnx")
    rknn = quantized_build(model, [rng.uniform(0, 1, (1, 3, 16, 16)).astype(np.float32) for _ in range(2)])
    out = tmp_path / "snapshot"
    assert rknn.accuracy_analysis(inputs=[str(tmp_path / "s0.npy")], output_dir=str(out)) == 0
    text = (out / "error_analysis.txt").read_text()
    page = (out / "error_analysis.html").read_text()
    rows = [line for line in text.splitlines() if line.startswith("[")]
    assert f'<p class="layer-count">{len(rows)} layers</p>' in page
    assert page.count('data-series="entire"') >= len(rows) - 1
    assert "http" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "")   # opens offline
    assert rknn.init_runtime(eval_mem=True) == 0
    perf = rknn.eval_perf(is_print=False, report_path=str(tmp_path / "perf.html"))
    html = (tmp_path / "perf.html").read_text()
    assert f"{perf['total_time']} us" in html and 'class="bar"' in html
    memory = rknn.eval_memory(is_print=False, report_path=str(tmp_path / "mem.html"))
    assert str(memory["total_memory"]) in (tmp_path / "mem.html").read_text()


def test_histogram_bars_fill_the_axis_and_legends_do_not_overlap():
    rng = np.random.default_rng(0)
    bulk = rng.normal(0, 1, 5000).tolist()
    svg = histograms({"float (golden)": bulk + [40.0, -30.0], "simulator": bulk + [38.0]}, bins=40)
    used = {int(i) for i, c in enumerate(re.findall(r'data-series="float \(golden\)" data-count="(\d+)"', svg))
            if int(c) > 0}
    assert len(used) >= 30                          # a few outliers no longer squeeze the bulk into a corner
    assert sum(int(c) for c in re.findall(r'data-series="simulator" data-count="(\d+)"', svg)) == 5001
    legends = [(float(x), text) for x, text in re.findall(r'class="legend" x="([\d.]+)"[^>]*>([^<]*)<', svg)]
    assert len(legends) == 2
    (x0, text0), (x1, _) = legends
    assert x1 >= x0 + 6 * len(text0)                # the second label starts after the first one's text
