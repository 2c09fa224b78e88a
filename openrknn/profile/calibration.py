"""The published measurements the cost model is calibrated on, and the fit that produced the
calibrated constants of the chip tables (re-run it after changing the model:
``python -m openrknn.profile.calibration``).

Only three figures are used (issue 4): seed 001's RK1808 simulator totals for MobileNetV1
(4694 us) and SSD-MobileNetV1 (10622 us), and RK3588 single-core INT8 MobileNetV2 at 1x3x224x224
(433 FPS). Toolkit1 chips get two parameters (``mac_efficiency``, ``layer_overhead_us``) from the
two RK1808 points; Toolkit2 chips get one (DDR ``efficiency``) from the RK3588 point, the rest of
their constants being hardware figures or stated assumptions. Every other published number is
kept aside for validation (``docs/performance-model.md`` §Validation).
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
    """One published total time."""

    chip: str
    network: str
    quantized_dtype: str
    total_us: float
    source: str


CALIBRATION_POINTS = (
    CalibrationPoint("rk1808", "mobilenet_v1", "asymmetric_quantized-u8", 4694.0,
                     "seed 001 §3.5: simulator, 'Total Time(us): 4694', FPS(800MHz) 213.04"),
    CalibrationPoint("rk1808", "ssd_mobilenet_v1", "asymmetric_quantized-u8", 10622.0,
                     "seed 001 §3.6.9: simulator, 'Total Time(us): 10622', FPS(800MHz) 94.14"),
    CalibrationPoint("rk3588", "mobilenet_v2", "w8a8", 1e6 / 433.0,
                     "issue 4: RK3588 single core, INT8 MobileNetV2 1x3x224x224, 433 FPS"),
)

# Relative error the tests accept on the calibration points.
CALIBRATION_TOLERANCE = 0.03


def with_cost(chip: Chip, **overrides: Any) -> Chip:
    """A copy of ``chip`` whose cost section has ``overrides`` applied."""
    return dataclasses.replace(chip, cost={**chip.cost, **overrides})


def predict(point: CalibrationPoint, chip: Chip | None = None) -> float:
    """Estimated total time (us) of a calibration point's network."""
    chip = chip or get_chip(point.chip)
    return float(estimate_perf(reference_model(point.network, point.quantized_dtype, point.chip), chip).total_time_us)


def _bisect(f, lo: float, hi: float, iters: int = 40) -> float:
    """Root of a monotone ``f`` on [lo, hi]."""
    flo = f(lo)
    for _ in range(iters):
        mid = (lo + hi) / 2
        if (f(mid) > 0) == (flo > 0):
            lo, flo = mid, f(mid)
        else:
            hi = mid
    return (lo + hi) / 2


def fit_toolkit2() -> dict[str, float]:
    """DDR ``efficiency`` that reproduces RK3588 MobileNetV2 (433 FPS).

    Toolkit2 tables print ``NPUCycles`` as padded MACs / MAC rate (seed 002 fig 8-3, 8-4, 8-6), so
    their ``mac_efficiency`` is 1 by definition; the one free parameter is the share of peak DDR
    bandwidth the NPU gets.
    """
    point = CALIBRATION_POINTS[2]
    chip = get_chip(point.chip)

    def error(eff: float) -> float:
        return predict(point, with_cost(chip, ddr=dict(chip.cost["ddr"], efficiency=eff))) - point.total_us

    return {"ddr_efficiency": round(_bisect(error, 0.05, 1.0), 4)}


def fit_toolkit1() -> dict[str, float]:
    """``mac_efficiency`` and ``layer_overhead_us`` that reproduce both RK1808 totals."""
    p1, p2 = CALIBRATION_POINTS[0], CALIBRATION_POINTS[1]
    chip = get_chip(p1.chip)

    def overhead_for(eff: float) -> float:
        return _bisect(lambda o: predict(p1, with_cost(chip, mac_efficiency=eff, layer_overhead_us=o)) - p1.total_us,
                       0.0, 200.0, 30)

    def ssd_error(eff: float) -> float:
        o = overhead_for(eff)
        return predict(p2, with_cost(chip, mac_efficiency=eff, layer_overhead_us=o)) - p2.total_us

    eff = _bisect(ssd_error, 0.02, 1.0, 25)
    return {"mac_efficiency": round(eff, 4), "layer_overhead_us": round(overhead_for(eff), 2)}


def report() -> list[tuple[CalibrationPoint, float]]:
    """(point, prediction) for every calibration point with the chip tables as they are."""
    return [(p, predict(p)) for p in CALIBRATION_POINTS]


if __name__ == "__main__":  # pragma: no cover - maintenance entry point
    print("toolkit1 fit:", fit_toolkit1())
    print("toolkit2 fit:", fit_toolkit2())
    for p, pred in report():
        print(f"{p.chip} {p.network}: published {p.total_us:.0f} us, predicted {pred:.0f} us "
              f"({100 * (pred / p.total_us - 1):+.1f}%)")
