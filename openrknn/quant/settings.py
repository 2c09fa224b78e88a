"""Quantization settings: the option names and their validation (``config()`` and ``build()`` both call
these), the dtype table and the frozen, validated :class:`QuantSettings` record."""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from openrknn.errors import ConfigError, NotSupportedError
from openrknn.quant.algorithms import algorithm_class

TOOLKIT2_QUANT_DTYPES = ("w8a8", "w8a16", "w16a16i", "w16a16i_dfp", "w4a16", "w4a8")
TOOLKIT1_QUANT_DTYPES = ("asymmetric_quantized-u8", "asymmetric_quantized-8",
                         "dynamic_fixed_point-i8", "dynamic_fixed_point-i16")
# Accepted spellings -> canonical name (seed 001 writes dynamic_fixed_point-8/-16; rknn_convert maps -u8).
QUANT_DTYPE_ALIASES = {
    "asymmetric_quantized-8": "w8a8",
    "asymmetric_quantized-u8": "asymmetric_quantized-u8",
    "dynamic_fixed_point-8": "dynamic_fixed_point-i8",
    "dynamic_fixed_point-16": "dynamic_fixed_point-i16",
}
# the documented names, in the guide's order; each is a registered calibration algorithm (quant/algorithms)
QUANT_ALGORITHMS = ("normal", "kl_divergence", "mmse", "adaround")
QUANT_METHOD_GROUPS = tuple(f"group{n}" for n in (32, 64, 128, 256))
QUANT_METHODS = ("layer", "channel") + QUANT_METHOD_GROUPS
# openrknn's config(weight_qtype=...): how w8a8 weights are stored. rknn-toolkit2 2.5.0 quantizes them
# asymmetric per channel (measured on its simulator, bench/vendor_layers.py); openrknn's default stays
# symmetric, which TFLite's int8 kernels (and so export_tflite / Teflon) require.
WEIGHT_QTYPES = ("symmetric_quantized", "asymmetric_quantized")
# What a quantized model's ``metadata["quantization"]["bias_correction"]`` says of its bias
# correction (quantizer._correct_every_layer decides; hybrid step 2 reads it back)
CORRECTED_EVERY_LAYER = "checked per layer"
CORRECTED_PICTURE_LAYERS = "picture-reading layers"


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


def resolve_alias(name: str) -> str:
    """The documented name a ``quantized_dtype`` spelling stands for (aliases only: no toolkit mapping,
    so ``asymmetric_quantized-u8`` stays itself on both generations)."""
    return QUANT_DTYPE_ALIASES.get(str(name).strip(), str(name).strip())


def activation_dtype(name: str, toolkit: int = 2) -> str:
    """What a ``quantized_dtype`` stores activations as: its integer type, or 'float16' for the
    weight-only dtypes (w8a16, w4a16: 16-bit floating-point activations, per the API reference)."""
    return DTYPES[canonical_dtype(name, toolkit)].act_dtype or "float16"


def canonical_dtype(name: str, toolkit: int = 2) -> str:
    """The canonical dtype name, with the same aliases ``config()`` accepts."""
    name = resolve_alias(name)
    if toolkit == 1 and name == "w8a8":
        return "asymmetric_quantized-u8"
    if toolkit == 2 and name == "asymmetric_quantized-u8":
        return "w8a8"
    return name


def check_dtype(value: str, chip: Any) -> str:
    """The canonical ``quantized_dtype`` on ``chip``'s toolkit generation.

    Raises:
        ConfigError: an unknown name, or one the platform does not accept.
    """
    name = canonical_dtype(value, chip.toolkit)
    if name not in TOOLKIT2_QUANT_DTYPES + TOOLKIT1_QUANT_DTYPES:
        raise ConfigError(f"quantized_dtype={value!r} is not valid; choose one of "
                          f"{list(TOOLKIT2_QUANT_DTYPES if chip.toolkit == 2 else TOOLKIT1_QUANT_DTYPES)}")
    if name not in chip.quantized_dtypes:
        raise ConfigError(f"quantized_dtype '{name}' is not supported on {chip.name}; "
                          f"{chip.name} accepts {list(chip.quantized_dtypes)}")
    return name


