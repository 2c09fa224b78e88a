"""The board connection end to end: `openrknn serve` in a subprocess on 127.0.0.1, the RKNN API on this side."""
from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("msgpack", reason="the board connection needs msgpack (pip install 'openrknn[serve]')")

from rknn.api import RKNN  # noqa: E402

from openrknn.runtime import protocol  # noqa: E402
from openrknn.runtime.remote import BoardClient, Device, RemoteError  # noqa: E402
from tests.helpers import make_conv_model, quantized_build  # noqa: E402
from tests.runtime.server_process import start_server  # noqa: E402

TARGET = "rk3588"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = start_server(tmp_path_factory.mktemp("serve"), "--max-frame-mb", "8", "--max-contexts", "6")
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """A quantized conv model, its .rknn file and a few inputs (NHWC, as inference takes them)."""
    folder = tmp_path_factory.mktemp("model")
    rng = np.random.default_rng(0)
    samples = [rng.uniform(-1, 1, (1, 3, 16, 16)).astype(np.float32) for _ in range(2)]
    rknn = quantized_build(make_conv_model(folder / "m.onnx"), samples)
    assert rknn.export_rknn(str(folder / "m.rknn")) == 0
    inputs = [rng.uniform(-1, 1, (1, 16, 16, 3)).astype(np.float32) for _ in range(6)]
    assert rknn.init_runtime() == 0
    expected = [rknn.inference(inputs=[x]) for x in inputs]
    return rknn, folder / "m.rknn", inputs, expected


@pytest.fixture
def token_env(server, monkeypatch, tmp_path):
    monkeypatch.setenv("OPENRKNN_TOKEN", server.token)
    monkeypatch.setenv("OPENRKNN_DEVICES", str(tmp_path / "no-devices.yaml"))


def _remote(rknn_file: Path, address: str, **options) -> RKNN:
    rknn = RKNN()
    assert rknn.load_rknn(str(rknn_file)) == 0
    assert rknn.init_runtime(target=TARGET, device_id=address, **options) == 0
    return rknn


def _same(a: list[np.ndarray], b: list[np.ndarray]) -> bool:
    return len(a) == len(b) and all(np.array_equal(x, y) for x, y in zip(a, b))


def test_token_printed_once_and_stored_private(server):
    token_file = server.log_path.parent / "token"
    assert token_file.stat().st_mode & 0o777 == 0o600
    assert server.log().count("token: ") == 1 and token_file.read_text().strip() == server.token


def test_round_trip_every_call(server, built, token_env, capsys, tmp_path):
    _, rknn_file, inputs, expected = built
    rknn = _remote(rknn_file, server.address, perf_debug=True, eval_mem=True, async_mode=True,
                   core_mask=RKNN.NPU_CORE_0)
    assert rknn._runtime.options["async_mode"] is True and rknn._runtime.options["core_mask"] == RKNN.NPU_CORE_0
    assert _same(rknn.inference(inputs=[inputs[0]]), expected[0])
    perf = rknn.eval_perf(is_print=True, loop_cnt=3)
    memory = rknn.eval_memory(is_print=True)
    version = rknn.get_sdk_version()
    out = capsys.readouterr().out
    assert perf["total_time"] > 0 and "testboard" in perf["measured_on"]
    assert "Measured on testboard" in out and "Total Operator Elapsed Per Frame Time(us):" in out
    assert "Memory Profile Info Dump" in out and abs(memory["model_size"] - rknn_file.stat().st_size) < 512
    assert "RKNN VERSION" in version
    rknn.release()


def test_device_name_from_devices_file_and_list_devices(server, built, monkeypatch, tmp_path, capsys):
    _, rknn_file, inputs, expected = built
    devices = tmp_path / "devices.yaml"
    devices.write_text(f"devices:\n  - name: bench-board\n    address: {server.address}\n    token: {server.token}\n"
                       "  - name: gone\n    address: 127.0.0.1:1\n    token: x\n")
    monkeypatch.setenv("OPENRKNN_DEVICES", str(devices))
    monkeypatch.delenv("OPENRKNN_TOKEN", raising=False)
    rknn = _remote(rknn_file, "bench-board")
    assert _same(rknn.inference(inputs=[inputs[1]]), expected[1])
    rknn.release()
    capsys.readouterr()
    rknn.list_devices()
    out = capsys.readouterr().out
    assert f"bench-board  {server.address}  (testboard" in out and "gone" not in out


