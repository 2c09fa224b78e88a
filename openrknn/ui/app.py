"""The Starlette application: routes that render the pages and start the background jobs."""
from __future__ import annotations

import os
import re
import secrets
import shutil
import tempfile
from typing import Any, Iterable

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import FileResponse, HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Route

from openrknn.ui import pages
from openrknn.ui.forms import config_kwargs
from openrknn.ui.guard import DEFAULT_MAX_BODY_BYTES, LOCAL_NAMES, Guard
from openrknn.ui.jobs import Job
from openrknn.ui.workbench import ModelChoice, Workbench

SERVED_FOLDERS = ("analysis", "reports")   # report files the pages link to


UPLOAD_CHUNK = 1 << 20   # uploads are copied to disk in pieces, never held whole in memory
MAX_NAME = 200           # characters of an upload's file name (file systems stop at 255 bytes)


class BadUpload(ValueError):
    """An upload the workbench refuses (its name); the text is shown on the page."""


def _safe_name(name: str) -> str:
    """The upload's base name with odd characters replaced; '', '.', '..' or a long name is refused."""
    base = re.sub(r"[^A-Za-z0-9_.-]", "_", os.path.basename((name or "").replace("\\", "/")))
    if base.strip(".") == "":
        raise BadUpload(f"the upload's file name {name[:40]!r} is not a file name; rename the file")
    if len(base) > MAX_NAME:
        raise BadUpload(f"the upload's file name has {len(base)} characters; rename the file (at most {MAX_NAME})")
    return base


async def _save(upload: Any, folder: str) -> str | None:
    """Copy an uploaded file into ``folder`` in 1 MiB pieces; None when the field was left empty."""
    if upload is None or isinstance(upload, str) or not upload.filename:
        return None
    path = os.path.join(folder, _safe_name(upload.filename))
    os.makedirs(folder, exist_ok=True)
    with open(path, "wb") as handle:
        while chunk := await upload.read(UPLOAD_CHUNK):
            handle.write(chunk)
    return path


def _job_id(request: Request) -> int | None:
    """The job id of the path; None for anything but a short number (a 5000-digit id is no job)."""
    text = request.path_params.get("job_id", "")
    return int(text) if text.isascii() and text.isdigit() and len(text) <= 18 else None


def _started(result: Job | dict[str, str], render: Any) -> Response:
    if isinstance(result, Job):
        return RedirectResponse(f"/job/{result.id}", status_code=303)
    return HTMLResponse(render(), status_code=400)


