"""The layer graph page lists the layers outside the chip's NPU limits (issue 32)."""
from __future__ import annotations

import pytest

pytest.importorskip("starlette", reason="the workbench tests need the 'ui' extra: pip install 'openrknn[ui]'")
pytest.importorskip("multipart", reason="the workbench tests need python-multipart (the 'ui' extra)")
pytest.importorskip("httpx", reason="Starlette's TestClient needs httpx (the 'test' extra)")

from tests.api.test_check_limits import _three_surprises  # noqa: E402
from tests.ui.test_app import client, start, upload_model  # noqa: E402,F401  (client is a fixture)


def test_graph_page_shows_the_npu_limit_findings(client, tmp_path):  # noqa: F811
    model = _three_surprises(tmp_path / "surprises.onnx")
    assert upload_model(client, model).headers["location"] == "/config"
    start(client, "/config", data={"target_platform": "rk3566"})
    graph = client.get("/graph").text
    assert 'id="npu-limits"' in graph
    assert "to_nhwc (Transpose): perm [0, 2, 3, 1] (float16): not supported (§3.1.58)" in graph
    assert 'data-layer="to_nhwc" data-op="Transpose" data-dtype="float16" data-target="CPU"' in graph
