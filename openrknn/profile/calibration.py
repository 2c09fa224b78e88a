"""Published board figures the cost model is checked against, and helpers to cost a network with
changed constants.

The per-chip constants of ``openrknn/chips/data/*.yaml`` (section ``cost:``) are fitted by
``python bench/perf_fit.py --write`` on Rockchip's published INT8 board FPS (rknn_model_zoo v2.3.2,
13 networks, and MobileNetV2 / ResNet50-v2) and two float16 rows; ``docs/performance-model.md`` §5
has the fit and its leave-one-architecture-out error. The tests keep the two reference networks of
``profile/reference_nets.py`` that are in that table within :data:`BOARD_TOLERANCE` of the boards.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from openrknn.chips import Chip, get_chip
from openrknn.profile.perf import estimate_perf
from openrknn.profile.reference_nets import reference_model


@dataclass(frozen=True)
class CalibrationPoint:
    """One published board figure, as a total time per frame."""

    chip: str
    network: str
    quantized_dtype: str
    total_us: float
    source: str


_CHIPS = ("rk3566", "rk3562", "rk3588", "rk3576", "rv1109", "rv1126", "rk1808")
_FPS = {   # INT8, one core, NPU at its top clock (the rows bench/perf_fit.py fits on)
    "mobilenet_v2": (180.7, 281.3, 450.7, 467.0, 212.9, 322.3, 170.3),
    "resnet50": (37.9, 54.9, 110.1, 99.0, 24.4, 36.2, 37.1),
}


def _dtype(chip: str) -> str:
    return "asymmetric_quantized-u8" if get_chip(chip).toolkit == 1 else "w8a8"


CALIBRATION_POINTS = tuple(
    CalibrationPoint(chip, network, _dtype(chip), 1e6 / fps,
                     f"Rockchip's published INT8 {network} FPS on {chip} (one core): {fps}")
    for network, figures in _FPS.items() for chip, fps in zip(_CHIPS, figures))

# Relative error the tests accept on these points: the fit's own in-sample error on MobileNetV2 and
# ResNet50 reaches 47 % (docs/performance-model.md §5), the reference ResNet50 is v1.5, not v2.
BOARD_TOLERANCE = 0.6


def with_cost(chip: Chip, **overrides: Any) -> Chip:
    """A copy of ``chip`` whose cost section has ``overrides`` applied."""
    return dataclasses.replace(chip, cost={**chip.cost, **overrides})


def predict(point: CalibrationPoint, chip: Chip | None = None) -> float:
    """Estimated total time (us) of a calibration point's network."""
    chip = chip or get_chip(point.chip)
    return float(estimate_perf(reference_model(point.network, point.quantized_dtype, point.chip), chip).total_time_us)


def report() -> list[tuple[CalibrationPoint, float]]:
    """(point, prediction) for every point with the chip tables as they are."""
    return [(p, predict(p)) for p in CALIBRATION_POINTS]


if __name__ == "__main__":  # pragma: no cover - maintenance entry point
    for p, pred in report():
        print(f"{p.chip} {p.network}: published {p.total_us:.0f} us, predicted {pred:.0f} us "
              f"({100 * (pred / p.total_us - 1):+.1f}%)")
