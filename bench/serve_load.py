"""Load test of the board connection (`openrknn serve` on 127.0.0.1, simulator backend).

1. CLIENTS concurrent clients × REQUESTS inferences each through ``RKNN.init_runtime(target, device_id)``;
   every answer is compared bit for bit with the local simulator: prints lost / mismatched and req/s,
   beside the local simulator's own req/s on the same model.
2. CYCLES load/release cycles of the model on one connection: prints the server's RSS at start and end.

3. ``--hostile``: instead, the attacks of docs/security.md against a fresh server: 16 peers trickling
   their hello one byte every 4 s (plain TCP and TLS) while a client with the token tries to connect
   every 5 s (lock-out before -> after), and 4 connections declaring 256 MiB frames and sending one
   byte (server RSS). ``--code`` runs the server from another checkout (e.g. the commit before a fix).

Run by hand:  PYTHONPATH=$PWD python bench/serve_load.py [--clients 8 --requests 1000 --cycles 1000]
              PYTHONPATH=$PWD python bench/serve_load.py --hostile [--slow-seconds 20] [--code DIR]
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rknn.api import RKNN  # noqa: E402

from openrknn.runtime import protocol  # noqa: E402
from openrknn.runtime.remote import BoardClient, Device  # noqa: E402
from tests.helpers import make_conv_model, quantized_build  # noqa: E402
from tests.runtime.server_process import start_server  # noqa: E402

TARGET = "rk3588"


def build(folder: Path) -> tuple[RKNN, Path, list[np.ndarray], list[list[np.ndarray]]]:
    rng = np.random.default_rng(0)
    samples = [rng.uniform(-1, 1, (1, 3, 16, 16)).astype(np.float32) for _ in range(2)]
    rknn = quantized_build(make_conv_model(folder / "m.onnx"), samples)
    rknn.export_rknn(str(folder / "m.rknn"))
    rknn.init_runtime()
    inputs = [rng.uniform(-1, 1, (1, 16, 16, 3)).astype(np.float32) for _ in range(16)]
    return rknn, folder / "m.rknn", inputs, [rknn.inference(inputs=[x]) for x in inputs]


def local_rate(rknn: RKNN, inputs: list[np.ndarray], count: int) -> float:
    start = time.perf_counter()
    for n in range(count):
        rknn.inference(inputs=[inputs[n % len(inputs)]])
    return count / (time.perf_counter() - start)


def concurrent_load(address: str, rknn_file: Path, inputs, expected, clients: int, requests: int) -> None:
    counts = {"ok": 0, "lost": 0, "mismatched": 0}
    lock = threading.Lock()

    def client(index: int) -> None:
        rknn = RKNN()
        rknn.load_rknn(str(rknn_file))
        if rknn.init_runtime(target=TARGET, device_id=address) != 0:
            with lock:
                counts["lost"] += requests
            return
        for n in range(requests):
            k = (index * 7 + n) % len(inputs)
            out = rknn.inference(inputs=[inputs[k]])
            key = "lost" if out is None else "ok" if all(np.array_equal(a, b) for a, b in zip(out, expected[k])) \
                and len(out) == len(expected[k]) else "mismatched"
            with lock:
                counts[key] += 1
        rknn.release()

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - start
    total = clients * requests
    print(f"concurrent: {clients} clients x {requests} requests = {total}: ok {counts['ok']}, "
          f"lost {counts['lost']}, mismatched {counts['mismatched']}; {total / elapsed:.0f} req/s "
          f"({elapsed:.1f} s)")


def load_cycles(device: Device, rknn_file: Path, cycles: int) -> None:
    model = rknn_file.read_bytes()
    client = BoardClient(device)
    rss = [client.request("info")["rss"]]
    start = time.perf_counter()
    for n in range(cycles):
        context = client.request("load", model=model)["context"]
        client.request("release", context=context)
        if n + 1 in (10, cycles // 2):
            rss.append(client.request("info")["rss"])
    rss.append(client.request("info")["rss"])
    client.close()
    mib = [f"{r / 2**20:.1f}" for r in rss]
    print(f"load/release: {cycles} cycles in {time.perf_counter() - start:.1f} s; server RSS MiB at start / after 10 "
          f"/ after {cycles // 2} / end: {' / '.join(mib)}")


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status", encoding="ascii") as handle:
        return next(int(line.split()[1]) for line in handle if line.startswith("VmRSS")) / 1024


def client_hello() -> bytes:
    """The bytes of a real TLS ClientHello (what a slow TLS peer trickles)."""
    import ssl
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = context.wrap_bio(incoming, outgoing)
    try:
        tls.do_handshake()
    except ssl.SSLWantReadError:
        pass
    return outgoing.read()


def slowloris(server, seconds: float, tls_ca: str | None) -> None:
    """16 peers send one byte every 4 s; a client with the token tries every 5 s (bounded by ``seconds``)."""
    import socket
    stop = time.monotonic() + seconds
    cut: list[float] = []

    opening = client_hello() if tls_ca else protocol.HEADER.pack(1000) + bytes(1000)   # valid, sent slowly

    def slow_peer() -> None:
        start = time.monotonic()
        sock = socket.create_connection(("127.0.0.1", server.port), timeout=5)
        try:
            for index, byte in enumerate(opening):
                if time.monotonic() >= stop:
                    break
                sock.sendall(bytes([byte]))
                if index == 0:
                    connected.release()
                sock.settimeout(max(0.01, min(4.0, stop - time.monotonic())))
                try:   # wait for the next byte's turn; an answer or a close ends the trickle
                    if sock.recv(1) == b"":
                        raise OSError("closed")
                except socket.timeout:
                    pass
        except OSError:
            cut.append(time.monotonic() - start)
        finally:
            sock.close()

    connected = threading.Semaphore(0)
    peers = [threading.Thread(target=slow_peer, daemon=True) for _ in range(16)]
    for peer in peers:
        peer.start()
    for _ in peers:   # all 16 are in before the client tries
        connected.acquire(timeout=10)
    time.sleep(0.5)
    tries = []
    while time.monotonic() < stop - 1:
        start = time.perf_counter()
        try:
            client = BoardClient(Device("bench", "127.0.0.1", server.port, server.token, tls_ca), timeout=10)
            client.request("ping")
            client.close()
            tries.append(f"ok {1000 * (time.perf_counter() - start):.0f} ms")
        except Exception as e:  # noqa: BLE001 - the refusal is the figure
            tries.append(f"refused ({str(e)[-40:]})")
        time.sleep(5)
    for peer in peers:
        peer.join(10)
    scheme = "TLS" if tls_ca else "plain"
    print(f"slowloris ({scheme}): 16 peers trickling 1 byte/4 s for {seconds:.0f} s; client with the token: "
          f"{'; '.join(tries)}; slow peers cut by the server: {len(cut)}/16"
          + (f" after {min(cut):.1f}-{max(cut):.1f} s" if cut else ""))


def declared_frames(server) -> None:
    """4 connections declare 256 MiB frames and send 1 byte: the server's RSS."""
    import socket
    before = rss_mib(server.process.pid)
    socks = []
    for _ in range(4):
        sock = socket.create_connection(("127.0.0.1", server.port), timeout=10)
        protocol.write_frame(sock, {"cmd": "hello", "token": server.token, "version": protocol.PROTOCOL_VERSION})
        protocol.read_frame(sock, 1 << 20)
        sock.sendall(protocol.HEADER.pack(256 << 20) + b"\x81")
        socks.append(sock)
    time.sleep(1)
    after = rss_mib(server.process.pid)
    for sock in socks:
        sock.close()
    print(f"declared frames: 4 x 256 MiB declared, 1 byte sent each: server RSS {before:.0f} -> {after:.0f} MiB")


