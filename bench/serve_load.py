"""Load test of the board connection (`openrknn serve` on 127.0.0.1, simulator backend).

1. CLIENTS concurrent clients × REQUESTS inferences each through ``RKNN.init_runtime(target, device_id)``;
   every answer is compared bit for bit with the local simulator: prints lost / mismatched and req/s,
   beside the local simulator's own req/s on the same model.
2. CYCLES load/release cycles of the model on one connection: prints the server's RSS at start and end.

Run by hand:  PYTHONPATH=$PWD python bench/serve_load.py [--clients 8 --requests 1000 --cycles 1000]
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

from openrknn.runtime.remote import BoardClient, Device  # noqa: E402
from tests.conftest import make_conv_model, quantized_build  # noqa: E402
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--cycles", type=int, default=1000)
    args = parser.parse_args()
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
