"""Per-call overhead of openrknn's librknnrt (C API) against Python ``RKNNLite`` on the same models, one run.

Builds the library into a temporary prefix, compiles ``bench/capi/capi_loop.c`` and times, per model,
the best over ``--rounds`` alternating rounds of the median of ``--loops`` inferences (inputs_set + run + outputs_get + release in C; ``inference()``
in Python, same uint8 NHWC input) and the median of one ``rknn_query`` call (the cost of crossing into
the runtime). Models: the tests' small classifier (float16 and int8) and, when ``../shared/models``
has it, PP-OCR's direction classifier.

Usage: ``python bench/capi_overhead.py [--loops 200] [--rounds 3] [--data ../shared]``
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from openrknn import log  # noqa: E402
from openrknn.capi.build import build  # noqa: E402
from rknn.api import RKNN  # noqa: E402
from rknnlite.api import RKNNLite  # noqa: E402
from tests.helpers import make_conv_model  # noqa: E402


def small_models(folder: Path) -> list[tuple[str, Path, tuple[int, ...]]]:
    models = []
    rng = np.random.default_rng(0)
    for name, quantize in (("conv16 float16", False), ("conv16 int8", True)):
        rknn = RKNN()
        rknn.config(target_platform="rk3588", mean_values=[[127.5] * 3], std_values=[[127.5] * 3])
        rknn.load_onnx(str(make_conv_model(folder / "conv.onnx")))
        if quantize:
            for i in range(4):
                np.save(folder / f"s{i}.npy", rng.uniform(0, 255, (1, 16, 16, 3)).astype(np.float32))
            (folder / "ds.txt").write_text("".join(f"s{i}.npy\n" for i in range(4)))
            rknn.build(do_quantization=True, dataset=str(folder / "ds.txt"))
        else:
            rknn.build(do_quantization=False)
        path = folder / f"{name.replace(' ', '_')}.rknn"
        rknn.export_rknn(str(path))
        models.append((name, path, (1, 16, 16, 3)))
    return models


def real_model(folder: Path, data: Path) -> list[tuple[str, Path, tuple[int, ...]]]:
    """PP-OCR's direction classifier (3×48×192), float16, when the shared models are present."""
    source = data / "models" / "onnx" / "ch_ppocr_mobile_v2.0_cls_infer.onnx"
    if not source.is_file():
        return []
    rknn = RKNN()
    rknn.config(target_platform="rk3588", mean_values=[[127.5] * 3], std_values=[[127.5] * 3])
    if rknn.load_onnx(str(source), inputs=["x"], input_size_list=[[1, 3, 48, 192]]) != 0 or \
            rknn.build(do_quantization=False) != 0:
        return []
    path = folder / "cls.rknn"
    rknn.export_rknn(str(path))
    return [("PP-OCR cls float16", path, (1, 48, 192, 3))]


def python_median(model: Path, x: np.ndarray, loops: int) -> float:
    lite = RKNNLite()
    lite.load_rknn(str(model))
    lite.init_runtime()
    for _ in range(3):
        lite.inference(inputs=[x])
    times = []
    for _ in range(loops):
        start = time.perf_counter_ns()
        lite.inference(inputs=[x])
        times.append((time.perf_counter_ns() - start) / 1000)
    lite.release()
    return float(np.median(times))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--loops", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3, help="alternating C / Python rounds (best median kept)")
    parser.add_argument("--data", default=os.environ.get("OPENRKNN_TEST_DATA") or str(REPO.parent / "shared"))
    args = parser.parse_args()
    log.configure(False)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        prefix = folder / "prefix"
        build(prefix)
        program = folder / "capi_loop"
        subprocess.run(["cc", "-O2", f"-I{prefix}/include", str(REPO / "bench/capi/capi_loop.c"), "-o", str(program),
                        f"-L{prefix}/lib", "-lrknnrt", f"-Wl,-rpath,{prefix}/lib"], check=True)
        models = small_models(folder) + real_model(folder, Path(args.data))
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        print(f"{'model':<28} {'RKNNLite µs':>12} {'C API µs':>10} {'C/Python':>9} {'per-call µs':>12}")
        for name, path, shape in models:
            x = np.random.default_rng(1).integers(0, 256, shape, dtype=np.uint8)
            x.tofile(folder / "x.bin")
            runs = []
            for _ in range(args.rounds):   # alternate C and Python: a busy machine drifts; keep each side's best
                out = subprocess.run([str(program), str(path), str(folder / "x.bin"), str(args.loops)], env=env,
                                     capture_output=True, text=True, check=True).stdout.split()
                runs.append((float(out[0]), float(out[1]), python_median(path, x, args.loops)))
            query_us, c_us, py_us = (min(r[i] for r in runs) for i in range(3))
            print(f"{name:<28} {py_us:>12.1f} {c_us:>10.1f} {c_us / py_us:>9.2f} {query_us:>12.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
