"""The workbench pages as HTML strings (every value escaped; the only script is the job poller
and the graph zoom, both inline)."""
from __future__ import annotations

import os
from typing import Any
from urllib.parse import quote

from openrknn import chips
from openrknn.analysis.accuracy import AnalysisResult, LayerError
from openrknn.graph.layer_index import count_layers
from openrknn.profile.cost_table import cost_table
from openrknn.profile.layers import build_layers
from openrknn.profile.limits import check_model
from openrknn.quant.settings import QUANT_ALGORITHMS, QUANT_METHODS, TOOLKIT1_QUANT_DTYPES, TOOLKIT2_QUANT_DTYPES
from openrknn.report.graph_svg import layer_graph_svg, legend
from openrknn.report.page import page, table
from openrknn.report.svg import esc, histograms
from openrknn.report.writers import accuracy_body, cos_text, memory_body, perf_body
from openrknn.ui.forms import CONFIG_FIELDS, form_text
from openrknn.ui.hybrid import auto_hybrid_section
from openrknn.ui.workbench import FRONTENDS, Workbench

PAGES = (("/", "Model"), ("/config", "Config & build"), ("/job", "Progress"), ("/graph", "Layer graph"),
         ("/accuracy", "Accuracy"), ("/perf", "Perf & memory"), ("/hybrid", "Hybrid"), ("/inference", "Inference"),
         ("/export", "Export"))
CHOICES = {"platform": [""] + chips.toolkit2_platforms() + chips.toolkit1_platforms(),
           "quant_dtype": ("",) + TOOLKIT2_QUANT_DTYPES + TOOLKIT1_QUANT_DTYPES,
           "quant_algorithm": ("",) + QUANT_ALGORITHMS, "quant_method": ("",) + QUANT_METHODS}
POLL = """<script>
async function poll(){const r=await fetch('/api/job/'+JOB);const j=await r.json();
const lines=j.log.slice();if(j.state==='running'&&j.progress){lines.push(j.progress)}
document.getElementById('log').textContent=lines.join('\\n');document.getElementById('state').textContent=j.state;
document.getElementById('elapsed').textContent=j.elapsed_s.toFixed(1)+' s';
if(j.state==='running'){setTimeout(poll,300)}else{setTimeout(()=>{location.href=j.redirect},600)}}
poll();</script>"""
ZOOM = """<script>
function zoom(f){const g=document.getElementById('layer-graph');
g.setAttribute('width',g.width.baseVal.value*f);g.setAttribute('height',g.height.baseVal.value*f)}</script>"""


def frame(bench: Workbench, here: str, title: str, body: str) -> str:
    links = "".join(f'<a href="{url}"{" class=here" if url == here else ""}>{esc(name)}</a>' for url, name in PAGES)
    model = bench.choice.model if bench.choice else "no model"
    state = "built" if bench.model is not None else "not built"
    nav = f'<header>{links}<span class="hint" style="color:#cde">{esc(os.path.basename(model))} · {state}</span></header>'
    return page(title, body, nav)


def _error(errors: dict[str, str], name: str) -> str:
    message = errors.get(name)
    return f' <span class="error" id="error-{esc(name)}">{esc(message)}</span>' if message else ""


def field(name: str, label: str, control: str, hint: str, errors: dict[str, str]) -> str:
    return (f'<div class="field"><label for="{esc(name)}">{esc(label)}</label>{control}'
            f'{_error(errors, name)}<div class="hint">{esc(hint)}</div></div>')


def text_input(name: str, value: str = "", size: int = 50) -> str:
    return f'<input id="{esc(name)}" name="{esc(name)}" value="{esc(value)}" size="{size}">'


def select(name: str, options: Any, value: str) -> str:
    items = "".join(f'<option value="{esc(o)}"{" selected" if o == value else ""}>{esc(o or "(default)")}</option>'
                    for o in options)
    return f'<select id="{esc(name)}" name="{esc(name)}">{items}</select>'


