"""What a new user met on the workbench: progress, one name and one count per layer, stale errors, extras."""
from __future__ import annotations

import re
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("starlette", reason="the workbench tests need the 'ui' extra: pip install 'openrknn[ui]'")
pytest.importorskip("multipart", reason="the workbench tests need python-multipart (the 'ui' extra)")
pytest.importorskip("httpx", reason="Starlette's TestClient needs httpx (the 'test' extra)")


from openrknn.graph.layer_index import count_layers  # noqa: E402
from openrknn.ui.app import create_app  # noqa: E402
from openrknn.ui.jobs import JobRunner  # noqa: E402
from tests.helpers import logged_in, start, upload_model, wait_job# noqa: E402

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def client(tmp_path: Path):
    app = create_app(str(tmp_path / "work"))
    with logged_in(app) as c:   # the start URL's token and the CSRF header, as the guard asks
        c.bench = app.state.bench
        yield c


def test_ui_extra_brings_the_tflite_loader():
    """Uploading a .tflite on the Model page must work with only the 'ui' extra installed."""
    import tomllib
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    names = {extra: {re.split(r"[<>=\[]", req)[0] for req in reqs} for extra, reqs in extras.items()}
    assert names["tflite"] <= names["ui"]


def test_progress_shows_the_growing_log_bar_and_elapsed_time():
    from tqdm import tqdm
    runner = JobRunner()
    release = []

    def work(job) -> bool:
        for _ in tqdm(range(3), desc="I quantize: calibration", disable=None):
            time.sleep(0.01)
        while not release:
            time.sleep(0.01)
        return True

    job = runner.start("build", work, "/graph", "/config")
    deadline = time.monotonic() + 10
    while "3/3" not in job.progress and time.monotonic() < deadline:
        time.sleep(0.02)
    running = job.to_dict()
    release.append(True)
    assert wait_job(type("B", (), {"runner": runner})(), job.id) == "done"
    assert "I quantize: calibration" in running["progress"] and "3/3" in running["progress"]
    assert running["state"] == "running" and running["elapsed_s"] >= 0.0
    assert job.to_dict()["elapsed_s"] >= running["elapsed_s"]
    assert not isinstance(sys.stderr, type(None)) and type(sys.stderr).__name__ != "_JobStderr"   # restored


def test_progress_page_shows_elapsed_time(client, small_model):
    model, calib = small_model
    upload_model(client, model)
    job_id = start(client, "/config", data={"target_platform": "rk3588", "do_quantization": "on",
                                            "dataset": str(calib)})
    page = client.get(f"/job/{job_id}").text
    assert re.search(r'id="elapsed">\d+\.\d s', page)
    assert "I build: done" in page


def test_one_name_and_one_count_per_layer_on_every_page(client, small_model, capsys):
    model, calib = small_model
    upload_model(client, model)
    job_id = start(client, "/config", data={"target_platform": "rk3588", "do_quantization": "on",
                                            "dataset": str(calib)})
    count = count_layers(client.bench.model.graph.graph)
    built = next(line for line in client.bench.runner.jobs[job_id].lines if line.startswith("I build: done"))
    assert f"({count} layers," in built
    assert re.search(r'id="layer-count">(\d+) layers', client.get("/graph").text).group(1) == str(count)
    start(client, "/accuracy", files={"image": ("c0.npy", (calib / "c0.npy").read_bytes())})
    accuracy = client.get("/accuracy").text
    assert re.search(r'class="layer-count">(\d+) layers', accuracy).group(1) == str(count)
    start(client, "/perf", data={"chips": ["rk3588"]})
    assert re.search(r'id="layer-count">\d+ table rows: (\d+) layers', client.get("/perf").text).group(1) == str(count)
    # the hybrid page names layers as the accuracy analysis does
    hybrid = {name for name, _, _ in client.bench.hybrid_candidates()}
    analysed = {row["tensor"] for row in client.bench.analysis_rows() if row["single_cos"] is not None}
    inputs = {spec.name for spec in client.bench.model.inputs}
    assert len(hybrid) == count and hybrid == analysed - inputs


def test_perf_table_stays_inside_the_page(client, small_model):
    model, calib = small_model
    upload_model(client, model)
    start(client, "/config", data={"target_platform": "rk3588"})
    start(client, "/perf", data={"chips": ["rk3588", "rk3566"]})
    page = client.get("/perf").text
    assert '<div class="table-scroll"><table class="layers">' in page and "flex-wrap:wrap" in page
    assert '<td class="name">' in page and "svg.chart{max-width:100%" in page


def test_a_new_model_clears_the_previous_models_errors(client, small_model, tmp_path):
    model, _ = small_model
    upload_model(client, model)
    response = client.post("/config", data={"target_platform": "rk3588", "mean_values": "1 2", "std_values": "1 1"},
                           follow_redirects=False)
    if response.status_code == 303:   # the build job found the error: wait for it to fail
        assert wait_job(client.bench, int(response.headers["location"].rsplit("/", 1)[1])) == "failed"
    assert 'id="error-mean_values"' in client.get("/config").text
    from tests.helpers import make_conv_model
    other = make_conv_model(tmp_path / "other.onnx", seed=5)
    assert upload_model(client, other).headers["location"] == "/config"
    assert 'class="error"' not in client.get("/config").text


@pytest.mark.integration
def test_tflite_upload_builds(client, shared_data):
    model = shared_data / "models" / "tflite" / "face_detection_short_range.tflite"
    if not model.is_file():
        pytest.skip(f"{model.name} not in the shared models")
    response = client.post("/model", data={"framework": "tflite"},
                           files={"model_file": (model.name, model.read_bytes())}, follow_redirects=False)
    assert response.headers["location"] == "/config", response.text
    start(client, "/config", data={"target_platform": "rk3588"})
    assert count_layers(client.bench.model.graph.graph) > 10
