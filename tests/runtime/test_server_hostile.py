"""`openrknn serve` under attack (loopback only, bounded loops): slow peers, huge declared frames,
forged log lines, echoed values, odd request values and start-up errors — each refused clearly."""
from __future__ import annotations

import logging
import socket
import ssl
import threading
import time
import tracemalloc
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pytest

pytest.importorskip("msgpack", reason="the board connection needs msgpack (pip install 'openrknn[serve]')")

from openrknn import log  # noqa: E402
from openrknn.runtime import protocol  # noqa: E402
from openrknn.runtime.remote import BoardClient, Device  # noqa: E402
from openrknn.runtime.server import BoardServer, ServeSettings  # noqa: E402
from tests.helpers import exported_conv_model, rewrite_rknn# noqa: E402

TOKEN = "t" * 24


@contextmanager
def board(**settings) -> Iterator[BoardServer]:
    server = BoardServer(("127.0.0.1", 0), ServeSettings(token=TOKEN, **settings))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


@contextmanager
def server_log() -> Iterator[list[str]]:
    """The ``openrknn`` log lines (as the handler formats them) written inside the block."""
    lines: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(record.getMessage())
    handler = Keep(logging.DEBUG)
    log.logger.addHandler(handler)
    try:
        yield lines
    finally:
        log.logger.removeHandler(handler)


def port_of(server: BoardServer) -> int:
    return server.server_address[1]


def slow_peers(port: int, count: int, tls: ssl.SSLContext | None = None) -> list[socket.socket]:
    """``count`` connections that each sent one byte of a hello (or of a TLS ClientHello) and stopped."""
    peers = []
    for _ in range(count):
        sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        sock.sendall(b"\x16" if tls else b"\x00")
        peers.append(sock)
    return peers


def closed_within(sock: socket.socket, seconds: float, trickle_s: float = 0.25) -> float | None:
    """Declare a 1000-byte hello, then send one byte of it every ``trickle_s``; the time when the server
    closed the connection, None if it did not."""
    started = time.monotonic()
    sock.sendall(protocol.HEADER.pack(1000))
    sock.settimeout(trickle_s)
    while time.monotonic() - started < seconds:
        try:
            sock.sendall(b"\x00")
            if sock.recv(1) == b"":
                return time.monotonic() - started
        except socket.timeout:
            continue
        except OSError:
            return time.monotonic() - started
    return None


def test_slow_peers_do_not_lock_out_a_client_with_the_token():
    """16 peers trickling their hello hold no work slot: a client with the token still gets in at once."""
    with board(max_clients=16) as server:
        peers = slow_peers(port_of(server), 16)
        try:
            # the client's own timeout (5 s) bounds the wait: it gets in while the 16 peers still hang on
            client = BoardClient(Device("t", "127.0.0.1", port_of(server), TOKEN), timeout=5)
            assert client.request("ping") == {}
            client.close()
        finally:
            for peer in peers:
                peer.close()


def test_the_whole_hello_has_one_deadline():
    with board(auth_timeout_s=1.0) as server, server_log() as lines:
        sock = socket.create_connection(("127.0.0.1", port_of(server)), timeout=5)
        closed = closed_within(sock, 4.0)
        sock.close()
        assert closed is not None and closed < 2.5, closed
        time.sleep(0.2)
        assert any("no complete hello within 1 s" in line for line in lines), lines


def test_over_tls_slow_handshakes_neither_lock_out_nor_linger(tmp_path):
    pytest.importorskip("cryptography")
    from tests.runtime.tls_cert import write_self_signed
    from openrknn.runtime.server import tls_context
    cert, key = write_self_signed(tmp_path)
    with board(max_clients=16, auth_timeout_s=1.0, tls=tls_context(str(cert), str(key))) as server:
        peers = slow_peers(port_of(server), 16, tls=True)
        try:
            client = BoardClient(Device("t", "127.0.0.1", port_of(server), TOKEN, str(cert)), timeout=5)
            assert client.request("ping") == {}
            client.close()
            closed = closed_within(peers[0], 4.0)
            assert closed is not None and closed < 2.5, closed
        finally:
            for peer in peers:
                peer.close()