def create_app(work_dir: str | None = None, secret: str | None = None, hosts: Iterable[str] = LOCAL_NAMES,
               max_upload_bytes: int = DEFAULT_MAX_BODY_BYTES) -> Starlette:
    """The workbench app; its files (uploads, listings, reports, exports) go to ``work_dir``.

    Only requests naming one of ``hosts`` and holding the access token ``secret`` (a new random one
    when None; ``app.state.secret``) get through, see :mod:`openrknn.ui.guard`.
    """
    bench = Workbench(work_dir or tempfile.mkdtemp(prefix="openrknn-ui-"))

    async def model_get(request: Request) -> Response:
        return HTMLResponse(pages.model_page(bench))

    async def model_post(request: Request) -> Response:
        data = await request.form()
        values = {k: str(data.get(k, "")) for k in ("framework", "model", "weights", "input_size_list", "inputs",
                                                      "outputs")}
        upload_dir = tempfile.mkdtemp(prefix="upload-", dir=bench.folder("uploads"))
        try:
            model = await _save(data.get("model_file"), upload_dir)
            weights = await _save(data.get("weights_file"), upload_dir)
        except (BadUpload, OSError) as e:   # nothing of a refused upload stays behind
            shutil.rmtree(upload_dir, ignore_errors=True)
            bench.errors["model"] = {"model": str(e) if isinstance(e, BadUpload) else
                                     f"cannot store the upload: {e.strerror or e}"}
            return HTMLResponse(pages.model_page(bench, values), status_code=400)
        if model is None and weights is None:
            shutil.rmtree(upload_dir, ignore_errors=True)
            upload_dir = None
        choice = ModelChoice(values["framework"], model or values["model"].strip(),
                             weights or values["weights"].strip() or None, values["input_size_list"],
                             values["inputs"], values["outputs"], upload_dir)
        if await run_in_threadpool(bench.pick_model, choice):   # loading a model takes a while
            return HTMLResponse(pages.model_page(bench, values), status_code=400)
        target = "/graph" if choice.framework == "rknn" else "/config"
        return RedirectResponse(target, status_code=303)

    async def config_get(request: Request) -> Response:
        return HTMLResponse(pages.config_page(bench))

    async def config_post(request: Request) -> Response:
        data = await request.form()
        result = await run_in_threadpool(bench.start_build, config_kwargs(data), bool(data.get("do_quantization")),
                                         str(data.get("dataset", "")), bool(data.get("auto_hybrid")))
        return _started(result, lambda: pages.config_page(bench))

    async def job_get(request: Request) -> Response:
        if "job_id" in request.path_params and _job_id(request) is None:
            return Response("no such job", status_code=404)
        return HTMLResponse(pages.job_page(bench, _job_id(request)))

    async def job_api(request: Request) -> Response:
        job = bench.runner.jobs.get(_job_id(request) or 0)
        return JSONResponse(job.to_dict() if job else {"state": "unknown"}, status_code=200 if job else 404)

    async def graph_get(request: Request) -> Response:
        return HTMLResponse(await run_in_threadpool(pages.graph_page, bench))   # layers of a big model: ~1 s

    async def accuracy_get(request: Request) -> Response:
        return HTMLResponse(await run_in_threadpool(pages.accuracy_page, bench, request.query_params.get("layer")))

    async def accuracy_post(request: Request) -> Response:
        data = await request.form()
        try:
            image = await _save(data.get("image"), bench.folder("inputs"))
        except (BadUpload, OSError) as e:
            bench.errors["accuracy"] = {"image": str(e)}
            return HTMLResponse(pages.accuracy_page(bench, None), status_code=400)
        return _started(bench.start_analysis(image), lambda: pages.accuracy_page(bench, None))

    async def perf_get(request: Request) -> Response:
        return HTMLResponse(pages.perf_page(bench))

    async def perf_post(request: Request) -> Response:
        data = await request.form()
        return _started(bench.start_perf([str(v) for v in data.getlist("chips")]), lambda: pages.perf_page(bench))

    async def hybrid_get(request: Request) -> Response:
        return HTMLResponse(pages.hybrid_page(bench))

    async def hybrid_post(request: Request) -> Response:
        data = await request.form()
        return _started(bench.start_hybrid([str(v) for v in data.getlist("layers")]),
                        lambda: pages.hybrid_page(bench))

    async def inference_get(request: Request) -> Response:
        return HTMLResponse(pages.inference_page(bench))

    async def inference_post(request: Request) -> Response:
        data = await request.form()
        try:
            image = await _save(data.get("image"), bench.folder("inputs"))
        except (BadUpload, OSError) as e:
            bench.errors["inference"] = {"image": str(e)}
            return HTMLResponse(pages.inference_page(bench), status_code=400)
        if image is None:
            bench.errors["inference"] = {"image": "choose an input file"}
            return HTMLResponse(pages.inference_page(bench), status_code=400)
        return _started(bench.start_inference(image), lambda: pages.inference_page(bench))

    async def export_get(request: Request) -> Response:
        return HTMLResponse(pages.export_page(bench))

    async def export_post(request: Request) -> Response:
        if await run_in_threadpool(bench.export):
            return HTMLResponse(pages.export_page(bench), status_code=400)
        return RedirectResponse("/export", status_code=303)

    async def download(request: Request) -> Response:
        if not bench.export_path or not os.path.isfile(bench.export_path):
            return Response("export the model first", status_code=404)
        return FileResponse(bench.export_path, filename=os.path.basename(bench.export_path),
                            media_type="application/octet-stream")

    async def files(request: Request) -> Response:
        folder, _, name = request.path_params["path"].partition("/")
        if "\0" in name:
            return Response("not found", status_code=404)
        path = os.path.realpath(os.path.join(bench.work_dir, folder, name))
        root = os.path.realpath(os.path.join(bench.work_dir, folder))
        if folder not in SERVED_FOLDERS or not path.startswith(root + os.sep) or not os.path.isfile(path):
            return Response("not found", status_code=404)
        return FileResponse(path)

    routes = [Route("/", model_get), Route("/model", model_post, methods=["POST"]),
              Route("/config", config_get), Route("/config", config_post, methods=["POST"]),
              Route("/job", job_get), Route("/job/{job_id}", job_get), Route("/api/job/{job_id}", job_api),
              Route("/graph", graph_get), Route("/accuracy", accuracy_get),
              Route("/accuracy", accuracy_post, methods=["POST"]), Route("/perf", perf_get),
              Route("/perf", perf_post, methods=["POST"]), Route("/hybrid", hybrid_get),
              Route("/hybrid", hybrid_post, methods=["POST"]), Route("/inference", inference_get),
              Route("/inference", inference_post, methods=["POST"]), Route("/export", export_get),
              Route("/export", export_post, methods=["POST"]), Route("/download", download),
              Route("/files/{path:path}", files)]
    secret = secret or secrets.token_urlsafe(24)
    app = Starlette(routes=routes, middleware=[Middleware(Guard, secret=secret, hosts=hosts,
                                                          max_body_bytes=max_upload_bytes)])
    app.state.bench = bench
    app.state.secret = secret   # the access token of the start URL
    return app
