"""The accuracy / speed trade-off of automatic mixed precision, as a table of measured points.

Each point applies the first k moves of the auto_hybrid order (``mixed_precision.plan_search``:
most output cosine regained per estimated µs first), quantizes with the shared calibration cache,
MEASURES the worst output cosine on the evaluation samples and ESTIMATES the FPS on every chip
asked for (cost model). The k are 0, then doubling up to every move, plus the build auto_hybrid
chooses (marked ``chosen``) — so the table answers "what does each step of accuracy cost". Each
point says what kind of step it is: ``prefix`` (the first k moves of the order; the shortest prefix
that met the thresholds is a point too) or ``pruned`` (auto_hybrid's choice: that prefix without
the moves the pruning pass found unnecessary).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from openrknn.analysis.mixed_precision import MixedPrecisionResult, SearchPlan, overrides_of
from openrknn.analysis.precision_cost import fps, total_time_us
from openrknn.chips import Chip
from openrknn.graph.custom_ops import CustomOpRegistry
from openrknn.quant import QuantSettings, quantize_model


@dataclass
class TradeoffPoint:
    """One build on the curve."""

    moves: int                                   # the first ``moves`` moves applied
    float16: int                                 # layers in float16
    int16: int                                   # layers in int16
    cosine: float                                # worst output cosine over outputs and samples (measured)
    meets: bool                                  # whether the thresholds are met
    fps: dict[str, float] = field(default_factory=dict)   # chip → estimated FPS
    chosen: bool = False                         # the build auto_hybrid returns
    last_move: str = ""                          # "layer→precision" of the k-th move, or what pruning dropped
    step: str = "prefix"                         # 'prefix': the first k moves; 'pruned': a prefix minus pruned moves

    def to_dict(self) -> dict[str, Any]:
        return {"moves": self.moves, "float16": self.float16, "int16": self.int16, "cosine": self.cosine,
                "meets": self.meets, "fps": dict(self.fps), "chosen": self.chosen, "last_move": self.last_move,
                "step": self.step}


def prefix_counts(total: int, max_points: int = 10) -> list[int]:
    """0, 1, 2, 4, … and ``total``: at most ``max_points`` (≥ 2) prefix lengths, doubling."""
    counts, k = [0], 1
    while k < total and len(counts) < max_points - 1:
        counts.append(k)
        k *= 2
    if total:
        counts.append(total)
    return counts


def tradeoff_points(plan: SearchPlan, samples: Sequence[Sequence[np.ndarray]], settings: QuantSettings,
                    chips: Sequence[Chip], chosen: MixedPrecisionResult | None = None,
                    custom_ops: CustomOpRegistry | None = None, max_points: int = 10) -> list[TradeoffPoint]:
    """The measured points of ``plan`` (see module doc), by number of moves; ``chosen`` adds the
    auto_hybrid build (``auto_hybrid(..., plan=plan)``) as its own point."""
    counts = prefix_counts(len(plan.choices), max_points) if max_points else []
    if max_points and chosen is not None and chosen.pruned and chosen.prefix_moves not in counts:
        counts = sorted(counts + [chosen.prefix_moves])   # the prefix the pruning pass started from
    builds: list[tuple[list, bool]] = [(plan.choices[:k], False) for k in counts]
    if chosen is not None:
        builds.append((list(chosen.choices), True))
    points = []
    for moves, is_chosen in builds:
        pruned = is_chosen and bool(chosen.pruned)
        model = (chosen.model if is_chosen else
                 quantize_model(plan.float_model, samples, settings, overrides_of(moves), custom_ops, plan.cache))
        meets = plan.check.passes(model, full=True)
        points.append(TradeoffPoint(
            moves=len(moves), float16=sum(m.precision == "float16" for m in moves),
            int16=sum(m.precision == "int16" for m in moves), cosine=min(plan.check.last, default=float("nan")),
            meets=meets, fps={chip.name: round(fps(total_time_us(model, chip)), 1) for chip in chips},
            chosen=is_chosen, step="pruned" if pruned else "prefix",
            last_move=(f"{len(chosen.pruned)} of the first {chosen.prefix_moves} moves pruned" if pruned
                       else f"{moves[-1].layer}→{moves[-1].precision}" if moves else "")))
    points.sort(key=lambda p: (p.moves, p.chosen))
    return points


def format_tradeoff(points: Sequence[TradeoffPoint], cos_thresh: float) -> str:
    """The printed table: one row per point, FPS per chip, the chosen build starred."""
    chip_names = list(points[0].fps) if points else []
    header = (f"{'moves':>5}  {'fp16':>4}  {'int16':>5}  {'cosine':>8}  "
              + "  ".join(f"{name + ' FPS':>12}" for name in chip_names) + f"  {'step':<6}  last move")
    lines = [f"auto_hybrid trade-off (cosine threshold {cos_thresh}; * = auto_hybrid's choice, "
             f"+ = meets the threshold)", header, "-" * len(header)]
    for p in points:
        mark = "*" if p.chosen else "+" if p.meets else " "
        lines.append(f"{p.moves:>5}{mark} {p.float16:>4}  {p.int16:>5}  {p.cosine:>8.5f}  "
                     + "  ".join(f"{p.fps[name]:>12.1f}" for name in chip_names) + f"  {p.step:<6}  {p.last_move}")
    return "\n".join(lines)
