"""Typed view of a chip table's ``cost:`` section (``openrknn/chips/data/<chip>.yaml``).

The YAML holds the numbers and a comment saying where each comes from; this module only
reads and validates them, so the cost model never indexes raw dicts. See
``docs/performance-model.md`` for what every field means.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from openrknn.chips import Chip
from openrknn.errors import ConfigError

# Dtypes whose MAC rate / alignment row is used for each execution dtype.
RATE_CLASS = {"int8": "int8", "uint8": "int8", "int4": "int8", "int16": "int16", "float16": "float16",
              "bfloat16": "float16", "float32": "float16", "tfloat32": "float16"}
BYTES_PER_ELEMENT = {"int4": 0.5, "int8": 1, "uint8": 1, "int16": 2, "uint16": 2, "float16": 2,
                     "bfloat16": 2, "float32": 4, "int32": 4, "uint32": 4, "int64": 8, "float64": 8,
                     "bool": 1, "tfloat32": 4}


@dataclass(frozen=True)
class Alignment:
    """Channel alignment of one dtype (seed 002 tables 8-1..8-4)."""

    conv_in: int
    conv_out: int
    depthwise: int
    other: int


@dataclass(frozen=True)
class CpuCost:
    """The board CPU that runs fallback ops, input/output conversion and Reshape of outputs."""

    name: str
    elements_per_us: float      # generic fallback op throughput (includes NC1HWC2 <-> NCHW conversion)
    macs_per_us: float          # MAC-heavy fallback ops (MatMul/Conv that cannot go on the NPU)
    copy_bytes_per_us: float    # input/output operator copy + layout conversion
    op_overhead_us: float       # per CPU op dispatch


@dataclass(frozen=True)
class MemoryCost:
    """Constants of the memory estimate (eval_memory)."""

    tensor_align: int           # byte alignment of every internal buffer
    weight_align: int           # byte alignment of every weight block
    regcmd_bytes_per_task: int  # NPU register-command buffer per NPU layer
    runtime_bytes: int          # fixed runtime context allocations counted in "Other Memory"
    model_header_bytes: int     # .rknn container overhead beyond weights and command buffers


@dataclass(frozen=True)
class CostTable:
    """All per-chip numbers of the cost model, per NPU core."""

    chip: str
    toolkit: int
    cores: int
    npu_freq_mhz: float
    macs_per_cycle: dict[str, float]
    dw_macs_per_cycle: dict[str, float]
    align: dict[str, Alignment]
    c2: dict[str, int]
    ddr_freq_mhz: float
    ddr_bus_bytes: int
    ddr_efficiency: float
    mac_efficiency: float
    layer_overhead_us: float
    low_efficiency_factor: float
    cpu: CpuCost
    split_ops: frozenset[str]
    min_split_cycles: float
    per_layer_perf: bool
    memory: MemoryCost
    width_align: int = 1
    concat_factor: float = 0.0      # a Concat alone: its DDR cycles x this (0: the low_efficiency_factor)
    weight_reads: float = 1.0       # times each weight byte crosses the DDR bus per frame (tiling re-reads)
    ddr_overlap_loss: float = 0.0   # share of the shorter of DDR and MAC cycles that does not overlap the longer
    activation_cycles_per_element: float = 0.0   # lookup-table activations (SiLU, Sigmoid, ...): NPU cycles per output element

    @property
    def ddr_bytes_per_npu_cycle(self) -> float:
        """Peak DDR bytes per NPU clock: ``f_ddr · 2 (double data rate) · bus bytes / f_npu``."""
        return self.ddr_freq_mhz * 2.0 * self.ddr_bus_bytes / self.npu_freq_mhz

    def rate(self, dtype: str) -> str:
        return RATE_CLASS.get(dtype, "float16")

    def macs(self, dtype: str, depthwise: bool = False) -> float:
        table = self.dw_macs_per_cycle if depthwise else self.macs_per_cycle
        return float(table.get(self.rate(dtype)) or table["int8"])

    def alignment(self, dtype: str) -> Alignment:
        return self.align.get(self.rate(dtype)) or self.align["int8"]

    def channel_block(self, dtype: str) -> int:
        """C2 of the NC1HWC2 layout for ``dtype`` (seed 002 table 5-1)."""
        return int(self.c2.get("int8" if self.rate(dtype) == "int8" else "float16", 1))


def _need(raw: dict[str, Any], key: str, chip: str) -> Any:
    if key not in raw:
        raise ConfigError(f"chip table {chip}.yaml: cost section has no '{key}'; add it (see docs/performance-model.md)")
    return raw[key]


def _parse(chip: Chip) -> CostTable:
    raw = chip.cost
    if not raw:
        raise ConfigError(f"chip table {chip.name}.yaml has no 'cost:' section, so eval_perf/eval_memory cannot "
                          f"estimate it; add one (see docs/performance-model.md)")
    name = chip.name
    align = {k: Alignment(**v) for k, v in _need(raw, "align", name).items()}
    ddr = _need(raw, "ddr", name)
    multicore = raw.get("multicore") or {}
    try:
        return CostTable(
            chip=name, toolkit=chip.toolkit, cores=chip.cores, npu_freq_mhz=chip.npu_freq_mhz,
            macs_per_cycle={k: float(v) for k, v in _need(raw, "macs_per_cycle", name).items()},
            dw_macs_per_cycle={k: float(v) for k, v in _need(raw, "dw_macs_per_cycle", name).items()},
            align=align, c2={k: int(v) for k, v in _need(raw, "c2", name).items()},
            ddr_freq_mhz=float(ddr["freq_mhz"]), ddr_bus_bytes=int(ddr["bus_bytes"]),
            ddr_efficiency=float(ddr["efficiency"]),
            mac_efficiency=float(_need(raw, "mac_efficiency", name)),
            layer_overhead_us=float(_need(raw, "layer_overhead_us", name)),
            low_efficiency_factor=float(_need(raw, "low_efficiency_factor", name)),
            cpu=CpuCost(**_need(raw, "cpu", name)),
            split_ops=frozenset(multicore.get("split_ops") or ()),
            min_split_cycles=float(multicore.get("min_split_cycles", 0)),
            per_layer_perf=bool(raw.get("per_layer_perf", True)),
            memory=MemoryCost(**_need(raw, "memory", name)),
            width_align=int(raw.get("width_align", 1)),
            activation_cycles_per_element=float(raw.get("activation_cycles_per_element", 0.0)),
            ddr_overlap_loss=float(raw.get("ddr_overlap_loss", 0.0)),
            weight_reads=float(raw.get("weight_reads", 1.0)),
            concat_factor=float(raw.get("concat_factor", 0.0)),
        )
    except (TypeError, KeyError, ValueError) as e:
        raise ConfigError(f"chip table {name}.yaml: malformed cost section ({e}); see docs/performance-model.md") from e


def cost_table(chip: Chip) -> CostTable:
    """The validated cost table of ``chip``.

    Example:
        >>> from openrknn.chips import get_chip
        >>> cost_table(get_chip("rk3588")).macs("int8")
        1024.0
    """
    return _parse(chip)