def hostile(seconds: float, code: Path) -> int:
    from tests.runtime import server_process
    server_process.REPO = code
    print(f"server code from {code}")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        server = server_process.start_server(folder / "plain")
        try:
            slowloris(server, seconds, None)
            declared_frames(server)
            print(f"server still up: {server.alive()}")
        finally:
            server.stop()
        from tests.runtime.tls_cert import write_self_signed
        cert, key = write_self_signed(folder)
        server = server_process.start_server(folder / "tls", "--tls-cert", str(cert), "--tls-key", str(key))
        try:
            slowloris(server, seconds, str(cert))
        finally:
            server.stop()
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--cycles", type=int, default=1000)
    parser.add_argument("--hostile", action="store_true", help="run the attacks instead of the load test")
    parser.add_argument("--slow-seconds", type=float, default=20.0, help="how long the slow peers keep going")
    parser.add_argument("--code", type=Path, default=Path(__file__).resolve().parents[1],
                        help="checkout the server runs from (--hostile)")
    args = parser.parse_args()
    if args.hostile:
        return hostile(args.slow_seconds, args.code.resolve())
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        rknn, rknn_file, inputs, expected = build(folder)
        print(f"local simulator, same model, 1 thread: {local_rate(rknn, inputs, 500):.0f} req/s")
        server = start_server(folder / "serve", "--max-contexts", str(args.clients + 1))
        try:
            os.environ["OPENRKNN_TOKEN"] = server.token
            os.environ["OPENRKNN_DEVICES"] = str(folder / "no-devices.yaml")
            concurrent_load(server.address, rknn_file, inputs, expected, args.clients, args.requests)
            load_cycles(Device("bench", "127.0.0.1", server.port, server.token), rknn_file, args.cycles)
            print(f"server still up: {server.alive()}")
        finally:
            server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
