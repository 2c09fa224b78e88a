"""Predicted int8 FPS next to published board figures, per chip, with the error.

    python bench/perf_vs_boards.py [--shared ../shared]

The published figures (INT8, NPU at its maximum frequency, RK3588/RK3576 on one core) are Rockchip's
for MobileNetV2 224² and the ONNX model zoo's pre-activation ResNet50-v2 224². Speed does not depend
on weights, so both architectures come from ``shared/tools/make_perf_models.py`` with random weights.
Toolkit 1 chips (rv1109, rv1126, rk1808) are costed as ``asymmetric_quantized-u8``.
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import onnx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from openrknn.chips import get_chip  # noqa: E402
from openrknn.profile import estimate_perf  # noqa: E402
from openrknn.profile.reference_nets import wrap_onnx  # noqa: E402

CHIPS = ("rk3566", "rk3562", "rk3588", "rk3576", "rv1109", "rv1126", "rk1808")
PUBLISHED_FPS = {   # INT8, one core, NPU at max frequency
    "mobilenetv2": (180.7, 281.3, 450.7, 467.0, 212.9, 322.3, 170.3),
    "resnet50v2": (37.9, 54.9, 110.1, 99.0, 24.4, 36.2, 37.1),
}


def predicted_fps(model: onnx.ModelProto, chip_name: str) -> float:
    chip = get_chip(chip_name)
    dtype = "asymmetric_quantized-u8" if chip.toolkit == 1 else "w8a8"
    return estimate_perf(wrap_onnx(model, dtype, chip.name), chip).fps


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shared", default=str(REPO.parent / "shared"), help="the shared folder (tools/make_perf_models.py)")
    args = ap.parse_args(argv)
    maker = Path(args.shared) / "tools" / "make_perf_models.py"
    if not maker.exists():
        print(f"E {maker} not found: give --shared", file=sys.stderr)
        return 1
    errors = []
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, str(maker), tmp], check=True, capture_output=True)
        print(f"{'network':<14}{'chip':<8}{'published':>10}{'predicted':>10}{'error':>8}")
        for name, published in PUBLISHED_FPS.items():
            model = onnx.load(str(Path(tmp) / f"{name}.onnx"))
            for chip, board in zip(CHIPS, published):
                fps = predicted_fps(model, chip)
                error = fps / board - 1
                errors.append(abs(error))
                print(f"{name:<14}{chip:<8}{board:>10.1f}{fps:>10.1f}{error:>+8.0%}")
    print(f"median |error| {statistics.median(errors):.0%}, worst {max(errors):.0%} over {len(errors)} figures")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
