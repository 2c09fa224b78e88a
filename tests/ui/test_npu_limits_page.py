"""The layer graph page lists the layers outside the chip's NPU limits (issue 32)."""
from __future__ import annotations

import pytest

pytest.importorskip("starlette", reason="the workbench tests need the 'ui' extra: pip install 'openrknn[ui]'")
pytest.importorskip("multipart", reason="the workbench tests need python-multipart (the 'ui' extra)")
pytest.importorskip("httpx", reason="Starlette's TestClient needs httpx (the 'test' extra)")

from openrknn.ui.app import create_app  # noqa: E402
from tests.helpers import logged_in, start, three_limit_surprises, upload_model  # noqa: E402


@pytest.fixture
def client(tmp_path):
    app = create_app(str(tmp_path / "work"))
    with logged_in(app) as c:
        c.bench = app.state.bench
        yield c


def test_graph_page_shows_the_npu_limit_findings(client, tmp_path):
    model = three_limit_surprises(tmp_path / "surprises.onnx")
    assert upload_model(client, model).headers["location"] == "/config"
    start(client, "/config", data={"target_platform": "rk3566"})
    graph = client.get("/graph").text
    assert 'id="npu-limits"' in graph
    assert "to_nhwc (Transpose): perm [0, 2, 3, 1] (float16): not supported (§3.1.58)" in graph
    assert 'data-layer="to_nhwc" data-op="Transpose" data-dtype="float16" data-target="CPU"' in graph