def test_accuracy_analysis_on_board(server, built, token_env, tmp_path, capsys):
    rknn, _, inputs, _ = built
    sample = inputs[0].transpose(0, 3, 1, 2).copy()
    assert rknn.accuracy_analysis(inputs=[sample], output_dir=str(tmp_path / "snap"), target=TARGET,
                                  device_id=server.address) == 0
    text = (tmp_path / "snap" / "error_analysis.txt").read_text()
    assert "runtime_error" in text and f"measured on testboard at {server.address}" in text
    row = [line for line in text.split("runtime_error", 1)[1].splitlines() if line.startswith("[Output] prob")]
    fields = row[0].split()
    assert fields[5] == "1.00000" and fields[7] == "0"   # single_sim: the board (simulator backend) equals the simulator
    assert (tmp_path / "snap" / "runtime" / "output_0.npy").exists()


def test_without_device_keeps_the_simulator(built, monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("OPENRKNN_DEVICES", str(tmp_path / "none.yaml"))
    rknn, _, inputs, expected = built
    assert rknn.init_runtime(target=TARGET) == 0
    assert "using the rk3588 simulator instead" in capsys.readouterr().out
    assert not getattr(rknn._runtime, "is_remote", False)


def test_concurrent_clients_get_their_own_answers(server, built, token_env):
    _, rknn_file, inputs, expected = built
    errors: list[str] = []

    def client(index: int) -> None:
        rknn = _remote(rknn_file, server.address)
        for n in range(50):
            k = (index + n) % len(inputs)
            if not _same(rknn.inference(inputs=[inputs[k]]) or [], expected[k]):
                errors.append(f"client {index} request {n} mismatched")
        rknn.release()

    threads = [threading.Thread(target=client, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert errors == [] and not any(t.is_alive() for t in threads)


def _raw_hello(server, token) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=30)
    protocol.write_frame(sock, {"cmd": "hello", "token": token, "version": protocol.PROTOCOL_VERSION})
    return sock


def _answer(sock: socket.socket) -> dict:
    return protocol.read_frame(sock, 1 << 20)


def _still_serving(server) -> None:
    client = BoardClient(Device("t", "127.0.0.1", server.port, server.token))
    assert client.request("ping") == {}
    client.close()
    assert server.alive()


@pytest.mark.parametrize("token, reason", [("wrong-token-value-xx", "wrong token"), (None, "no token given")])
def test_bad_token_refused(server, token, reason):
    sock = _raw_hello(server, token)
    answer = _answer(sock)
    assert answer["ok"] is False and reason in answer["error"]
    with pytest.raises(protocol.PeerClosed):
        _answer(sock)   # and the connection is closed
    assert reason in server.log()
    _still_serving(server)


def test_client_side_without_token_is_told_where_to_put_it(server):
    with pytest.raises(RemoteError, match="OPENRKNN_TOKEN"):
        BoardClient(Device("t", "127.0.0.1", server.port, None))


def _refused_after_hello(server, payload: bytes) -> str:
    sock = _raw_hello(server, server.token)
    assert _answer(sock)["ok"]
    sock.sendall(payload)
    answer = _answer(sock)
    sock.close()
    assert answer["ok"] is False
    return answer["error"]


def test_oversized_frame_refused(server):
    error = _refused_after_hello(server, protocol.HEADER.pack(9 * 1024 * 1024))
    assert "larger than the limit" in error and "larger than the limit" in server.log()
    _still_serving(server)


def test_malformed_frame_refused(server):
    error = _refused_after_hello(server, protocol.HEADER.pack(3) + b"\xc1\xc1\xc1")
    assert "not valid msgpack" in error and "not valid msgpack" in server.log()
    _still_serving(server)


def test_unknown_command_refused_connection_stays(server):
    client = BoardClient(Device("t", "127.0.0.1", server.port, server.token))
    with pytest.raises(RemoteError, match="unknown command 'exec'"):
        client.request("exec", code="print(1)")
    assert client.request("ping") == {}   # an unknown command does not end the connection
    client.close()
    assert "unknown command 'exec'" in server.log()


def test_model_that_fails_to_load_refused(server, built, token_env, capsys):
    client = BoardClient(Device("t", "127.0.0.1", server.port, server.token))
    with pytest.raises(RemoteError, match="load_rknn failed"):
        client.request("load", model=b"not an rknn file")
    client.close()
    assert "load: load_rknn failed" in server.log()
    _still_serving(server)


def test_context_limit_refused_clearly(server, built):
    _, rknn_file, _, _ = built
    model = rknn_file.read_bytes()
    client = BoardClient(Device("t", "127.0.0.1", server.port, server.token))
    for _ in range(6):
        client.request("load", model=model)
    with pytest.raises(RemoteError, match="--max-contexts"):
        client.request("load", model=model)
    client.close()
    _wait_for_contexts(server, 0)


def _wait_for_contexts(server, count: int) -> None:
    client = BoardClient(Device("t", "127.0.0.1", server.port, server.token))
    deadline = time.monotonic() + 20
    while client.request("info")["contexts"] != count and time.monotonic() < deadline:
        time.sleep(0.05)
    assert client.request("info")["contexts"] == count
    client.close()


KILLED_CLIENT = """
import socket, sys, time
from openrknn.runtime import protocol
sock = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
protocol.write_frame(sock, {"cmd": "hello", "token": sys.argv[2], "version": protocol.PROTOCOL_VERSION})
protocol.read_frame(sock, 1 << 20)
protocol.write_frame(sock, {"cmd": "load", "model": open(sys.argv[3], "rb").read()})
protocol.read_frame(sock, 1 << 20)
sock.sendall(protocol.HEADER.pack(1000) + b"\\x82")   # half a request
print("sent", flush=True)
time.sleep(60)
"""


def test_client_killed_mid_request_leaves_server_serving(server, built):
    _, rknn_file, _, _ = built
    child = subprocess.Popen([sys.executable, "-c", KILLED_CLIENT, str(server.port), server.token, str(rknn_file)],
                             stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline().strip() == "sent"
    child.kill()
    child.wait(timeout=10)
    _wait_for_contexts(server, 0)   # its model was released with its connection
    _still_serving(server)


def test_tls_round_trip(built, tmp_path, monkeypatch):
    pytest.importorskip("cryptography")
    from tests.runtime.tls_cert import write_self_signed
    cert, key = write_self_signed(tmp_path)
    srv = start_server(tmp_path / "tls", "--tls-cert", str(cert), "--tls-key", str(key))
    try:
        _, rknn_file, inputs, expected = built
        monkeypatch.setenv("OPENRKNN_DEVICES", str(tmp_path / "devices.yaml"))
        (tmp_path / "devices.yaml").write_text(f"devices:\n  - name: tlsboard\n    address: {srv.address}\n"
                                               f"    token: {srv.token}\n    ca: {cert}\n")
        rknn = _remote(rknn_file, "tlsboard")
        assert _same(rknn.inference(inputs=[inputs[2]]), expected[2])
        rknn.release()
        with pytest.raises(RemoteError):   # a plain-TCP client does not get through
            BoardClient(Device("plain", "127.0.0.1", srv.port, srv.token), timeout=5)
        assert "TLS" in srv.log()
    finally:
        srv.stop()


def _fake_perf(self, is_print=True):
    rows = {0: {"name": "conv", "operation": "Conv", "target": "NPU", "time": 40, "data_type": "INT8",
                "input_shape": [[1, 3, 16, 16]], "output_shape": [[1, 8, 16, 16]], "full_name": "Conv:conv"},
            1: {"name": "fc", "operation": "Gemm", "target": "CPU", "time": 60, "full_name": "Gemm:fc"}}
    return {"total_time": 100, "layers": rows}


def _fake_memory(self, is_print=True):
    return {"weight_memory": 1000, "internal_memory": 2048, "other_memory": 300, "total_memory": 3348}


def test_backend_per_layer_timings_and_memory_counters(built, monkeypatch, capsys):
    """A board backend that measures (RKNNLite.eval_perf / eval_memory) is printed in the simulator's tables."""
    from openrknn.runtime.lite import RKNNLite
    from openrknn.runtime.server import BoardServer, ServeSettings
    monkeypatch.setattr(RKNNLite, "eval_perf", _fake_perf, raising=False)
    monkeypatch.setattr(RKNNLite, "eval_memory", _fake_memory, raising=False)
    monkeypatch.setattr(RKNNLite, "has_board_figures", True, raising=False)
    board = BoardServer(("127.0.0.1", 0), ServeSettings(token="k" * 20, device="measuring-board"))
    threading.Thread(target=board.serve_forever, daemon=True).start()
    try:
        monkeypatch.setenv("OPENRKNN_TOKEN", "k" * 20)
        rknn = _remote(built[1], f"127.0.0.1:{board.server_address[1]}", perf_debug=True, eval_mem=True)
        perf = rknn.eval_perf(loop_cnt=1)
        memory = rknn.eval_memory()
        out = capsys.readouterr().out
        rknn.release()
    finally:
        board.shutdown()
        board.server_close()
    assert perf["total_time"] == 100 and perf["layers"][1]["operation"] == "Gemm"
    assert "Measured on measuring-board" in out and "Network Layer Information Table" in out
    assert "Operator Time Consuming Ranking Table" in out and "Conv:conv" in out
    assert memory["total_memory"] == 3348 and "Internal Tensor Memory: 2.00 KiB" in out


def test_unreachable_board_is_a_clear_init_runtime_error(built, token_env, capsys):
    rknn = RKNN()
    assert rknn.load_rknn(str(built[1])) == 0
    assert rknn.init_runtime(target=TARGET, device_id="127.0.0.1:1") == -1
    assert "E init_runtime: cannot reach 127.0.0.1:1" in capsys.readouterr().out
