"""Fuzz the .rknn loader and `openrknn info` with Hypothesis: 100 000 hostile files by default.

    python bench/fuzz_rknn.py [--cases 100000] [--max-seconds 2] [--max-mib 256]
    python bench/fuzz_rknn.py --bomb [--bomb-gib 2] [--code OTHER_CHECKOUT]

Every case must open or fail with openrknn's own error (one line naming the file); the time and the
Python memory peak (tracemalloc: the inflated graph and parsed header are Python objects) of every
case are bounded by asserts. Prints the outcome counts, the most frequent rejection messages, and
the worst time and memory seen.

``--bomb`` instead measures one zlib bomb: a ~2 MiB ``.rknn`` whose compressed graph inflates to (and
declares) 2 GiB of zeros. It is opened by ``load_model`` in a child process and sent to ``openrknn
serve``; prints the time and the peak memory above the process's baseline for both. ``--code`` runs
both with another checkout's ``openrknn`` (e.g. the commit before a fix) for a side-by-side figure.
"""
from __future__ import annotations

import argparse
import collections
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
import tracemalloc
import zlib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from hypothesis import HealthCheck, given, settings  # noqa: E402
from tqdm import tqdm  # noqa: E402

from openrknn import log  # noqa: E402
from tests.security.rknn_fuzz_cases import FUZZ_KEY, cases, check_case, seed_files  # noqa: E402


BOMB_CHILD = """
import resource, sys, time
from openrknn.errors import RKNNError
from openrknn.model_file import load_model
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
start = time.perf_counter()
try:
    load_model(sys.argv[1])
    outcome = "opened"
except RKNNError as e:
    outcome = str(e)
print(time.perf_counter() - start, (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) / 1024)
print(outcome[:160])
"""


def write_bomb(folder: Path, gib: float) -> Path:
    """A real export whose graph section is replaced by ``gib`` GiB of zeros, compressed, declared honestly."""
    from openrknn.model_file import GRAPH_SECTION
    from openrknn.model_file.container import decode, encode
    seed = decode(seed_files()[0])
    size = int(gib * (1 << 30))
    packer = zlib.compressobj(9)
    zeros = bytes(16 << 20)
    parts = [packer.compress(zeros[:min(len(zeros), size - done)]) for done in range(0, size, len(zeros))]
    seed.sections[GRAPH_SECTION] = b"".join(parts) + packer.flush()
    seed.header.update(graph_compression="zlib", graph_size=size)
    path = folder / "bomb.rknn"
    path.write_bytes(encode(seed))
    return path


def vm_peak_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status", encoding="ascii") as handle:
        return next(int(line.split()[1]) for line in handle if line.startswith("VmHWM")) / 1024


def measure_bomb(gib: float, code: Path) -> int:
    """Time and memory of opening the bomb, directly and through ``openrknn serve``."""
    from openrknn.runtime.remote import BoardClient, Device, RemoteError
    from tests.runtime import server_process
    env = dict(os.environ, PYTHONPATH=str(code))
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        bomb = write_bomb(folder, gib)
        print(f"bomb: {bomb.stat().st_size / 2**20:.2f} MiB file declaring {gib:g} GiB; code from {code}")
        child = subprocess.run([sys.executable, "-c", BOMB_CHILD, str(bomb)], env=env, capture_output=True,
                               text=True, timeout=600, cwd=tmp)
        seconds, mib = (float(v) for v in child.stdout.split("\n")[0].split())
        print(f"load_model: {seconds:.2f} s, peak +{mib:.0f} MiB: {child.stdout.splitlines()[1]}")
        server_process.REPO = code   # the server under test runs that checkout too
        server = server_process.start_server(folder / "serve", "--max-frame-mb", "64")
        try:
            client = BoardClient(Device("bench", "127.0.0.1", server.port, server.token), timeout=600)
            client.sock.settimeout(600)
            before = vm_peak_mib(server.process.pid)
            start = time.perf_counter()
            try:
                client.request("load", model=bomb.read_bytes())
                outcome = "loaded"
            except RemoteError as e:
                outcome = str(e)
            seconds = time.perf_counter() - start
            print(f"serve: answered in {seconds:.2f} s, server peak {before:.0f} -> {vm_peak_mib(server.process.pid):.0f}"
                  f" MiB: {outcome[:160]}")
            client.close()
        finally:
            server.stop()
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=100_000)
    parser.add_argument("--max-seconds", type=float, default=2.0, help="limit per case")
    parser.add_argument("--max-mib", type=float, default=256.0, help="Python memory peak limit per case")
    parser.add_argument("--bomb", action="store_true", help="measure one zlib bomb instead of fuzzing")
    parser.add_argument("--bomb-gib", type=float, default=2.0, help="inflated (and declared) size of the bomb")
    parser.add_argument("--code", type=Path, default=REPO, help="checkout whose openrknn the bomb is opened with")
    args = parser.parse_args()
    if args.bomb:
        log.configure(verbose=False)
        return measure_bomb(args.bomb_gib, args.code.resolve())
    os.environ["OPENRKNN_MODEL_KEY"] = FUZZ_KEY
    log.configure(verbose=False)
    seed_files()
    outcomes: collections.Counter[str] = collections.Counter()
    worst = {"seconds": (0.0, b""), "mib": (0.0, b"")}
    started = time.perf_counter()
    progress = tqdm(total=args.cases, desc="fuzz .rknn", unit="case", mininterval=5)

    @settings(max_examples=args.cases, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(data=cases())
    def run(data: bytes) -> None:
        tracemalloc.start()
        t0 = time.perf_counter()
        result = check_case(data)
        seconds = time.perf_counter() - t0
        mib = tracemalloc.get_traced_memory()[1] / 2**20
        tracemalloc.stop()
        progress.update()
        outcomes[re.sub(r"\d+", "N", result.replace("'fuzz.rknn'", "F"))[:90]] += 1
        if seconds > worst["seconds"][0]:
            worst["seconds"] = (seconds, data[:64])
        if mib > worst["mib"][0]:
            worst["mib"] = (mib, data[:64])
        assert seconds < args.max_seconds, f"case took {seconds:.2f} s: {data[:200]!r}"
        assert mib < args.max_mib, f"case peaked at {mib:.0f} MiB: {data[:200]!r}"

    run()
    progress.close()
    total = time.perf_counter() - started
    count = sum(outcomes.values())
    print(f"{count} cases in {total:.0f} s ({1000 * total / max(count, 1):.1f} ms/case); "
          f"0 uncaught exceptions; {outcomes['ok']} opened, {count - outcomes['ok']} rejected")
    print(f"worst time   {worst['seconds'][0] * 1000:8.1f} ms   (limit {args.max_seconds * 1000:.0f} ms)")
    print(f"worst memory {worst['mib'][0]:8.1f} MiB  (limit {args.max_mib:.0f} MiB, Python heap)")
    print(f"process peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")
    print("most frequent outcomes:")
    for text, count in outcomes.most_common(25):
        print(f"  {count:7d}  {text}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
