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

import collections
import hmac
import logging
import os
import secrets
import socket
import socketserver
import ssl
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from openrknn import __version__, log
from openrknn.runtime import protocol
from openrknn.runtime.contexts import ContextPool, Refused, process_rss
from openrknn.runtime.protocol import PeerClosed, ProtocolError, pack_array, unpack_array

MAX_LOOP_COUNT = 1000
AUTH_TIMEOUT_S = 5.0      # the TLS handshake and the whole hello frame must arrive within this
MAX_PENDING = 64          # connections still authenticating, kept apart from the --max-clients work slots
FRAME_BASE_S = 30.0       # after the hello, a frame's body must arrive within this ...
FRAME_MIN_RATE = 64 * 1024   # ... plus one second per 64 KiB it declares
MAX_LOGGED = 300          # characters of a refusal reason written to the log
MAX_ERROR = 2000          # characters of an error sent back
CORE_MASKS = range(0, 0x10000)   # RKNNLite.NPU_CORE_* are bit masks; NPU_CORE_ALL is 0xffff


def loggable(text: str, limit: int = MAX_LOGGED) -> str:
    """One log line: control characters escaped (a peer cannot forge lines), cut to ``limit``."""
    text = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text)} characters)"


def frame_seconds(size: int) -> float:
    """How long the body of a ``size``-byte frame may take to arrive."""
    return FRAME_BASE_S + size / FRAME_MIN_RATE


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
    auth_timeout_s: float = AUTH_TIMEOUT_S
    max_pending: int = MAX_PENDING


class _Connection(socketserver.BaseRequestHandler):
    server: "BoardServer"

    def setup(self) -> None:
        self.peer = "%s:%s" % self.client_address[:2]
        self.owner = id(self)

    def refuse(self, reason: str) -> None:
        log.warning(f"serve: refused {self.peer}: {loggable(reason)}")

    def handle(self) -> None:
        settings = self.server.settings
        raw: socket.socket = self.request
        raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)   # small request/answer pairs: no Nagle delay
        # the whole authentication has one deadline: a watchdog cuts a peer that trickles bytes
        deadline = time.monotonic() + settings.auth_timeout_s
        watchdog = threading.Timer(settings.auth_timeout_s, _cut, (raw,))
        watchdog.daemon = True
        watchdog.start()
        self.sock = raw
        try:
            if settings.tls is not None:
                raw.settimeout(settings.auth_timeout_s)
                self.sock = settings.tls.wrap_socket(raw, server_side=True)
            authenticated = self._hello(deadline)
            watchdog.cancel()
            if authenticated:
                self._serve_requests()
        except PeerClosed:
            pass
        except (ssl.SSLError, OSError) as e:
            if time.monotonic() >= deadline and not self.server.is_admitted(self):
                self.refuse(f"no complete hello within {settings.auth_timeout_s:g} s")
            else:
                self.refuse(f"connection error: {e}")
        finally:
            watchdog.cancel()
            released = self.server.pool.release_owner(self.owner)
            if released:
                log.info(f"serve: {self.peer} disconnected; released {released} model(s)")

    def _answer(self, message: dict[str, Any]) -> None:
        protocol.write_frame(self.sock, message)

    def _hello(self, deadline: float) -> bool:
        try:
            request = protocol.read_frame(self.sock, protocol.HELLO_MAX_BYTES, deadline)
        except PeerClosed:
            if time.monotonic() >= deadline:
                self.refuse(f"no complete hello within {self.server.settings.auth_timeout_s:g} s")
            return False
        except protocol.ReadDeadline:
            self.refuse(f"no complete hello within {self.server.settings.auth_timeout_s:g} s")
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
            reason = (f"protocol version {protocol.shown(request.get('version'))} is not supported (server speaks "
                      f"{protocol.PROTOCOL_VERSION}); install the same openrknn version on PC and board")
        elif not self.server.admit(self):
            reason = f"already {self.server.settings.max_clients} clients (--max-clients)"
            self.refuse(reason)
            self._answer({"ok": False, "error": "the server is at its --max-clients limit; try again later"})
            return False
        else:
            self._answer({"ok": True, **self._info()})
            log.info(f"serve: {self.peer} connected")
            return True
        self.refuse(reason)
        self._answer({"ok": False, "error": reason})
        return False

    def _serve_requests(self) -> None:
        settings = self.server.settings
        self.sock.settimeout(settings.idle_timeout_s)
        while True:
            try:
                request = protocol.read_frame(self.sock, settings.max_frame_bytes, body_seconds=frame_seconds)
            except PeerClosed:
                return
            except (socket.timeout, protocol.ReadDeadline):
                self.refuse(f"silent for {settings.idle_timeout_s:g} s or too slow sending a frame; closed")
                return
            except ProtocolError as e:   # the stream cannot be trusted after this: answer and hang up
                self.refuse(str(e))
                self._answer({"ok": False, "error": str(e)[:MAX_ERROR]})
                return
            finally:
                self.sock.settimeout(settings.idle_timeout_s)
            self._answer(self._dispatch(request))

    def _dispatch(self, request: dict[str, Any]) -> dict[str, Any]:
        name = request.get("cmd")
        command = _COMMANDS.get(name) if isinstance(name, str) else None
        if command is None:
            reason = f"unknown command {protocol.shown(name)} (known: {sorted(_COMMANDS)})"
            self.refuse(reason)
            return {"ok": False, "error": reason}
        try:
            return {"ok": True, **command(self, request)}
        except (Refused, ProtocolError) as e:
            self.refuse(f"{name}: {e}")
            return {"ok": False, "error": f"{name}: {e}"[:MAX_ERROR]}
        except Exception as e:  # noqa: BLE001 - one bad request must not take the server down
            self.refuse(f"{name}: internal error: {type(e).__name__}: {e}")
            return {"ok": False, "error": f"{name}: internal error: {type(e).__name__}: {e}"[:MAX_ERROR]}

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
        _check_options(options)
        context = self.server.pool.load(self.owner, model, options)
        log.info(f"serve: {self.peer} loaded a {len(model)}-byte model as context {context.id}")
        return {"context": context.id, "options": options}

    def cmd_infer(self, request: dict[str, Any]) -> dict[str, Any]:
        data_format, pass_through = request.get("data_format"), request.get("inputs_pass_through")
        _check(_layout_ok(data_format) or (isinstance(data_format, list) and len(data_format) <= MAX_INPUTS
                                           and all(_layout_ok(f) for f in data_format)),
               "data_format", "'nhwc', 'nchw' or a list of them (one per input)", data_format)
        _check(pass_through is None or (isinstance(pass_through, list) and len(pass_through) <= MAX_INPUTS
                                        and all(type(v) in (int, bool) and v in (0, 1) for v in pass_through)),
               "inputs_pass_through", "a list of 0/1 flags (one per input)", pass_through)
        context = self.server.pool.get(self.owner, request.get("context"))
        outputs = context.infer(_arrays(request), data_format, pass_through)
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


