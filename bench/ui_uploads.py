"""Memory of the workbench while it receives large uploads (docs/security.md).

    PYTHONPATH=$PWD python bench/ui_uploads.py [--sizes 200,400,800] [--code OTHER_CHECKOUT]

Starts ``openrknn ui`` on 127.0.0.1 in a subprocess (from ``--code``, default this checkout), opens
the start URL (access token, session cookie, CSRF token when the version has them), streams an upload
of each size (zeros named ``big.onnx``, framework ``none`` so that no loader reads it afterwards) to
the Model page, and prints the HTTP status and the server's peak RSS growth per upload.
"""
from __future__ import annotations

import argparse
import http.client
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BOUNDARY = "openrknnbenchboundary"


def peak_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status", encoding="ascii") as handle:
        return next(int(line.split()[1]) for line in handle if line.startswith("VmHWM")) / 1024


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start(code: Path, folder: Path) -> tuple[subprocess.Popen, int, str | None, Path]:
    port = free_port()
    log_path = folder / "ui.log"
    env = dict(os.environ, PYTHONPATH=str(code), PYTHONUNBUFFERED="1")
    with open(log_path, "wb") as log_file:
        process = subprocess.Popen([sys.executable, "-m", "openrknn.cli.main", "ui", "--no-browser", "--port",
                                    str(port), "--work-dir", str(folder / "work")], stdout=log_file,
                                   stderr=subprocess.STDOUT, env=env, cwd=folder)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.2)
    token = re.search(r"\?token=([\w-]+)", log_path.read_text(errors="replace"))
    return process, port, token.group(1) if token else None, log_path


def open_session(port: int, token: str | None) -> dict[str, str]:
    """Headers that carry the session cookie and the CSRF token (none for a version without them)."""
    if token is None:
        return {}
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    connection.request("GET", f"/?token={token}")
    answer = connection.getresponse()
    answer.read()
    cookie = answer.getheader("set-cookie", "").split(";")[0]
    connection.request("GET", "/", headers={"Cookie": cookie})
    page = connection.getresponse().read().decode()
    csrf = re.search(r"csrf_token=([0-9a-f]+)", page).group(1)
    return {"Cookie": cookie, "X-CSRF-Token": csrf}


def upload(port: int, headers: dict[str, str], mib: int) -> int:
    # framework 'none' is refused right after the upload is stored: what is measured is receiving it
    head = (f"--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"framework\"\r\n\r\nnone\r\n"
            f"--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"model_file\"; filename=\"big.onnx\"\r\n"
            "Content-Type: application/octet-stream\r\n\r\n").encode()
    tail = f"\r\n--{BOUNDARY}--\r\n".encode()
    chunk = bytes(1 << 20)

    def body():
        yield head
        for _ in range(mib):
            yield chunk
        yield tail
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    connection.request("POST", "/model", body=body(), headers={
        **headers, "Content-Type": f"multipart/form-data; boundary={BOUNDARY}",
        "Content-Length": str(len(head) + mib * len(chunk) + len(tail))})
    answer = connection.getresponse()
    answer.read()
    return answer.status


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="200,400,800", help="upload sizes in MiB")
    parser.add_argument("--code", type=Path, default=REPO, help="checkout the workbench runs from")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        process, port, token, log_path = start(args.code.resolve(), Path(tmp))
        try:
            headers = open_session(port, token)
            print(f"workbench from {args.code} (access token: {'yes' if token else 'none'})")
            for mib in (int(v) for v in args.sizes.split(",")):
                before = peak_mib(process.pid)
                started = time.perf_counter()
                status = upload(port, headers, mib)
                print(f"upload {mib:4d} MiB: HTTP {status} in {time.perf_counter() - started:5.1f} s, server peak "
                      f"RSS {before:.0f} -> {peak_mib(process.pid):.0f} MiB")
        finally:
            process.terminate()
            process.wait(timeout=20)
    return 0


if __name__ == "__main__":
    sys.exit(main())
