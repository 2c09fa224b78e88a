"""``openrknn ui``: the conversion workbench in the browser (Toolkit 1.3's "Visualization").

A local web application (Starlette + uvicorn, the ``ui`` extra): pick a model, config and build,
look at the NPU layer graph, accuracy analysis, eval_perf/eval_memory, hybrid quantization,
inference, and download the ``.rknn``. See docs/ui.md.
"""
from __future__ import annotations

import argparse
import importlib.util
import threading
import webbrowser
from typing import Sequence

from openrknn import log

REQUIRED = ("starlette", "uvicorn", "multipart")


def missing_packages() -> list[str]:
    """The ``ui`` extra's packages that are not installed."""
    return [name for name in REQUIRED if importlib.util.find_spec(name) is None]


def build_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    parser = parser or argparse.ArgumentParser(prog="openrknn ui", description="the conversion workbench")
    parser.add_argument("--host", default="127.0.0.1", help="address to serve on (default 127.0.0.1: this computer only)")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--no-browser", dest="no_browser", action="store_true", help="do not open a browser")
    parser.add_argument("--work-dir", dest="work_dir", default=None,
                        help="folder for uploads, reports and exports (default: a new temporary folder)")
    parser.add_argument("--max-upload-mb", dest="max_upload_mb", type=int, default=2048,
                        help="largest upload in MiB (default %(default)s); larger models: type their path")
    return parser


def run(args: argparse.Namespace) -> int:
    """Serve the workbench until interrupted; 1 (with an E line) when the ``ui`` extra is missing."""
    missing = missing_packages()
    try:
        if missing:
            raise ImportError(f"{', '.join(missing)} missing")
        import uvicorn

        from openrknn.ui.app import create_app
    except ImportError as e:
        log.error(f"ui: the workbench needs the 'ui' extra ({e}): pip install 'openrknn[ui]'")
        return 1
    from openrknn.ui.guard import allowed_hosts
    if args.max_upload_mb < 1:
        log.error("ui: --max-upload-mb must be at least 1")
        return 1
    app = create_app(args.work_dir, hosts=allowed_hosts(args.host), max_upload_bytes=args.max_upload_mb << 20)
    shown_host = f"[{args.host}]" if ":" in args.host else args.host
    url = f"http://{shown_host}:{args.port}/?token={app.state.secret}"   # the token is the access key
    log.info(f"ui: workbench at {url} (files in {app.state.bench.work_dir}); Ctrl+C stops it")
    if not args.no_browser:
        threading.Timer(1.0, webbrowser.open, (url,)).start()
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return run(build_parser().parse_args(argv))