def check_method(value: str, dtype: str) -> str:
    """``quantized_method`` checked against the (canonical) dtype: group methods are for w4a16 only."""
    if value not in QUANT_METHODS:
        raise ConfigError(f"quantized_method={value!r} is not valid; choose one of {list(QUANT_METHODS)}")
    if value in QUANT_METHOD_GROUPS and dtype != "w4a16":
        raise ConfigError(f"quantized_method '{value}' is only for quantized_dtype 'w4a16'")
    return value


def check_weight_qtype(value: str | None, dtype: str) -> str | None:
    """openrknn's ``weight_qtype``: None, or one of :data:`WEIGHT_QTYPES` with the (canonical) dtype w8a8."""
    if value is None:
        return None
    if value not in WEIGHT_QTYPES:
        raise ConfigError(f"weight_qtype={value!r} is not valid; choose one of {list(WEIGHT_QTYPES)} (or leave it unset)")
    if value != DTYPES["w8a8"].weight_qtype and dtype != "w8a8":
        raise ConfigError(f"weight_qtype '{value}' is for quantized_dtype 'w8a8' only (this build is '{dtype}')")
    return value


def check_algorithm(value: str) -> str:
    """``quantized_algorithm``: a documented, registered algorithm whose optional extra is installed."""
    algorithm = algorithm_class(value) if value in QUANT_ALGORITHMS else None
    if algorithm is None:
        raise ConfigError(f"quantized_algorithm={value!r} is not valid; choose one of {list(QUANT_ALGORITHMS)}")
    if not algorithm.available():
        raise ConfigError(algorithm.install_hint)
    return value


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
    weight_qtype: str | None = None   # None: the dtype's own (see WEIGHT_QTYPES)
    # an AveragePool's output takes its input's parameters, as rknn-toolkit2 2.5.0 calibrates every
    # AveragePool (probes and the oracle corpus, annotate.mark); False: the pooled range of its own, one
    # rounding finer but not what the board runs
    average_pool_shares_input: bool = True
    # 8-bit Conv weights: 'nearest' or 'running_sum' (an experiment: not rknn-toolkit2's rounding, which is
    # round-to-nearest on an asymmetric grid, bench/vendor_weight_grid.py; off by
    # default because it measured worse on the shared models, quant/weights.weight_integers)
    conv_weight_rounding: str = "nearest"
    # openrknn's two corrections of its own rounding (docs/quantization.md). rknn-toolkit2 2.5.0 applies
    # neither (measured by probes, bench/vendor_weight_grid.py): with both False and
    # weight_qtype='asymmetric_quantized' a build quantizes as the vendor does.
    bias_correction: bool = True
    # each layer's bias correction checked on held-out calibration samples and kept only where it lowers
    # their error (quantizer._correct_biases; the picture-reading layers are always corrected)
    bias_correction_check: bool = True
    equalize_depthwise: bool = True

    @property
    def spec(self) -> DtypeSpec:
        spec = DTYPES[canonical_dtype(self.dtype, self.toolkit)]
        if self.weight_qtype and self.weight_qtype != spec.weight_qtype:
            spec = replace(spec, weight_qtype=self.weight_qtype)
        return spec

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
        object.__setattr__(self, "toolkit", chip.toolkit)
        if canonical_dtype(self.dtype, chip.toolkit) == "w4a8":
            raise NotSupportedError("quantized_dtype 'w4a8' is documented by Rockchip as not supported yet")
        check_method(self.method, check_dtype(self.dtype, chip))
        check_algorithm(self.algorithm)
        check_weight_qtype(self.weight_qtype, canonical_dtype(self.dtype, chip.toolkit))
        if self.batch_size < 1:
            raise ConfigError(f"batch_size must be positive, got {self.batch_size}")
        return self

    def sample_count(self, available: int) -> int:
        """Calibration samples used: Toolkit 1 uses ``batch_size × epochs`` (batch capped at the dataset
        size, seed 003 §1.4.5); Toolkit 2 uses the whole dataset."""
        if self.toolkit != 1:
            return available
        return min(available, min(self.batch_size, available) * max(1, self.epochs))
