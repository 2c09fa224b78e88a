"""The workbench app through Starlette's TestClient: the whole flow, and bad input shown at its field."""
from __future__ import annotations

import os
import re
from pathlib import Path

import numpy as np
import pytest

from openrknn.graph.layer_index import count_layers
from openrknn.model_file import load_model_bytes
from tests.helpers import logged_in, start, upload_model, wait_job

pytest.importorskip("starlette", reason="the workbench tests need the 'ui' extra: pip install 'openrknn[ui]'")
pytest.importorskip("multipart", reason="the workbench tests need python-multipart (the 'ui' extra)")
pytest.importorskip("httpx", reason="Starlette's TestClient needs httpx (the 'test' extra)")

from openrknn.ui.app import create_app  # noqa: E402


@pytest.fixture
def client(tmp_path: Path):
    app = create_app(str(tmp_path / "work"))
    with logged_in(app) as c:
        c.bench = app.state.bench
        yield c


def files_under(folder: str) -> list[str]:
    return [os.path.join(d, f) for d, _, names in os.walk(folder) for f in names]


def test_every_page_renders_before_a_model(client):
    for url in ("/", "/config", "/job", "/graph", "/accuracy", "/perf", "/hybrid", "/inference", "/export"):
        response = client.get(url)
        assert response.status_code == 200, url
        assert len(re.findall(r'<header>.*?</header>', response.text)[0].split("<a href=")) == 10, url   # nine pages


def test_convert_analyse_export_flow(client, small_model, tmp_path):
    model, calib = small_model
    assert upload_model(client, model).headers["location"] == "/config"
    start(client, "/config", data={"target_platform": "rk3588", "mean_values": "0 0 0", "std_values": "255 255 255",
                                   "do_quantization": "on", "dataset": str(calib)})
    graph = client.get("/graph").text
    count = int(re.search(r'id="layer-count">(\d+) layers', graph).group(1))
    boxes = int(re.search(r'(\d+) boxes: ', graph).group(1))
    assert count == count_layers(client.bench.model.graph.graph) and count >= 4   # build, info, every page
    # + the input/output operators and the cascaded GlobalAveragePool's second step (16x16 → 2x2 → 1x1)
    assert boxes == graph.count('<g class="layer"') == count + 2 + 1
    assert f"{boxes} boxes: {count} layers + 2 input/output operators + 1 extra steps" in graph
    assert 'data-dtype="int8"' in graph

    start(client, "/accuracy", files={"image": ("c0.npy", (calib / "c0.npy").read_bytes())})
    page = client.get("/accuracy").text
    rows = client.bench.analysis_rows()
    assert page.count('data-series="single"') == sum(r["single_cos"] is not None for r in rows
                                                     if r["entire_cos"] is not None or r["single_cos"] is not None)
    layer = rows[-1]["tensor"]
    detail = client.get("/accuracy", params={"layer": layer}).text
    assert 'data-series="float (golden)"' in detail and 'data-series="simulator"' in detail
    assert client.get("/files/analysis/error_analysis.html").status_code == 200
    assert client.get("/files/../small.onnx").status_code == 404

    start(client, "/perf", data={"chips": ["rk3588", "rk3566"]})
    perf = client.get("/perf").text
    assert re.findall(r'class="bar" data-label="(rk\d+)"', perf) == ["rk3588", "rk3566"]
    assert "eval_memory" in perf

    shown = [float(v) for v in re.findall(r"<td>(-?\d\.\d{5})</td></tr>", client.get("/hybrid").text)]
    assert shown and shown == sorted(shown)            # after an analysis: the worst layers first
    candidates = [name for name, op, _ in client.bench.hybrid_candidates() if op == "Conv"]
    start(client, "/hybrid", data={"layers": candidates})
    assert candidates and set(candidates) <= set(client.bench.float_layers())

    start(client, "/inference", files={"image": ("c1.npy", (calib / "c1.npy").read_bytes())})
    assert len(re.findall(r"<tr><td>\d+</td>", client.get("/inference").text)) == 5

    assert client.post("/export", follow_redirects=False).status_code == 303
    data = client.get("/download").content
    assert data == Path(client.bench.export_path).read_bytes()
    assert load_model_bytes(data).is_quantized


def test_wrong_file_is_rejected_at_its_field_and_removed(client, tmp_path):
    bad = tmp_path / "bad.onnx"
    bad.write_text("not a model")
    response = upload_model(client, bad)
    assert response.status_code == 400
    assert re.search(r'id="error-model">[^<]*bad\.onnx', response.text)
    assert files_under(client.bench.work_dir) == []


