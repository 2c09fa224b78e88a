"""``openrknn serve``: the board side of ``init_runtime(target=…, device_id=…)``.

Listens on TCP (optionally TLS), checks a shared token, then loads models into RKNNLite contexts
and runs inference / timing / memory queries for the PC. Wire format: :mod:`openrknn.runtime.protocol`.
Every refusal (bad token, oversized or malformed frame, unknown command, failed load) is answered
with a clear error and logged with the peer's address; the server keeps serving.

Example (on the board)::

    $ openrknn serve --host 0.0.0.0
    token: 3q2-…           # printed once, on first start; stored 0600 in the token file
"""
from __future__ import annotations

import hmac
import os
import secrets
import socket
import socketserver
import ssl
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from openrknn import __version__, log
from openrknn.runtime import protocol
from openrknn.runtime.contexts import ContextPool, Refused, process_rss
from openrknn.runtime.protocol import PeerClosed, ProtocolError, pack_array, unpack_array

MAX_LOOP_COUNT = 1000
HELLO_TIMEOUT_S = 10.0    # TLS handshake and token must arrive within this


def default_token_path() -> Path:
    return Path(os.environ.get("XDG_CONFIG_HOME", Path.home() / ".config")) / "openrknn" / "server_token"


def load_or_create_token(path: str | os.PathLike[str]) -> tuple[str, bool]:
    """The token stored at ``path``; a new random one (file mode 0600) when the file does not exist.

    Returns ``(token, created)``. A token file others can read is refused: anyone reading it could
    drive the board.
    """
    path = Path(path)
    if path.exists():
        mode = path.stat().st_mode & 0o777
        if mode & 0o077:
            raise PermissionError(f"token file {path} is readable by other users (mode {mode:04o}); "
                                  f"run: chmod 600 {path}")
        token = path.read_text(encoding="ascii").strip()
        if len(token) < 16:
            raise ValueError(f"token file {path} holds no usable token (16+ characters); delete it to make a new one")
        return token, False
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    token = secrets.token_urlsafe(32)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="ascii") as handle:
        handle.write(token + "\n")
    return token, True


@dataclass(frozen=True)
class ServeSettings:
    """Limits and identity of one server."""

    token: str
    device: str = socket.gethostname()
    max_frame_bytes: int = protocol.DEFAULT_MAX_FRAME_MB * 1024 * 1024
    max_contexts: int = 4
    max_clients: int = 16
    idle_timeout_s: float = 600.0
    tls: ssl.SSLContext | None = None


class _Connection(socketserver.BaseRequestHandler):
    server: "BoardServer"

    def setup(self) -> None:
        self.peer = "%s:%s" % self.client_address[:2]
        self.owner = id(self)

    def refuse(self, reason: str) -> None:
        log.warning(f"serve: refused {self.peer}: {reason}")

    def handle(self) -> None:
        settings = self.server.settings
        sock: socket.socket = self.request
        sock.settimeout(min(HELLO_TIMEOUT_S, settings.idle_timeout_s))   # a silent stranger frees the slot soon
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)   # small request/answer pairs: no Nagle delay
        try:
            if settings.tls is not None:
                sock = settings.tls.wrap_socket(sock, server_side=True)
            self.sock = sock
            if self._hello():
                sock.settimeout(settings.idle_timeout_s)
                self._serve_requests()
        except PeerClosed:
            pass
        except (ssl.SSLError, OSError) as e:
            self.refuse(f"connection error: {e}")
        finally:
            released = self.server.pool.release_owner(self.owner)
            if released:
                log.info(f"serve: {self.peer} disconnected; released {released} model(s)")

    def _answer(self, message: dict[str, Any]) -> None:
        protocol.write_frame(self.sock, message)

    def _hello(self) -> bool:
        try:
            request = protocol.read_frame(self.sock, protocol.HELLO_MAX_BYTES)
        except PeerClosed:
            return False
        except ProtocolError as e:
            self.refuse(f"bad first frame: {e}")
            self._answer({"ok": False, "error": f"bad first frame: {e}"})
            return False
        token = request.get("token")
        if request.get("cmd") != "hello":
            reason = "the first request must be 'hello' with the token"
        elif not isinstance(token, str) or not token:
            reason = "no token given (set OPENRKNN_TOKEN or the device's token in devices.yaml)"
        elif not hmac.compare_digest(token.encode("utf-8"), self.server.settings.token.encode("utf-8")):
            reason = "wrong token"
        elif request.get("version") != protocol.PROTOCOL_VERSION:
            reason = (f"protocol version {request.get('version')!r} is not supported (server speaks "
                      f"{protocol.PROTOCOL_VERSION}); install the same openrknn version on PC and board")
        else:
            self._answer({"ok": True, **self._info()})
            log.info(f"serve: {self.peer} connected")
            return True
        self.refuse(reason)
        self._answer({"ok": False, "error": reason})
        return False

    def _serve_requests(self) -> None:
        max_bytes = self.server.settings.max_frame_bytes
        while True:
            try:
                request = protocol.read_frame(self.sock, max_bytes)
            except PeerClosed:
                return
            except ProtocolError as e:   # the stream cannot be trusted after this: answer and hang up
                self.refuse(str(e))
                self._answer({"ok": False, "error": str(e)})
                return
            self._answer(self._dispatch(request))

    def _dispatch(self, request: dict[str, Any]) -> dict[str, Any]:
        name = request.get("cmd")
        command = _COMMANDS.get(name) if isinstance(name, str) else None
        if command is None:
            reason = f"unknown command {name!r} (known: {sorted(_COMMANDS)})"
            self.refuse(reason)
            return {"ok": False, "error": reason}
        try:
            return {"ok": True, **command(self, request)}
        except (Refused, ProtocolError) as e:
            self.refuse(f"{name}: {e}")
            return {"ok": False, "error": f"{name}: {e}"}
        except Exception as e:  # noqa: BLE001 - one bad request must not take the server down
            self.refuse(f"{name}: internal error: {type(e).__name__}: {e}")
            return {"ok": False, "error": f"{name}: internal error: {type(e).__name__}: {e}"}

    def _info(self) -> dict[str, Any]:
        return {"device": self.server.settings.device, "server_version": __version__,
                "protocol": protocol.PROTOCOL_VERSION, "backend": "RKNNLite",
                "max_contexts": self.server.settings.max_contexts, "contexts": len(self.server.pool)}

    # ---------------------------------------------------------------- commands
    def cmd_ping(self, request: dict[str, Any]) -> dict[str, Any]:
        return {}

    def cmd_info(self, request: dict[str, Any]) -> dict[str, Any]:
        return {**self._info(), "rss": process_rss()}

    def cmd_load(self, request: dict[str, Any]) -> dict[str, Any]:
        model = request.get("model")
        if not isinstance(model, bytes) or not model:
            raise Refused("'model' must be the .rknn file's bytes")
        options = {k: request.get(k) for k in ("target", "core_mask", "async_mode", "perf_debug", "eval_mem")}
        context = self.server.pool.load(self.owner, model, options)
        log.info(f"serve: {self.peer} loaded a {len(model)}-byte model as context {context.id}")
        return {"context": context.id, "options": options}

    def cmd_infer(self, request: dict[str, Any]) -> dict[str, Any]:
        context = self.server.pool.get(self.owner, request.get("context"))
        outputs = context.infer(_arrays(request), request.get("data_format"), request.get("inputs_pass_through"))
        return {"outputs": [pack_array(o) for o in outputs]}

    def cmd_perf(self, request: dict[str, Any]) -> dict[str, Any]:
        context = self.server.pool.get(self.owner, request.get("context"))
        loops = request.get("loop_cnt", 1)
        if not isinstance(loops, int) or not 1 <= loops <= MAX_LOOP_COUNT:
            raise Refused(f"loop_cnt must be an integer in 1..{MAX_LOOP_COUNT}")
        return context.time_runs(_arrays(request), loops)

    def cmd_memory(self, request: dict[str, Any]) -> dict[str, Any]:
        return self.server.pool.get(self.owner, request.get("context")).memory()

    def cmd_sdk_version(self, request: dict[str, Any]) -> dict[str, Any]:
        return {"text": self.server.pool.get(self.owner, request.get("context")).sdk_version()}

    def cmd_release(self, request: dict[str, Any]) -> dict[str, Any]:
        self.server.pool.release(self.owner, request.get("context"))
        return {}


