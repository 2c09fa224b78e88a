"""Evaluation throughput: images/s of ``openrknn eval`` with 1 and 2 local workers, and on a local
Ray instance with as many CPUs, over the same dataset and models.

    python bench/eval_throughput.py [--images 48] [--size 96] [--ray-cpus 2]

Model: MobileNetV1 (width 1.0, random weights) at ``--size``; columns: the float reference, an
fp16 build and an int8 build (3 simulator runs per image). Images: random pictures written to a
temporary folder. No cache, so every run computes everything; times include starting the worker
processes (not the Ray instance, timed apart). Prints images/s and the ratio to 1 worker; the
numbers of every run must agree (checked).
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from openrknn.evaluation import EvalModel, evaluate, open_dataset  # noqa: E402
from openrknn.profile.reference_nets import mobilenet_v1  # noqa: E402
from rknn.api import RKNN  # noqa: E402


def _build(model: Path, calib: Path | None) -> RKNN:
    rknn = RKNN()
    rknn.config(target_platform="rk3588", mean_values=[[127.5] * 3], std_values=[[127.5] * 3])
    assert rknn.load_onnx(str(model)) == 0
    assert rknn.build(do_quantization=calib is not None, dataset=str(calib) if calib else None) == 0
    return rknn


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", type=int, default=48)
    parser.add_argument("--size", type=int, default=96)
    parser.add_argument("--ray-cpus", dest="ray_cpus", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        rng = np.random.default_rng(0)
        (root / "images").mkdir()
        for i in range(args.images):
            pixels = rng.integers(0, 256, (args.size, args.size, 3), dtype=np.uint8)
            Image.fromarray(pixels).save(root / "images" / f"im{i:04d}.png")
        (root / "calib.txt").write_text("\n".join(f"images/im{i:04d}.png" for i in range(4)) + "\n")
        onnx.save(mobilenet_v1(args.size, 1000), root / "mobilenet.onnx")
        fp16 = _build(root / "mobilenet.onnx", None)._model
        int8 = _build(root / "mobilenet.onnx", root / "calib.txt")._model
        reference = EvalModel.float_reference(fp16)
        builds = [EvalModel.from_rknn("fp16", fp16), EvalModel.from_rknn("int8", int8)]
        data = open_dataset(str(root / "images"))

        results = {}
        for label, kwargs in (("local, 1 worker", {"workers": 1}), ("local, 2 workers", {"workers": 2})):
            start = time.perf_counter()
            report = evaluate(builds, data, reference, cache_path=None, **kwargs)
            results[label] = (args.images / (time.perf_counter() - start), report)
        try:
            import ray
        except ImportError:
            print("W Ray is not installed (pip install 'openrknn[ray]'): no Ray figure")
        else:
            start = time.perf_counter()
            ray.init(num_cpus=args.ray_cpus, include_dashboard=False, log_to_driver=False)
            print(f"I Ray start-up: {time.perf_counter() - start:.1f} s (not counted)")
            try:
                start = time.perf_counter()
                report = evaluate(builds, data, reference, ray_address="local", cache_path=None)
                results[f"Ray, {args.ray_cpus} CPUs"] = (args.images / (time.perf_counter() - start), report)
            finally:
                ray.shutdown()

    base, first = results["local, 1 worker"]
    numbers = [(r.cosine_mean, r.cosine_min, r.worst) for r in first.rows]
    print(f"\nMobileNetV1 {args.size}x{args.size}, {args.images} images, float + fp16 + int8 per image")
    print(f"{'backend':<20}{'images/s':>10}{'vs 1 worker':>13}  same numbers")
    for label, (rate, report) in results.items():
        same = [(r.cosine_mean, r.cosine_min, r.worst) for r in report.rows] == numbers
        print(f"{label:<20}{rate:>10.2f}{rate / base:>12.2f}x  {'yes' if same else 'NO'}")


if __name__ == "__main__":
    main()