def checkbox(name: str, checked: bool, value: str = "on", element_id: str | None = None) -> str:
    return (f'<input type="checkbox" id="{esc(element_id or name)}" name="{esc(name)}" value="{esc(value)}"'
            f'{" checked" if checked else ""}>')


def form(action: str, inner: str, button: str, errors: dict[str, str], multipart: bool = False) -> str:
    """A POST form; an error not tied to one field (``_form``) shows beside the button."""
    enc = ' enctype="multipart/form-data"' if multipart else ""
    return (f'<form method="post" action="{action}"{enc}>{inner}'
            f'<button type="submit" id="submit">{esc(button)}</button>{_error(errors, "_form")}</form>')


def model_page(bench: Workbench, form_values: dict[str, str] | None = None) -> str:
    errors = bench.errors.get("model", {})
    values = form_values or {}
    c = bench.choice
    framework = values.get("framework") or (c.framework if c else "onnx")
    inner = (field("framework", "framework", select("framework", list(FRONTENDS), framework),
                   "; ".join(f"{k}: {a}{' + ' + b if b else ''}" for k, (a, b) in FRONTENDS.items()), errors)
             + field("model", "model file", '<input type="file" id="model_file" name="model_file"> or path '
                     + text_input("model", values.get("model", ""), 40), "upload, or a path on this computer", errors)
             + field("weights", "second file", '<input type="file" id="weights_file" name="weights_file"> or path '
                     + text_input("weights", values.get("weights", ""), 40), ".caffemodel / .weights / .params", errors)
             + field("input_size_list", "input_size_list", text_input("input_size_list", values.get("input_size_list", "")),
                     "pytorch / tensorflow / mxnet (and onnx to fix shapes): 1,3,224,224 ('#' between inputs)", errors)
             + field("inputs", "inputs", text_input("inputs", values.get("inputs", "")), "tensorflow / onnx cut", errors)
             + field("outputs", "outputs", text_input("outputs", values.get("outputs", "")), "tensorflow / onnx cut",
                     errors))
    current = (f'<p id="current-model">Loaded: {esc(os.path.basename(c.model))} ({esc(c.framework)})</p>'
               if c else "<p>No model yet.</p>")
    return frame(bench, "/", "Model", current + form("/model", inner, "Load model", errors, multipart=True))


def config_page(bench: Workbench) -> str:
    errors = bench.errors.get("config", {})
    cfg, opts = bench.config, bench.build_options
    rows = []
    for name, label, kind, hint in CONFIG_FIELDS:
        value = form_text(cfg, name)
        if kind in CHOICES:
            control = select(name, CHOICES[kind], value)
        elif kind == "bool":
            control = checkbox(name, bool(value))
        else:
            control = text_input(name, value)
        rows.append(field(name, label, control, hint, errors))
    rows.append("<h2>build</h2>")
    rows.append(field("do_quantization", "do_quantization", checkbox("do_quantization", opts.get("do_quantization", False)),
                      "quantize with the calibration dataset", errors))
    rows.append(field("dataset", "dataset", text_input("dataset", opts.get("dataset", "")),
                      "a dataset .txt (one sample per line) or a folder of images/.npy files", errors))
    rows.append(field("auto_hybrid", "auto_hybrid", checkbox("auto_hybrid", opts.get("auto_hybrid", False)),
                      "raise the fewest layers to float16 until the output cosine meets auto_hybrid_cos_thresh", errors))
    return frame(bench, "/config", "Config & build", form("/config", "".join(rows), "Build", errors))


