"""How fast hostile ``.rknn`` files are refused, as a ratio to loading the same valid model.

The security tests check *that* a decompression bomb and a forged scrypt cost are refused without
inflating or deriving (memory, and a KDF that must not run); this bench measures *how fast*, against
``load_rknn`` of the valid small model in the same run, so the figure does not depend on the machine.
Target: each refusal costs no more than a few valid loads (nothing is inflated or derived).

Usage: ``python bench/loader_limits.py [--repeat 5]``
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
import zlib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from openrknn import log  # noqa: E402
from openrknn.model_file.container import decode, encode  # noqa: E402
from rknn.api import RKNN  # noqa: E402
from tests.helpers import exported_conv_model  # noqa: E402


def _forge(valid: Path, name: str, change) -> Path:
    container = decode(valid.read_bytes())
    change(container)
    out = valid.with_name(name)
    out.write_bytes(encode(container))
    return out


def _best_load_seconds(path: Path, repeat: int) -> tuple[float, int]:
    best, code = float("inf"), 0
    for _ in range(repeat):
        rknn = RKNN()
        started = time.perf_counter()
        code = rknn.load_rknn(str(path))
        best = min(best, time.perf_counter() - started)
    return best, code


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    log.configure(False)
    with tempfile.TemporaryDirectory() as folder:
        valid = exported_conv_model(Path(folder), "rk3588")
        from openrknn.model_file import GRAPH_SECTION

        def bomb(declared: int | None):
            def change(container):
                container.sections[GRAPH_SECTION] = zlib.compress(b"\0" * (64 << 20), 9)
                container.header["graph_compression"] = "zlib"
                if declared is None:
                    container.header.pop("graph_size", None)
                else:
                    container.header["graph_size"] = declared
            return change
        cases = {"bomb declaring 1000 bytes": _forge(valid, "small.rknn", bomb(1000)),
                 "bomb declaring 64 MiB": _forge(valid, "honest.rknn", bomb(64 << 20))}
        reference, code = _best_load_seconds(valid, args.repeat)
        assert code == 0, "the valid model must load"
        print(f"valid load_rknn: {reference * 1e3:.1f} ms (reference)")
        print(f"{'case':<28} {'ms':>8} {'× valid load':>13}")
        for name, path in cases.items():
            seconds, code = _best_load_seconds(path, args.repeat)
            assert code == -1, f"{name} must be refused"
            print(f"{name:<28} {seconds * 1e3:8.1f} {seconds / reference:13.2f}")


if __name__ == "__main__":
    main()
