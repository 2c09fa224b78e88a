"""Wire format, token file and device resolution of the board connection (no server needed)."""
from __future__ import annotations

import socket

import numpy as np
import pytest

msgpack = pytest.importorskip("msgpack", reason="the board connection needs msgpack (pip install 'openrknn[serve]')")

from openrknn.runtime import protocol  # noqa: E402
from openrknn.runtime.remote import RemoteError, resolve_device, split_address  # noqa: E402
from openrknn.runtime.server import load_or_create_token  # noqa: E402


@pytest.mark.parametrize("dtype", ["float32", "float16", "int8", "uint8", "int64", "bool"])
def test_array_round_trip(dtype):
    array = (np.arange(24).reshape(2, 3, 4) % 3).astype(dtype)
    back = protocol.unpack_array(protocol.pack_array(array))
    assert back.dtype == array.dtype and np.array_equal(back, array)


def test_object_arrays_never_travel():
    with pytest.raises(protocol.ProtocolError, match="cannot be sent"):
        protocol.pack_array(np.array([object()]))


@pytest.mark.parametrize("value, message", [
    ({"dtype": "object", "shape": [1], "data": b"x"}, "not accepted"),
    ({"dtype": "float32", "shape": [2], "data": b"1234"}, "needs 8 bytes"),
    ({"dtype": "float32", "shape": [-1], "data": b""}, "non-negative"),
    ({"dtype": "float32", "shape": [1], "data": b"1234", "extra": 1}, "exactly"),
])
def test_bad_arrays_refused(value, message):
    with pytest.raises(protocol.ProtocolError, match=message):
        protocol.unpack_array(value)


def test_extension_types_and_non_maps_refused():
    with pytest.raises(protocol.ProtocolError, match="extension type"):
        protocol.decode_body(msgpack.packb({"x": msgpack.ExtType(1, b"payload")}))
    with pytest.raises(protocol.ProtocolError, match="expected a map"):
        protocol.decode_body(msgpack.packb([1, 2]))


def test_frames_are_bounded_both_ways():
    left, right = socket.socketpair()
    with left, right:
        protocol.write_frame(left, {"cmd": "ping", "blob": b"x" * 100})
        assert protocol.read_frame(right, 1000)["blob"] == b"x" * 100
        with pytest.raises(protocol.ProtocolError, match="larger than the limit"):
            protocol.write_frame(left, {"blob": b"x" * 2000}, max_bytes=1000)
        left.sendall(protocol.HEADER.pack(5000))
        with pytest.raises(protocol.ProtocolError, match="larger than the limit"):
            protocol.read_frame(right, 1000)


def test_token_file_created_private_and_reused(tmp_path):
    path = tmp_path / "cfg" / "server_token"
    token, created = load_or_create_token(path)
    assert created and len(token) >= 32 and path.stat().st_mode & 0o777 == 0o600
    assert load_or_create_token(path) == (token, False)
    path.chmod(0o644)
    with pytest.raises(PermissionError, match="chmod 600"):
        load_or_create_token(path)


def test_device_resolution(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENRKNN_DEVICES", str(tmp_path / "devices.yaml"))
    monkeypatch.setenv("OPENRKNN_TOKEN", "env-token")
    assert split_address("[::1]:8788") == ("::1", 8788) and split_address("515e9b401c060c0b") is None
    assert resolve_device(None) is None                      # nothing configured: the simulator, as before
    assert resolve_device("515e9b401c060c0b") is None        # an adb serial is not a network board
    board = resolve_device("10.0.0.5:8788")
    assert (board.host, board.port, board.token) == ("10.0.0.5", 8788, "env-token")
    (tmp_path / "devices.yaml").write_text("devices:\n  - {name: a, address: 'h1:1', token: t1}\n"
                                           "  - {name: b, address: 'h2:2'}\n")
    assert resolve_device("a").token == "t1" and resolve_device("b").token == "env-token"
    with pytest.raises(RemoteError, match="pass device_id"):
        resolve_device(None)
    (tmp_path / "devices.yaml").write_text("devices:\n  - {name: a}\n")
    with pytest.raises(RemoteError, match="needs 'name' and 'address"):
        resolve_device("a")


def test_clients_over_the_limit_are_told_why():
    import threading

    from openrknn.runtime.remote import BoardClient, Device
    from openrknn.runtime.server import BoardServer, ServeSettings
    server = BoardServer(("127.0.0.1", 0), ServeSettings(token="t" * 20, max_clients=1))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        device = Device("one", "127.0.0.1", server.server_address[1], "t" * 20)
        first = BoardClient(device)
        with pytest.raises(RemoteError, match="--max-clients"):
            BoardClient(device)
        assert first.request("ping") == {}
        first.close()
    finally:
        server.shutdown()
        server.server_close()
