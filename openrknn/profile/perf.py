"""``eval_perf`` on the simulator: per-layer and total time estimated by the cost model."""
from __future__ import annotations

import csv
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from openrknn.chips import NPUCoreMask
from openrknn.chips import Chip
from openrknn.errors import ConfigError
from openrknn.graph.rknn_model import RKNNModel
from openrknn.profile.cost_model import layer_cost
from openrknn.profile.cost_table import cost_table
from openrknn.profile.layers import Layer, build_layers

@dataclass
class LayerPerf:
    """One row of the "Network Layer Information Table"."""

    id: int
    op_type: str
    data_type: str
    target: str
    input_shapes: list[tuple[int, ...]]
    output_shapes: list[tuple[int, ...]]
    ddr_cycles: int
    npu_cycles: int
    max_cycles: int
    time_us: float
    mac_usage: float | None
    workload: tuple[float, ...]
    rw_kb: float
    full_name: str
    name: str
    macs: int = 0
    kind: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "operation": self.op_type, "target": self.target, "time": round(self.time_us),
                "data_type": self.data_type.upper(), "input_shape": [list(s) for s in self.input_shapes],
                "output_shape": [list(s) for s in self.output_shapes], "ddr_cycles": self.ddr_cycles,
                "npu_cycles": self.npu_cycles, "max_cycles": self.max_cycles,
                "mac_usage": None if self.mac_usage is None else round(self.mac_usage, 2),
                "workload": [round(w * 100, 1) for w in self.workload], "rw_kb": round(self.rw_kb),
                "full_name": self.full_name}


@dataclass
class PerfReport:
    """Result of :func:`estimate_perf`."""

    chip: str
    toolkit: int
    npu_freq_mhz: float
    cores: int                      # cores of the chip
    active_cores: tuple[int, ...]   # cores the core_mask enables
    core_mask: int
    per_layer_supported: bool       # False on RV110x: eval_perf prints totals only
    layers: list[LayerPerf] = field(default_factory=list)

    @property
    def total_time_us(self) -> int:
        return int(round(sum(layer.time_us for layer in self.layers)))

    @property
    def total_rw_kb(self) -> int:
        return int(round(sum(layer.rw_kb for layer in self.layers)))

    @property
    def fps(self) -> float:
        return 1e6 / self.total_time_us if self.total_time_us else 0.0

    def ranking(self) -> list[dict[str, Any]]:
        """The "Operator Time Consuming Ranking Table" rows, by total time (descending)."""
        rows: dict[str, dict[str, Any]] = {}
        for layer in self.layers:
            r = rows.setdefault(layer.op_type, {"op_type": layer.op_type, "calls": 0, "cpu": 0.0, "gpu": 0.0,
                                                "npu": 0.0})
            r["calls"] += 1
            r["npu" if layer.target == "NPU" else "gpu" if layer.target == "GPU" else "cpu"] += layer.time_us
        total = sum(layer.time_us for layer in self.layers) or 1.0
        for r in rows.values():
            r["total"] = r["cpu"] + r["gpu"] + r["npu"]
            r["ratio"] = 100.0 * r["total"] / total
        return sorted(rows.values(), key=lambda r: -r["total"])

    def to_dict(self, perf_debug: bool = True) -> dict[str, Any]:
        """The documented result dict.

        ``{'total_time': us, 'layers': {id: {'name', 'operation', 'target', 'time', ...}}}``; with
        ``perf_debug=False`` on a Toolkit2 platform, and always on RV110x, only ``{'total_time': us}``
        (toolkit2-1.1 §3.5.9). Toolkit1's simulator gives ``{'name', 'time'}`` per layer (seed 001 §3.6.9).
        """
        out: dict[str, Any] = {"total_time": self.total_time_us}
        if self.toolkit == 1:
            out["layers"] = {layer.id: {"name": layer.name, "time": round(layer.time_us)} for layer in self.layers}
        elif perf_debug and self.per_layer_supported:
            out["layers"] = {layer.id: layer.to_dict() for layer in self.layers}
        return out

    def to_csv(self, path: str | Path) -> Path:
        """Write the per-layer table as CSV (the real tool saves ``eval_perf.csv``)."""
        path = Path(path)
        with path.open("w", newline="", encoding="utf-8") as f:
            w = csv.writer(f)
            w.writerow(["ID", "OpType", "DataType", "Target", "InputShape", "OutputShape", "DDRCycles", "NPUCycles",
                        "MaxCycles", "Time(us)", "MacUsage(%)", "WorkLoad", "RW(KB)", "FullName"])
            for r in self.layers:
                d = r.to_dict()
                w.writerow([r.id, r.op_type, d["data_type"], r.target, d["input_shape"], d["output_shape"],
                            r.ddr_cycles, r.npu_cycles, r.max_cycles, round(r.time_us), d["mac_usage"],
                            d["workload"], d["rw_kb"], r.full_name])
        return path