def job_page(bench: Workbench, job_id: int | None) -> str:
    job = bench.runner.jobs.get(job_id) if job_id else (max(bench.runner.jobs.values(), key=lambda j: j.id)
                                                       if bench.runner.jobs else None)
    if job is None:
        return frame(bench, "/job", "Progress", "<p>No job has run yet.</p>")
    lines = job.lines + ([job.progress] if job.state == "running" and job.progress else [])
    body = (f'<p>{esc(job.title)}: <b id="state">{esc(job.state)}</b> · <span id="elapsed">{job.elapsed_s:.1f} s'
            f'</span></p><pre class="log" id="log">{esc(chr(10).join(lines))}</pre>')
    # /job/<id> (where a started job lands) follows the job to its result page; /job only shows the last one
    script = f"<script>const JOB={job.id};</script>{POLL}" if job_id or job.state == "running" else ""
    return frame(bench, "/job", "Progress", body + script)


def graph_page(bench: Workbench) -> str:
    model = bench.model
    if model is None:
        return frame(bench, "/graph", "Layer graph", "<p>Build the model first (Config & build).</p>")
    chip = chips.get_chip(model.platforms[0])
    layers = build_layers(model, cost_table(chip), float_on_npu=chip.float_on_npu)
    targets = {t: sum(1 for layer in layers if layer.target == t) for t in ("NPU", "CPU")}
    count = count_layers(model.graph.graph)
    body = (f'<p id="layer-count">{count} layers on {esc(chip.name)} '
            f'({len(model.graph.graph.node)} ONNX nodes); {_rows_note(layers, count, "boxes")}; '
            f'NPU {targets["NPU"]}, CPU {targets["CPU"]}</p>{legend()}'
            '<p><button onclick="zoom(1.25)">zoom in</button> <button onclick="zoom(0.8)">zoom out</button></p>'
            f'<div class="scroll">{layer_graph_svg(layers)}</div>{ZOOM}')
    findings = check_model(model).findings
    if findings:
        body += ('<h3>NPU limits (Rockchip operator list)</h3><ul id="npu-limits">'
                 + "".join(f"<li>{esc(f.severity)} {esc(f.line())}</li>" for f in findings) + "</ul>")
    return frame(bench, "/graph", "Layer graph", body)


def _rows_note(rows: list, layer_count: int, what: str) -> str:
    """How the perf table's rows / the graph's boxes relate to the model's layers (rknn-toolkit2 prints
    input/output operators as rows, and a large GlobalAveragePool as several steps)."""
    io = sum(1 for row in rows if row.op_type in ("InputOperator", "OutputOperator"))
    extra = len(rows) - io - layer_count
    note = f"{len(rows)} {what}: {layer_count} layers + {io} input/output operators"
    if extra > 0:
        note += f" + {extra} extra steps (a large GlobalAveragePool runs as a cascade of convolutions)"
    elif extra < 0:
        note += f" ({-extra} layers drawn as one)"
    return note


def accuracy_page(bench: Workbench, layer: str | None) -> str:
    errors = bench.errors.get("accuracy", {})
    run = form("/accuracy", field("image", "input", '<input type="file" id="image" name="image">',
                                  "an image or .npy; empty = the first calibration sample", errors),
               "Run accuracy_analysis", errors, multipart=True)
    if not bench.analysis_dir:
        return frame(bench, "/accuracy", "Accuracy analysis", run)
    result = AnalysisResult(rows=[LayerError(**row) for row in bench.analysis_rows()])
    body = run + '<p><a href="/files/analysis/error_analysis.html">error_analysis.html</a> (the report file)</p>'
    if layer:
        values = bench.layer_values(layer)
        body += (f'<h2 id="selected-layer">{esc(layer)}</h2>'
                 + (histograms(values, title="float vs quantized values") if values else "<p>no dump</p>"))
    count = count_layers(bench.model.graph.graph) if bench.model is not None else None
    body += accuracy_body(result, link=lambda tensor: f"/accuracy?layer={quote(tensor, safe='')}", layer_count=count)
    return frame(bench, "/accuracy", "Accuracy analysis", body)


