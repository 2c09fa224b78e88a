"""Rockchip NPU platforms as data: one YAML table per chip in ``chips/data/``.

Identity fields (toolkit generation, compatibility group, dtypes) are read here; the cost
model's figures live in each table's ``cost`` section and are interpreted by ``openrknn.profile``.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

import yaml

from openrknn.errors import ConfigError

DEFAULT_TOOLKIT2_PLATFORM = "rk3566"   # seed 002 §10.8: no target_platform means RK3566/RK3568
DEFAULT_TOOLKIT1_PLATFORM = "rk1808"   # seed 001 §3.6.3


@dataclass(frozen=True)
class Chip:
    """One platform's table (see ``chips/data/<name>.yaml`` for sources of each number)."""

    name: str
    toolkit: int
    npu: str
    compatible: tuple[str, ...]
    cores: int
    npu_freq_mhz: float
    peak_int8_tops: float
    float_on_npu: bool
    quantized_dtypes: tuple[str, ...]
    sparse_infer: bool = False
    cost: dict[str, Any] = field(default_factory=dict)
    lowering: dict[str, Any] = field(default_factory=dict)   # how rknn-toolkit2 lowers layers for this chip

    @property
    def display_name(self) -> str:
        return self.name.upper()


@functools.cache
def all_chips() -> dict[str, Chip]:
    """Every platform table, keyed by lower-case name."""
    chips: dict[str, Chip] = {}
    for entry in sorted(resources.files("openrknn.chips").joinpath("data").iterdir(), key=lambda p: p.name):
        if not entry.name.endswith(".yaml"):
            continue
        raw = yaml.safe_load(entry.read_text(encoding="utf-8"))
        name = raw["name"]
        if name in chips:
            raise ValueError(f"chip table '{name}' is defined twice")
        chips[name] = Chip(
            name=name,
            toolkit=int(raw["toolkit"]),
            npu=raw["npu"],
            compatible=tuple(raw["compatible"]),
            cores=int(raw["cores"]),
            npu_freq_mhz=float(raw["npu_freq_mhz"]),
            peak_int8_tops=float(raw["peak_int8_tops"]),
            float_on_npu=bool(raw["float_on_npu"]),
            quantized_dtypes=tuple(raw["quantized_dtypes"]),
            sparse_infer=bool(raw.get("sparse_infer", False)),
            cost=dict(raw.get("cost") or {}),
            lowering=dict(raw.get("lowering") or {}),
        )
    return chips


def get_chip(name: str) -> Chip:
    """Look a platform up by name (case-insensitive); a clear ``ConfigError`` if unknown."""
    key = str(name).strip().lower()
    if key == "rk3588s":
        key = "rk3588"
    chips = all_chips()
    if key not in chips:
        raise ConfigError(f"target_platform '{name}' is not supported; choose one of {sorted(chips)}")
    return chips[key]


def toolkit2_platforms() -> list[str]:
    return [c.name for c in all_chips().values() if c.toolkit == 2]


def toolkit1_platforms() -> list[str]:
    return [c.name for c in all_chips().values() if c.toolkit == 1]


class NPUCoreMask:
    """``core_mask`` values of init_runtime (seed 002 §5.3.1)."""

    NPU_CORE_AUTO = 0x0
    NPU_CORE_0 = 0x1
    NPU_CORE_1 = 0x2
    NPU_CORE_2 = 0x4
    NPU_CORE_0_1 = 0x3
    NPU_CORE_0_1_2 = 0x7
    NPU_CORE_ALL = 0xFFFF
    VALID_CORE_MASKS = (0x0, 0x1, 0x2, 0x4, 0x3, 0x7, 0xFFFF)