def _arrays(request: dict[str, Any]) -> list[Any]:
    inputs = request.get("inputs")
    if not isinstance(inputs, list):
        raise Refused("'inputs' must be a list of arrays")
    return [unpack_array(v) for v in inputs]


_COMMANDS: dict[str, Callable[[_Connection, dict[str, Any]], dict[str, Any]]] = {
    "ping": _Connection.cmd_ping, "info": _Connection.cmd_info, "load": _Connection.cmd_load,
    "infer": _Connection.cmd_infer, "perf": _Connection.cmd_perf, "memory": _Connection.cmd_memory,
    "sdk_version": _Connection.cmd_sdk_version, "release": _Connection.cmd_release,
}


class BoardServer(socketserver.ThreadingTCPServer):
    """A thread per connection, at most ``settings.max_clients`` at once (others are told and closed)."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], settings: ServeSettings) -> None:
        self.settings = settings
        self.pool = ContextPool(settings.max_contexts)
        self._slots = threading.BoundedSemaphore(settings.max_clients)
        super().__init__(address, _Connection)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            log.warning(f"serve: refused {client_address[0]}:{client_address[1]}: already "
                        f"{self.settings.max_clients} clients (--max-clients)")
            if self.settings.tls is None:   # a TLS client could not read a plain answer
                try:
                    request.settimeout(1.0)
                    protocol.write_frame(request, {"ok": False, "error": "the server is at its --max-clients limit; "
                                                   "try again later"})
                except OSError:
                    pass
            self.shutdown_request(request)
            return
        super().process_request(request, client_address)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()


def tls_context(cert: str, key: str) -> ssl.SSLContext:
    """A server-side TLS context (TLS 1.2+) from a PEM certificate and key."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(cert, key)
    return context


def serve(host: str, port: int, settings: ServeSettings, ready: Callable[[int], None] | None = None) -> None:
    """Run until interrupted; ``ready(port)`` is called once listening (port 0 picks a free one)."""
    with BoardServer((host, port), settings) as server:
        bound = server.server_address[1]
        scheme = "TLS" if settings.tls else "plain TCP"
        log.info(f"serve: listening on {host}:{bound} ({scheme}), device '{settings.device}', "
                 f"max {settings.max_contexts} model(s), {settings.max_clients} client(s), frames ≤ "
                 f"{settings.max_frame_bytes // (1024 * 1024)} MiB")
        if host not in ("127.0.0.1", "::1", "localhost") and settings.tls is None:
            log.warning("serve: listening beyond this machine without TLS: the token and data travel in clear "
                        "text; use --tls-cert/--tls-key or an ssh/adb tunnel")
        if ready is not None:
            ready(bound)
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            log.info("serve: stopped")