def active_cores(chip: Chip, core_mask: int) -> tuple[int, ...]:
    """Core indices ``core_mask`` enables; AUTO (0) is one idle core (seed 002 §5.3.1)."""
    if core_mask == NPUCoreMask.NPU_CORE_AUTO or chip.cores <= 1:
        if core_mask not in (NPUCoreMask.NPU_CORE_AUTO, NPUCoreMask.NPU_CORE_0, NPUCoreMask.NPU_CORE_ALL) \
                and chip.cores <= 1:
            raise ConfigError(f"core_mask {core_mask:#x} is only valid on RK3588 and RK3576; "
                              f"{chip.display_name} has one NPU core: use RKNN.NPU_CORE_AUTO")
        return (0,)
    if core_mask == NPUCoreMask.NPU_CORE_ALL:
        return tuple(range(chip.cores))
    cores = tuple(i for i in range(16) if core_mask >> i & 1)
    if not cores or max(cores) >= chip.cores:
        raise ConfigError(f"core_mask {core_mask:#x} enables core(s) {list(cores)} but {chip.display_name} has "
                          f"{chip.cores} NPU cores; use NPU_CORE_0..NPU_CORE_{chip.cores - 1}, or NPU_CORE_ALL")
    return cores


def _visible(layer: Layer, toolkit: int) -> bool:
    """Toolkit1 tables have no output rows and fold reshapes into the neighbouring layers."""
    if toolkit == 1:
        return layer.kind != "output" and layer.op_type != "Reshape"
    return True


def extra_batch(model: RKNNModel, layers: list[Layer]) -> int:
    """Frames per inference not already in the graph's shapes (``rknn_batch_size``)."""
    batch = max(int(model.rknn_batch_size or 1), 1)
    first = next((t.shape for layer in layers if layer.kind == "input" for t in layer.outputs), ())
    return batch if batch > 1 and first and first[0] == 1 else 1


def estimate_perf(model: RKNNModel, chip: Chip, core_mask: int = NPUCoreMask.NPU_CORE_AUTO) -> PerfReport:
    """Estimate per-layer and total inference time of ``model`` on ``chip``.

    Args:
        model: a built model (structural ONNX graph + dtypes).
        chip: target platform (``openrknn.chips.get_chip``).
        core_mask: ``RKNN.NPU_CORE_*``; multi-core masks only on RK3588 (3 cores) and RK3576 (2 cores).

    Returns:
        A :class:`PerfReport`; print it with :func:`format_perf`.

    Example:
        >>> from openrknn.chips import get_chip
        >>> from openrknn.profile.reference_nets import reference_model
        >>> report = estimate_perf(reference_model("mobilenet_v2", "w8a8"), get_chip("rk3588"))
        >>> 300 < report.fps < 600
        True
    """
    table = cost_table(chip)
    cores = active_cores(chip, core_mask)
    layers = build_layers(model, table, float_on_npu=chip.float_on_npu)
    graph_inputs = {t.name for layer in layers if layer.kind == "input" for t in layer.outputs}
    report = PerfReport(chip.name, chip.toolkit, chip.npu_freq_mhz, chip.cores, cores, core_mask,
                        table.per_layer_perf)
    batch = extra_batch(model, layers)
    for layer in layers:
        if not _visible(layer, chip.toolkit):
            continue
        c = layer_cost(layer, table, cores, graph_inputs)
        report.layers.append(LayerPerf(
            id=len(report.layers), op_type=layer.op_type, data_type=layer.dtype, target=layer.target,
            input_shapes=[t.shape for t in layer.inputs], output_shapes=[t.shape for t in layer.outputs],
            ddr_cycles=round(c.ddr_cycles * batch), npu_cycles=round(c.npu_cycles * batch),
            max_cycles=round(c.max_cycles * batch), time_us=c.time_us * batch, mac_usage=c.mac_usage,
            workload=c.workload, rw_kb=c.rw_bytes * batch / 1024.0, full_name=layer.full_name, name=layer.name,
            macs=layer.macs, kind=layer.kind))
    return report