def perf_page(bench: Workbench) -> str:
    errors = bench.errors.get("perf", {})
    model = bench.model
    if model is None:
        return frame(bench, "/perf", "Perf & memory", "<p>Build the model first (Config & build).</p>")
    toolkit = chips.get_chip(model.platforms[0]).toolkit
    names = chips.toolkit2_platforms() if toolkit == 2 else chips.toolkit1_platforms()
    shown = {r.chip for r in bench.perf_reports} or {model.platforms[0]}
    boxes = " ".join(f'<label>{checkbox("chips", n in shown, n, f"chip-{n}")} {esc(n)}</label>' for n in names)
    body = form("/perf", field("chips", "chips", boxes, "eval_perf on each ticked chip, side by side", errors),
                "Run eval_perf + eval_memory", errors)
    if bench.perf_reports:
        count = count_layers(model.graph.graph)
        body += (f'<p id="layer-count">{esc(_rows_note(bench.perf_reports[0].layers, count, "table rows"))}</p>'
                 +'<p><a href="/files/reports/eval_perf.html">eval_perf.html</a> · '
                 '<a href="/files/reports/eval_memory.html">eval_memory.html</a></p>'
                 + perf_body(bench.perf_reports) + "<h2>eval_memory</h2>" + memory_body(bench.memory_report))
    return frame(bench, "/perf", "Perf & memory", body)


def hybrid_page(bench: Workbench) -> str:
    errors = bench.errors.get("hybrid", {})
    candidates = bench.hybrid_candidates()
    if not candidates:
        return frame(bench, "/hybrid", "Hybrid", "<p>Build the model quantized first (Config & build).</p>")
    scores = {row["tensor"]: row["single_cos"] for row in bench.analysis_rows() if row["single_cos"] is not None}
    if scores:   # the layers that lose most when quantized alone first
        candidates = sorted(candidates, key=lambda c: scores.get(c[2], 2.0))
    kept = set(bench.float_layers())
    rows = "".join(f'<tr><td>{checkbox("layers", name in kept, name, f"layer-{name}")}</td>'
                   f"<td>{esc(name)}</td><td>{esc(op)}</td><td>{cos_text(scores.get(tensor))}</td></tr>"
                   for name, op, tensor in candidates)
    hint = "layers in float16 now: " + (", ".join(sorted(kept)) or "none")
    if not scores:
        hint += " · run Accuracy first to sort the layers by their single-layer cosine"
    body = form("/hybrid", f'<p class="hint" id="float-layers">{esc(hint)}</p>{_error(errors, "layers")}'
                f"<table><tr><th>float16</th><th>layer</th><th>op</th><th>single cos</th></tr>{rows}</table>",
                "Rebuild", errors)
    body += auto_hybrid_section((bench.model.metadata or {}).get("auto_hybrid") if bench.model is not None else None)
    return frame(bench, "/hybrid", "Hybrid", body)


def inference_page(bench: Workbench) -> str:
    errors = bench.errors.get("inference", {})
    body = form("/inference", field("image", "input", '<input type="file" id="image" name="image">',
                                    "an image (.jpg/.png/.bmp) or .npy for the first input", errors),
                "Run inference", errors, multipart=True)
    for out in bench.inference:
        body += (f'<h2>{esc(out["name"])}</h2><p class="output-summary">shape {esc(out["shape"])}, min {out["min"]:.6g},'
                 f' max {out["max"]:.6g}, mean {out["mean"]:.6g}</p>')
        if out["top5"]:
            body += table(["class", "score"], [(i, f"{s:.6f}") for i, s in out["top5"]], "top5")
    return frame(bench, "/inference", "Inference", body)


def export_page(bench: Workbench) -> str:
    errors = bench.errors.get("export", {})
    body = form("/export", "", "Export .rknn", errors)
    if bench.export_path and os.path.isfile(bench.export_path):
        size = os.path.getsize(bench.export_path)
        body += (f'<p><a id="download" href="/download" download="{esc(os.path.basename(bench.export_path))}">'
                 f'{esc(os.path.basename(bench.export_path))}</a> (<span id="size">{size}</span> bytes)</p>')
    return frame(bench, "/export", "Export", body)
