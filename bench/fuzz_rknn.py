"""Fuzz the .rknn loader and `openrknn info` with Hypothesis: 100 000 hostile files by default.

    python bench/fuzz_rknn.py [--cases 100000] [--max-seconds 2] [--max-mib 256]

Every case must open or fail with openrknn's own error (one line naming the file); the time and the
Python memory peak (tracemalloc: the inflated graph and parsed header are Python objects) of every
case are bounded by asserts. Prints the outcome counts, the most frequent rejection messages, and
the worst time and memory seen.
"""
from __future__ import annotations

import argparse
import collections
import os
import re
import resource
import sys
import time
import tracemalloc
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from hypothesis import HealthCheck, given, settings  # noqa: E402
from tqdm import tqdm  # noqa: E402

from openrknn import log  # noqa: E402
from tests.security.rknn_fuzz_cases import FUZZ_KEY, cases, check_case, seed_files  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=100_000)
    parser.add_argument("--max-seconds", type=float, default=2.0, help="limit per case")
    parser.add_argument("--max-mib", type=float, default=256.0, help="Python memory peak limit per case")
    args = parser.parse_args()
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