def test_wrong_mean_count_is_shown_next_to_mean_values(client, small_model):
    model, calib = small_model
    upload_model(client, model)
    response = client.post("/config", data={"target_platform": "rk3588", "mean_values": "1 2", "std_values": "1 1"},
                           follow_redirects=False)
    job_id = int(response.headers["location"].rsplit("/", 1)[1])
    assert wait_job(client.bench, job_id) == "failed"
    page = client.get("/config").text
    assert re.search(r'id="error-mean_values">[^<]*mean_values[^<]*2 value', page)
    assert not os.path.exists(os.path.join(client.bench.work_dir, "exports"))
    # config()'s own check (mean and std lengths differ) is shown at once, nothing started
    response = client.post("/config", data={"mean_values": "0 0 0", "std_values": "1 1"})
    assert response.status_code == 400 and 'id="error-mean_values"' in response.text


def test_empty_dataset_folder_is_shown_next_to_dataset(client, small_model, tmp_path):
    model, _ = small_model
    upload_model(client, model)
    empty = tmp_path / "empty"
    empty.mkdir()
    response = client.post("/config", data={"target_platform": "rk3588", "do_quantization": "on",
                                            "dataset": str(empty)})
    assert response.status_code == 400
    assert re.search(r'id="error-dataset">[^<]*empty[^<]*no calibration file', response.text)
    assert not os.path.exists(os.path.join(client.bench.work_dir, "datasets"))


def test_ui_without_the_extra_names_it(monkeypatch, capsys):
    from openrknn import ui
    from openrknn.cli.main import main
    monkeypatch.setattr(ui, "missing_packages", lambda: ["starlette"])
    assert main(["ui", "--no-browser"]) == 1
    assert "E ui: the workbench needs the 'ui' extra (starlette missing): pip install 'openrknn[ui]'" in capsys.readouterr().out


def test_actions_while_a_job_runs_say_so_without_waiting(client, small_model):
    import threading
    model, _ = small_model
    upload_model(client, model)
    release = threading.Event()
    job = client.bench.runner.start("held", lambda job: release.wait(10), "/graph", "/config")
    try:
        response = upload_model(client, model)
        assert response.status_code == 400 and "a job is running" in response.text
        response = client.post("/config", data={"target_platform": "rk3588"})
        assert response.status_code == 400 and "a job is running" in response.text
    finally:
        release.set()
    assert wait_job(client.bench, job.id) == "done"


def test_hostile_tensor_names_are_escaped_on_every_page(client, small_model, tmp_path):
    import onnx
    model, calib = small_model
    hostile = '<script>alert("x")</script>'
    graph = onnx.load(str(model))
    for node in graph.graph.node:          # the Relu's output and the Conv node get hostile names
        if node.op_type == "Relu":
            node.output[0] = hostile
        if node.input and node.input[0] == "r":
            node.input[0] = hostile
        if node.op_type == "Conv":
            node.name = hostile + "conv"
    onnx.save(graph, str(tmp_path / "hostile.onnx"))
    upload_model(client, tmp_path / "hostile.onnx")
    start(client, "/config", data={"target_platform": "rk3588", "do_quantization": "on", "dataset": str(calib)})
    start(client, "/accuracy", data={})
    assert any(row["tensor"] == hostile for row in client.bench.analysis_rows())
    start(client, "/perf", data={"chips": ["rk3588"]})
    pages = [client.get(url).text for url in ("/graph", "/accuracy", "/perf", "/hybrid", "/job")]
    pages.append(client.get("/accuracy", params={"layer": hostile}).text)
    pages.append(client.get("/files/analysis/error_analysis.html").text)
    for page in pages:
        assert "<script>alert" not in page
    assert sum("&lt;script&gt;alert" in page for page in pages) >= 5


def test_command_line_defaults_to_this_computer():
    from openrknn import ui
    args = ui.build_parser().parse_args([])
    assert (args.host, args.port, args.no_browser) == ("127.0.0.1", 8000, False)
    import rknn.bin.visualization as visualization
    assert visualization.main is ui.main


def test_ui_command_serves_on_localhost_without_a_browser(monkeypatch, tmp_path):
    import uvicorn
    import webbrowser
    from openrknn.cli.main import main
    served, opened = [], []
    monkeypatch.setattr(uvicorn, "run", lambda app, host, port, **kw: served.append((app.state.bench.work_dir,
                                                                                   host, port)))
    monkeypatch.setattr(webbrowser, "open", opened.append)
    assert main(["ui", "--no-browser", "--port", "8765", "--work-dir", str(tmp_path / "w")]) == 0
    assert served == [(str(tmp_path / "w"), "127.0.0.1", 8765)] and opened == []