DATA_FORMATS = ("nchw", "nhwc")
MAX_INPUTS = 1024


def _layout_ok(value: Any) -> bool:
    return value is None or (isinstance(value, str) and value.lower() in DATA_FORMATS)


def _check(ok: bool, field: str, expected: str, value: Any) -> None:
    if not ok:
        raise Refused(f"'{field}' must be {expected}, got {protocol.shown(value)}")


def _check_options(options: dict[str, Any]) -> None:
    """The load options: every field's type and range, before RKNNLite sees them."""
    _check(options["target"] is None or (isinstance(options["target"], str) and len(options["target"]) <= 64),
           "target", "a chip name", options["target"])
    mask = options["core_mask"]
    _check(mask is None or (type(mask) is int and mask in CORE_MASKS), "core_mask",
           "an integer RKNNLite.NPU_CORE_* mask in 0..0xffff", mask)
    for flag in ("async_mode", "perf_debug", "eval_mem"):
        _check(options[flag] is None or isinstance(options[flag], bool), flag, "true or false", options[flag])


def _arrays(request: dict[str, Any]) -> list[Any]:
    inputs = request.get("inputs")
    if not isinstance(inputs, list) or len(inputs) > MAX_INPUTS:
        raise Refused(f"'inputs' must be a list of arrays, got {protocol.shown(inputs)}")
    return [unpack_array(v) for v in inputs]


_COMMANDS: dict[str, Callable[[_Connection, dict[str, Any]], dict[str, Any]]] = {
    "ping": _Connection.cmd_ping, "info": _Connection.cmd_info, "load": _Connection.cmd_load,
    "infer": _Connection.cmd_infer, "perf": _Connection.cmd_perf, "memory": _Connection.cmd_memory,
    "sdk_version": _Connection.cmd_sdk_version, "release": _Connection.cmd_release,
}


class _OneLine(logging.Filter):
    """While serving, every log record stays one line: text from a peer that reaches any message (a
    backend's error quoting a value, say) cannot forge a line of its own."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if not message.isprintable():
            record.msg, record.args = loggable(message, MAX_ERROR), None
        return True


def _cut(sock: socket.socket) -> None:
    """End a connection from another thread: its blocked ``recv`` returns at once."""
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


class BoardServer(socketserver.ThreadingTCPServer):
    """A thread per connection: up to ``max_pending`` authenticating (the oldest is cut when a new one
    needs the room) and, apart from those, at most ``max_clients`` authenticated (others are told and closed)."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], settings: ServeSettings) -> None:
        self.settings = settings
        self.pool = ContextPool(settings.max_contexts)
        self._slots = threading.BoundedSemaphore(settings.max_clients)
        self._lock = threading.Lock()
        self._pending: collections.OrderedDict[int, tuple[socket.socket, str]] = collections.OrderedDict()
        self._admitted: set[int] = set()
        super().__init__(address, _Connection)

    def serve_forever(self, poll_interval: float = 0.5) -> None:
        one_line = _OneLine()
        log.logger.addFilter(one_line)
        try:
            super().serve_forever(poll_interval)
        finally:
            log.logger.removeFilter(one_line)

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._lock:
            if len(self._pending) >= self.settings.max_pending:   # a flood of strangers: the oldest goes
                _, (oldest, peer) = self._pending.popitem(last=False)
                log.warning(f"serve: refused {peer}: still not authenticated while {self.settings.max_pending} "
                            "connections wait to; closed to make room")
                _cut(oldest)
            self._pending[id(request)] = (request, "%s:%s" % tuple(client_address[:2]))
        super().process_request(request, client_address)

    def admit(self, connection: _Connection) -> bool:
        """Move an authenticated connection into a work slot; False when all are taken."""
        with self._lock:
            self._pending.pop(id(connection.request), None)
        if not self._slots.acquire(blocking=False):
            return False
        with self._lock:
            self._admitted.add(id(connection.request))
        return True

    def is_admitted(self, connection: _Connection) -> bool:
        with self._lock:
            return id(connection.request) in self._admitted

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            with self._lock:
                self._pending.pop(id(request), None)
                admitted = id(request) in self._admitted
                self._admitted.discard(id(request))
            if admitted:
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
