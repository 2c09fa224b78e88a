"""Quantization settings: the dtype table and the frozen, validated :class:`QuantSettings` record."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from openrknn.config import (QUANT_ALGORITHMS, QUANT_DTYPE_ALIASES, QUANT_METHOD_GROUPS, QUANT_METHODS,
                             TOOLKIT1_QUANT_DTYPES, TOOLKIT2_QUANT_DTYPES)
from openrknn.errors import ConfigError, NotSupportedError


@dataclass(frozen=True)
class DtypeSpec:
    """How one ``quantized_dtype`` stores weights and activations.

    Attributes:
        act_dtype: integer type of activations, or None when activations stay float16 (weight-only).
        act_qtype: 'asymmetric_quantized' or 'dynamic_fixed_point'.
        weight_dtype: integer type of Conv/Gemm/MatMul weights.
        weight_qtype: 'symmetric_quantized', 'asymmetric_quantized' or 'dynamic_fixed_point'.
    """

    act_dtype: str | None
    act_qtype: str
    weight_dtype: str
    weight_qtype: str


DTYPES: dict[str, DtypeSpec] = {
    "w8a8": DtypeSpec("int8", "asymmetric_quantized", "int8", "symmetric_quantized"),
    "w8a16": DtypeSpec(None, "asymmetric_quantized", "int8", "symmetric_quantized"),
    "w16a16i": DtypeSpec("int16", "asymmetric_quantized", "int16", "symmetric_quantized"),
    "w16a16i_dfp": DtypeSpec("int16", "dynamic_fixed_point", "int16", "dynamic_fixed_point"),
    "w4a16": DtypeSpec(None, "asymmetric_quantized", "int4", "symmetric_quantized"),
    "asymmetric_quantized-u8": DtypeSpec("uint8", "asymmetric_quantized", "uint8", "asymmetric_quantized"),
    "dynamic_fixed_point-i8": DtypeSpec("int8", "dynamic_fixed_point", "int8", "dynamic_fixed_point"),
    "dynamic_fixed_point-i16": DtypeSpec("int16", "dynamic_fixed_point", "int16", "dynamic_fixed_point"),
}


def canonical_dtype(name: str, toolkit: int = 2) -> str:
    """The canonical dtype name, with the same aliases ``config()`` accepts."""
    name = QUANT_DTYPE_ALIASES.get(str(name).strip(), str(name).strip())
    if toolkit == 1 and name == "w8a8":
        return "asymmetric_quantized-u8"
    if toolkit == 2 and name == "asymmetric_quantized-u8":
        return "w8a8"
    return name


@dataclass(frozen=True)
class QuantSettings:
    """What ``build(do_quantization=True)`` was asked for.

    Example:
        >>> s = QuantSettings(dtype="w8a8", method="channel", algorithm="normal")
        >>> s.spec.act_dtype
        'int8'
    """

    dtype: str = "w8a8"
    method: str = "channel"
    algorithm: str = "normal"
    batch_size: int = 100
    epochs: int = -1
    toolkit: int = 2

    @property
    def spec(self) -> DtypeSpec:
        return DTYPES[canonical_dtype(self.dtype, self.toolkit)]

    @property
    def canonical(self) -> str:
        return canonical_dtype(self.dtype, self.toolkit)

    @property
    def group_size(self) -> int | None:
        return int(self.method[len("group"):]) if self.method in QUANT_METHOD_GROUPS else None

    def validate(self, chip: Any) -> "QuantSettings":
        """Check the settings against a platform; returns the settings bound to its toolkit generation.

        Raises:
            ConfigError: unknown dtype/method/algorithm, a dtype the platform does not accept, or a
                group method with a dtype other than w4a16.
            NotSupportedError: w4a8 (documented as not supported yet).
        """
        name = canonical_dtype(self.dtype, chip.toolkit)
        object.__setattr__(self, "toolkit", chip.toolkit)
        if name == "w4a8":
            raise NotSupportedError("quantized_dtype 'w4a8' is documented by Rockchip as not supported yet")
        if name not in DTYPES or name not in TOOLKIT2_QUANT_DTYPES + TOOLKIT1_QUANT_DTYPES:
            raise ConfigError(f"quantized_dtype '{self.dtype}' is not valid; choose one of {sorted(DTYPES)}")
        if name not in chip.quantized_dtypes:
            raise ConfigError(f"quantized_dtype '{name}' is not supported on {chip.name}; "
                              f"{chip.name} accepts {list(chip.quantized_dtypes)}")
        if self.method not in QUANT_METHODS:
            raise ConfigError(f"quantized_method '{self.method}' is not valid; choose one of {list(QUANT_METHODS)}")
        if self.group_size and name != "w4a16":
            raise ConfigError(f"quantized_method '{self.method}' is only for quantized_dtype 'w4a16'")
        if self.algorithm not in QUANT_ALGORITHMS:
            raise ConfigError(f"quantized_algorithm '{self.algorithm}' is not valid; choose one of "
                              f"{list(QUANT_ALGORITHMS)}")
        if self.batch_size < 1:
            raise ConfigError(f"batch_size must be positive, got {self.batch_size}")
        return self

    def sample_count(self, available: int) -> int:
        """Calibration samples used: Toolkit 1 uses ``batch_size × epochs`` (batch capped at the dataset
        size, seed 003 §1.4.5); Toolkit 2 uses the whole dataset."""
        if self.toolkit != 1:
            return available
        return min(available, min(self.batch_size, available) * max(1, self.epochs))
