"""Start ``openrknn serve`` in a subprocess on 127.0.0.1 with an ephemeral port (tests and bench/serve_load.py)."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


@dataclass
class ServerProcess:
    process: subprocess.Popen
    port: int
    token: str
    log_path: Path

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def log(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def alive(self) -> bool:
        return self.process.poll() is None

    def stop(self) -> None:
        if self.alive():
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)


def start_server(folder: Path, *extra: str, timeout: float = 60.0) -> ServerProcess:
    """Run the server until it writes its port; the token is read from the ``token: …`` line it prints."""
    folder.mkdir(parents=True, exist_ok=True)
    port_file, log_path = folder / "port", folder / "server.log"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
           "PYTHONUNBUFFERED": "1"}
    command = [sys.executable, "-m", "openrknn.cli.main", "serve", "--host", "127.0.0.1", "--port", "0",
               "--token-file", str(folder / "token"), "--port-file", str(port_file), "--device-name", "testboard",
               *extra]
    with open(log_path, "wb") as log_file:
        process = subprocess.Popen(command, stdout=log_file, stderr=subprocess.STDOUT, env=env, cwd=folder)
    deadline = time.monotonic() + timeout
    while not port_file.exists():
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            raise RuntimeError(f"openrknn serve did not start:\n{log_path.read_text()}")
        time.sleep(0.05)
    port = int(port_file.read_text())
    tokens = [line.split(" ", 1)[1] for line in log_path.read_text().splitlines() if line.startswith("token: ")]
    token = tokens[0] if tokens else (folder / "token").read_text().strip()
    return ServerProcess(process, port, token.strip(), log_path)
