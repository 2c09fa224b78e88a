"""The workbench against a hostile page, another local user and odd requests: foreign Host/Origin,
no access token, no CSRF token, oversized uploads and bad names — each a 4xx with a message."""
from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

pytest.importorskip("starlette", reason="the workbench tests need the 'ui' extra: pip install 'openrknn[ui]'")
pytest.importorskip("multipart", reason="the workbench tests need python-multipart (the 'ui' extra)")
pytest.importorskip("httpx", reason="Starlette's TestClient needs httpx (the 'test' extra)")

from starlette.testclient import TestClient  # noqa: E402

from openrknn.ui.app import create_app  # noqa: E402
from openrknn.ui.guard import allowed_hosts  # noqa: E402
from tests.helpers import logged_in  # noqa: E402

PAGES = ("/", "/config", "/job", "/graph", "/accuracy", "/perf", "/hybrid", "/inference", "/export")


@pytest.fixture
def app(tmp_path: Path):
    return create_app(str(tmp_path / "work"), max_upload_bytes=1 << 20)


@pytest.fixture
def client(app):
    with logged_in(app) as c:
        yield c


def uploads(app) -> list[str]:
    folder = os.path.join(app.state.bench.work_dir, "uploads")
    return os.listdir(folder) if os.path.isdir(folder) else []


@pytest.mark.parametrize("host", ["evil.example:8000", "127.0.0.1.evil.example", "localhost.:8000", ""])
def test_a_foreign_host_is_refused(client, host):
    """DNS rebinding: a page whose name resolves to 127.0.0.1 sends its own name as Host."""
    for request in (lambda: client.get("/", headers={"host": host}),
                    lambda: client.get("/download", headers={"host": host}),
                    lambda: client.post("/model", headers={"host": host}, data={"framework": "onnx"})):
        response = request()
        assert response.status_code == 403 and "answers only to" in response.text


def test_a_post_from_another_site_is_refused(client):
    response = client.post("/export", headers={"origin": "http://evil.example"}, follow_redirects=False)
    assert response.status_code == 403 and "another site" in response.text
    assert client.post("/export", headers={"origin": "null"}).status_code == 403
    same = client.post("/export", headers={"origin": "http://127.0.0.1:8000"}, follow_redirects=False)
    assert same.status_code == 400   # got through the guard: "build the model first"


def test_without_the_access_token_nothing_is_served(app):
    stranger = TestClient(app, base_url="http://127.0.0.1:8000")
    for url in PAGES + ("/download", "/api/job/1", "/files/reports/eval_perf.html"):
        response = stranger.get(url)
        assert response.status_code == 403 and "?token=" in response.text, url
    assert stranger.get("/?token=wrong").status_code == 403
    assert stranger.post(f"/model?token={app.state.secret}", data={"framework": "onnx"}).status_code == 403
    opened = stranger.get(f"/config?token={app.state.secret}&x=1", follow_redirects=False)
    assert opened.status_code == 303 and opened.headers["location"] == "/config?x=1"
    assert "HttpOnly" in opened.headers["set-cookie"] and "SameSite=Strict" in opened.headers["set-cookie"]
    assert stranger.get("/config").status_code == 200   # the session cookie now
    fresh = TestClient(app, base_url="http://127.0.0.1:8000")
    onward = fresh.get(f"http://127.0.0.1:8000//evil.example/%C3%A9?token={app.state.secret}",
                       follow_redirects=False)
    assert onward.status_code == 303 and onward.headers["location"] == "/evil.example/%C3%A9"   # not off-site


def test_every_form_carries_the_session_csrf_token_and_posts_need_it(app, client):
    token = client.headers["X-CSRF-Token"]
    for url in PAGES:
        page = client.get(url).text
        forms = re.findall(r"<form\b[^>]*>", page)
        assert all(f"csrf_token={token}" in form for form in forms), (url, forms)
    bare = TestClient(app, base_url="http://127.0.0.1:8000", cookies=dict(client.cookies))
    response = bare.post("/export")
    assert response.status_code == 403 and "CSRF" in response.text
    assert bare.post(f"/export?csrf_token={'0' * 32}").status_code == 403
    assert bare.post(f"/export?csrf_token={token}").status_code == 400   # accepted: "build the model first"
    other = logged_in(app)   # another session has another token
    assert other.headers["X-CSRF-Token"] != token


def test_an_upload_over_the_limit_is_refused_and_leaves_nothing(app, client):
    response = client.post("/model", data={"framework": "onnx"},
                           files={"model_file": ("big.onnx", b"\0" * (2 << 20))})
    assert response.status_code == 413 and "--max-upload-mb" in response.text
    assert uploads(app) == []

    def chunks():   # no Content-Length: counted as it arrives
        yield b"--x\r\nContent-Disposition: form-data; name=\"model_file\"; filename=\"big.onnx\"\r\n\r\n"
        for _ in range(4):
            yield b"\0" * (512 << 10)
        yield b"\r\n--x--\r\n"
    response = client.post("/model", content=chunks(),
                           headers={"content-type": "multipart/form-data; boundary=x"})
    assert response.status_code == 413
    assert uploads(app) == []


@pytest.mark.parametrize("name", ["..", ".", "x" * 300, "../..", ""])
def test_bad_upload_names_are_a_400_with_a_message(app, client, name):
    response = client.post("/model", data={"framework": "onnx"}, files={"model_file": (name, b"onnx?")})
    assert response.status_code == 400 and "Traceback" not in response.text
    if name:
        assert "rename the file" in response.text
    assert uploads(app) == []


def test_odd_paths_are_a_404(client):
    assert client.get("/files/reports/a%00b.html").status_code == 404
    assert client.get("/files/analysis/%00").status_code == 404
    assert client.get("/job/" + "9" * 5000).status_code == 404
    assert client.get("/api/job/" + "9" * 5000).status_code == 404
    assert client.get("/api/job/²").status_code == 404


def test_allowed_hosts_of_the_bound_address():
    assert allowed_hosts("127.0.0.1") == {"localhost", "127.0.0.1", "::1"}
    assert "192.168.1.5" in allowed_hosts("192.168.1.5")
    app = create_app(hosts=allowed_hosts("0.0.0.0"))   # any address literal, never a name
    with TestClient(app, base_url="http://10.1.2.3:8000") as c:
        assert c.get(f"/?token={app.state.secret}").status_code == 200
        assert c.get("/", headers={"host": "evil.example:8000"}).status_code == 403
