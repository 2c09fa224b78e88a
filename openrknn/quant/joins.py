"""Joins of very unequal ranges: a warning before the board shows what one int8 scale does to them.

A Concat (or Add, Sum, …) stores its inputs in one tensor with one scale. When one input spans
0–320 (YOLOv8's decoded boxes) and another 0–1 (its class scores), an int8 step of 320/255 ≈ 1.25
turns every score into 0 or 1.25. rknn-toolkit2 builds exactly that for the stock ultralytics
head, and its simulator then keeps no detection. The check runs after quantization and names each
such join with its input ranges, whatever dtype this build gives it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from openrknn import log
from openrknn.graph.custom_ops import CustomOpRegistry
from openrknn.graph.rknn_model import RKNNModel
from openrknn.quant.calibrate import tensor_values

# Ops that put several data inputs into one output tensor with one scale.
JOIN_OPS = frozenset({"Concat", "Add", "Sub", "Sum", "Max", "Min", "Mean"})
RANGE_RATIO = 100.0
PROBE_SAMPLES = 4        # calibration samples run to measure join inputs this build keeps in float
MAX_LINES = 5
_INT_DTYPES = ("int8", "uint8", "int4")


@dataclass
class LopsidedJoin:
    """One join whose widest input range is more than ``RANGE_RATIO`` times its narrowest."""

    node: str
    op_type: str
    output: str
    dtype: str                                   # the output's dtype in this build
    ranges: list[tuple[str, float, float]]       # (input tensor, min, max)

    @property
    def ratio(self) -> float:
        widths = [max(abs(lo), abs(hi)) for _, lo, hi in self.ranges]
        return max(widths) / min(widths)

    def message(self) -> str:
        spans = ", ".join(f"'{name}' {lo:.3g}…{hi:.3g}" for name, lo, hi in self.ranges)
        cut = ("cut the model before it (load_onnx(outputs=[...])) and join on the CPU, as Rockchip's model zoo "
               "does for YOLO")
        if self.dtype in _INT_DTYPES:
            return (f"build: {self.op_type} '{self.node}' joins inputs whose ranges differ {self.ratio:.0f}× ({spans}) "
                    f"into one {self.dtype} tensor: the narrow input keeps only a few levels. Make '{self.output}' "
                    f"float16 with hybrid quantization, or {cut}")
        return (f"build: {self.op_type} '{self.node}' joins inputs whose ranges differ {self.ratio:.0f}× ({spans}); this "
                f"build keeps it {self.dtype}, but stored as one int8 tensor (rknn-toolkit2's build does for such "
                f"heads) the narrow input keeps a few levels, often all 0. For a board build, {cut}")


def lopsided_joins(model: RKNNModel, samples: Sequence[Sequence[np.ndarray]] = (),
                   custom_ops: CustomOpRegistry | None = None, ratio: float = RANGE_RATIO) -> list[LopsidedJoin]:
    """Joins of ``model`` whose input ranges differ by more than ``ratio`` (graph order).

    Input ranges come from the quantization parameters; inputs kept in float are measured on the
    float graph with the first ``PROBE_SAMPLES`` of ``samples`` (skipped without samples).
    """
    graph = model.graph.graph
    constants = {i.name for i in graph.initializer} | {o for n in graph.node if n.op_type == "Constant" for o in n.output}
    joins = [n for n in graph.node if n.op_type in JOIN_OPS
             and len([i for i in n.input if i and i not in constants]) >= 2]
    if not joins:
        return []
    ranges: dict[str, tuple[float, float]] = {}
    unmeasured: set[str] = set()
    for node in joins:
        for name in node.input:
            if not name or name in constants or name in ranges:
                continue
            params = model.quant_params.get(name) or {}
            if params.get("min") and params.get("max") and params.get("axis") is None:
                ranges[name] = (float(np.min(params["min"])), float(np.max(params["max"])))
            else:
                unmeasured.add(name)
    if unmeasured and samples and model.golden is not None:
        ranges.update(_measure(model, sorted(unmeasured), samples, custom_ops))
    found = []
    for node in joins:
        inputs = [(name, *ranges[name]) for name in node.input if name and name not in constants and name in ranges]
        widths = [max(abs(lo), abs(hi)) for _, lo, hi in inputs]
        live = [w for w in widths if w > 0]          # a dead (all-zero) input is another matter
        if len(live) >= 2 and max(live) > ratio * min(live):
            found.append(LopsidedJoin(node.name or node.output[0], node.op_type, node.output[0],
                                      model.tensor_dtypes.get(node.output[0], "float32"), inputs))
    return found


def _measure(model: RKNNModel, tensors: list[str], samples, custom_ops) -> dict[str, tuple[float, float]]:
    golden_names = {o for n in model.golden.graph.node for o in n.output} | {v.name for v in model.golden.graph.input}
    present = [t for t in tensors if t in golden_names]
    out: dict[str, tuple[float, float]] = {}
    try:
        for values in tensor_values(model.golden, present, list(samples)[:PROBE_SAMPLES], custom_ops):
            for name, value in values.items():
                if value.size == 0 or not np.issubdtype(value.dtype, np.floating) or not np.isfinite(value).all():
                    continue
                lo, hi = float(value.min()), float(value.max())
                if name in out:
                    lo, hi = min(lo, out[name][0]), max(hi, out[name][1])
                out[name] = (lo, hi)
    except Exception as e:   # the check must never fail a build that succeeded
        log.debug(f"build: join range check skipped: {e}")
    return out


def warn_lopsided_joins(model: RKNNModel, samples: Sequence[Sequence[np.ndarray]] = (),
                        custom_ops: CustomOpRegistry | None = None) -> list[LopsidedJoin]:
    """Log one ``W`` line per lopsided join (at most ``MAX_LINES``, then a count); return them all."""
    found = lopsided_joins(model, samples, custom_ops)
    for join in found[:MAX_LINES]:
        log.warning(join.message())
    if len(found) > MAX_LINES:
        log.warning(f"build: {len(found) - MAX_LINES} more join(s) with input ranges differing > {RANGE_RATIO:.0f}×: "
                    + ", ".join(j.node for j in found[MAX_LINES:MAX_LINES + 10]))
    return found