def authenticated(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    protocol.write_frame(sock, {"cmd": "hello", "token": TOKEN, "version": protocol.PROTOCOL_VERSION})
    assert protocol.read_frame(sock, 1 << 20)["ok"]
    return sock


def test_a_declared_frame_is_not_allocated_before_its_bytes_arrive():
    with board(max_frame_bytes=256 << 20) as server:
        socks = [authenticated(port_of(server)) for _ in range(4)]
        tracemalloc.start()
        try:
            for sock in socks:
                sock.sendall(protocol.HEADER.pack(200 << 20) + b"\x81")   # 200 MiB declared, 1 byte sent
            time.sleep(0.5)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
            for sock in socks:
                sock.close()
        assert peak < 32 << 20, f"{peak / 2**20:.0f} MiB for 4 frames of 1 byte"


@pytest.fixture(scope="module")
def model_bytes(tmp_path_factory) -> bytes:
    return exported_conv_model(tmp_path_factory.mktemp("m"), "rk3588").read_bytes()


def request(sock: socket.socket, **message) -> dict:
    protocol.write_frame(sock, message)
    return protocol.read_frame(sock, 1 << 20)


def test_a_newline_in_a_value_cannot_forge_a_log_line(model_bytes):
    forged = "nchw\nW serve: refused 6.6.6.6: forged"
    with board() as server, server_log() as lines:
        sock = authenticated(port_of(server))
        context = request(sock, cmd="load", model=model_bytes)["context"]
        answer = request(sock, cmd="infer", context=context, data_format=forged, inputs=[])
        sock.close()
    assert answer["ok"] is False and "data_format" in answer["error"]
    assert not [line for line in lines if "\n" in line], [line for line in lines if "\n" in line]


def test_any_log_record_stays_one_line_while_serving():
    """A backend error that quotes a peer's value verbatim cannot forge a line either."""
    with board(), server_log() as lines:
        log.error("inference: data_format 'x\nW serve: refused 6.6.6.6: forged' is not valid")
    assert lines == ["inference: data_format 'x\\nW serve: refused 6.6.6.6: forged' is not valid"], lines


def test_a_huge_value_is_not_echoed_back_whole():
    with board() as server, server_log() as lines:
        sock = authenticated(port_of(server))
        answer = request(sock, cmd="memory", context=list(range(50_000)))
        sock.close()
    assert answer["ok"] is False and "context id" in answer["error"]
    assert len(answer["error"]) < 1000 and max(len(line) for line in lines) < 1000


def array(shape) -> dict:
    return {"dtype": "float32", "shape": shape, "data": b""}


@pytest.mark.parametrize("message, field", [
    ({"cmd": "infer", "context": 1, "inputs": [array([True, 3])]}, "shape"),
    ({"cmd": "infer", "context": 1, "inputs": [array([2**32, 2**32])]}, "shape"),
    ({"cmd": "infer", "context": 1, "inputs": [array([1] * 1000)]}, "shape"),
    ({"cmd": "infer", "context": 1, "inputs": [array([-1])]}, "shape"),
    ({"cmd": "infer", "context": 1, "inputs": [], "inputs_pass_through": ["x"]}, "inputs_pass_through"),
    ({"cmd": "load", "core_mask": "abc"}, "core_mask"),
    ({"cmd": "load", "core_mask": 2**40}, "core_mask"),
    ({"cmd": "load", "async_mode": "yes"}, "async_mode"),
    ({"cmd": "load", "target": ["rk3588"]}, "target"),
])
def test_odd_request_values_are_named(model_bytes, message, field):
    with board() as server:
        sock = authenticated(port_of(server))
        if message["cmd"] == "load":
            message = {**message, "model": model_bytes}
        else:
            assert request(sock, cmd="load", model=model_bytes)["ok"]
        answer = request(sock, **message)
        sock.close()
    assert answer["ok"] is False and "internal error" not in answer["error"], answer
    assert field in answer["error"], answer


# ---------------------------------------------------------------- start-up errors
def serve_cli(capsys, *args: str) -> str:
    from openrknn.cli.main import main
    capsys.readouterr()
    assert main(["serve", "--host", "127.0.0.1", *args]) == 1
    out = capsys.readouterr()
    errors = [line for line in (out.out + out.err).splitlines() if line.startswith("E")]
    assert len(errors) == 1, out
    assert "[Errno" not in errors[0] and "codec" not in errors[0], errors[0]
    return errors[0]


def test_missing_tls_certificate_is_named(tmp_path, capsys):
    (tmp_path / "token").write_text(TOKEN)
    (tmp_path / "token").chmod(0o600)
    line = serve_cli(capsys, "--token-file", str(tmp_path / "token"), "--tls-cert", str(tmp_path / "no.crt"),
                     "--tls-key", str(tmp_path / "no.key"))
    assert "no.crt" in line and "does not exist" in line


def test_busy_port_is_named(tmp_path, capsys):
    (tmp_path / "token").write_text(TOKEN)
    (tmp_path / "token").chmod(0o600)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        line = serve_cli(capsys, "--token-file", str(tmp_path / "token"), "--port", str(port))
    assert f"127.0.0.1:{port}" in line and "--port" in line


def test_binary_token_file_is_named(tmp_path, capsys):
    path = tmp_path / "token"
    path.write_bytes(b"\xff\xfe\x00binary" * 4)
    path.chmod(0o600)
    line = serve_cli(capsys, "--token-file", str(path))
    assert str(path) in line and "not text" in line


def test_a_zlib_bomb_through_serve_is_refused_at_once(tmp_path):
    import zlib

    exported = exported_conv_model(tmp_path, "rk3588")
    bomb = rewrite_rknn(rewrite_rknn(exported, raw_section=zlib.compress(b"\0" * (64 << 20), 9)),
                   header=lambda h: h.update(graph_compression="zlib", graph_size=64 << 20))
    with board() as server:
        sock = authenticated(port_of(server))
        answer = request(sock, cmd="load", model=bomb.read_bytes())
        sock.close()
    # refused by its declared ratio before inflating (how fast: bench/loader_limits.py)
    assert answer["ok"] is False and "OPENRKNN_MAX_GRAPH_RATIO" in answer["error"], answer
