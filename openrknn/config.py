"""``RKNN.config()``: every option of both toolkit generations, validated in one place.

Toolkit 2 (seed 002 §3.1.2 and the 2.x API list) and Toolkit 1 (seed 001 §3.6.3) options are
fields of :class:`ModelConfig`. :func:`parse_config` normalises the two generations into one
record: Toolkit 1's ``channel_mean_value='M0 M1 M2 S'`` becomes per-input mean/std lists, its
``reorder_channel='2 1 0'`` a per-input permutation, its ``target_platform=['rk1808']`` a list.
"""
from __future__ import annotations

import difflib
import math
from dataclasses import dataclass, field, fields
from typing import Any

from openrknn import chips
from openrknn.errors import ConfigError
from openrknn.graph.yuv import SUPPORTED as YUV_FORMATS
from openrknn.profile.memory_plan import MEMORY_PLAN_STRATEGIES   # the allocator owns its strategy names
# the quantization options are named and validated once, by the quantization stage (re-exported here)
from openrknn.quant.settings import (QUANT_ALGORITHMS, QUANT_DTYPE_ALIASES, QUANT_METHOD_GROUPS,  # noqa: F401
                                     QUANT_METHODS, TOOLKIT1_QUANT_DTYPES, TOOLKIT2_QUANT_DTYPES, check_algorithm,
                                     check_dtype, check_method, check_weight_qtype)


@dataclass
class ModelConfig:
    """The validated configuration of one RKNN object (documented names and defaults)."""

    # Toolkit 2 (seed 002 §3.1.2)
    mean_values: list[list[float]] | None = None
    std_values: list[list[float]] | None = None
    quantized_dtype: str = "w8a8"
    quantized_algorithm: str = "normal"
    quantized_method: str = "channel"
    quantized_hybrid_level: int = 0
    target_platform: list[str] = field(default_factory=list)
    quant_img_RGB2BGR: list[bool] | bool = False
    float_dtype: str = "float16"
    optimization_level: int = 3
    custom_string: str | None = None
    remove_weight: bool = False
    compress_weight: bool = False
    inputs_yuv_fmt: list[str | None] | None = None
    single_core_mode: bool = False
    dynamic_input: list[list[list[int]]] | None = None
    model_pruning: bool = False
    op_target: dict[str, str] | None = None
    quantize_weight: bool = False
    remove_reshape: bool = False
    sparse_infer: bool = False
    enable_flash_attention: bool = False
    auto_hybrid_cos_thresh: float = 0.98
    weight_qtype: str | None = None   # openrknn: 'asymmetric_quantized' w8a8 weights, as rknn-toolkit2 stores them
    auto_hybrid_euc_thresh: float | None = None
    auto_hybrid_min_fps: float | None = None   # auto_hybrid's speed floor: estimated FPS on target_platform
    memory_plan_strategy: str = "greedy_by_size"
    # Toolkit 1 (seed 001 §3.6.3)
    batch_size: int = 100
    epochs: int = -1
    reorder_channel: list[list[int]] | None = None
    need_horizontal_merge: bool = False
    # which generation the platforms belong to (1 or 2), derived
    toolkit: int = 2
    # rknn-toolkit2 compiler options given by the script that change nothing here: name -> value
    no_effect_options: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @property
    def platform(self) -> str:
        """The first target platform (the one the model is built for)."""
        return self.target_platform[0]


TOOLKIT1_ONLY = ("channel_mean_value", "reorder_channel", "need_horizontal_merge", "batch_size", "epochs")
_UNSUPPORTED_TOOLKIT1 = {
    # Toolkit 1 options that change nothing in a simulator-first toolkit are accepted silently;
    # these are refused because they need a board or a closed compiler feature.
    "pre_compile": "pre-compiled models only run on a board with Rockchip's closed driver",
}


# rknn-toolkit2 2.5.0 accepts these in config(**kwargs). They steer its closed graph compiler
# (fusion rules, scheduling, SRAM / buffer placement, debug checks); this toolkit has no such
# compiler stage, so they are accepted with a warning instead of stopping a vendor script.
# The vendor's advice for a crashing attention fusion is ``disable_rules=[...]``.
VENDOR_COMPILER_OPTIONS: dict[str, str] = {
    "disable_rules": "it names rknn-toolkit2's internal graph-rewrite rules; openrknn's passes are "
                     "chosen by optimization_level",
    "mini_rknn": "it shrinks the vendor's compiled command stream; openrknn's .rknn has none",
    "compute_order": "it orders the vendor compiler's tiles; openrknn does not schedule tiles",
    "compiler_control_file": "it is read by the vendor's closed compiler",
    "output_optimize": "it tunes the vendor compiler's output layout conversion",
    "set_op_attr": "it sets attributes of the vendor compiler's internal ops",
    "sram_prefer": "SRAM placement is decided by Rockchip's runtime on the board",
    "nbuf_prefer": "buffer placement is decided by Rockchip's runtime on the board",
    "check_data": "it is a debug check inside the vendor compiler",
    "stream_op": "it selects the vendor compiler's streaming kernels",
    "enable_const_share": "constant sharing is a vendor compiler optimisation; results are the same",
    "enable_rnn_loop": "it selects the vendor compiler's RNN loop kernels",
    "enable_core0_only_mode": "core placement is decided by Rockchip's runtime on the board",
    "disable_first_conv": "it switches off the vendor compiler's first-layer convolution kernel",
}

# rknn-toolkit2's memory_plan_strategy names (its default is 'BestFit'). GreedyBySize is this
# toolkit's greedy_by_size; the others have no counterpart in the estimate, which then uses
# greedy_by_size and says so.
VENDOR_MEMORY_PLANS = {"BestFit": "greedy_by_size", "GreedyBySize": "greedy_by_size",
                       "GreedyByLifetime": "greedy_by_size", "SlowPeakGrowth": "greedy_by_size"}
NO_EFFECT_REASONS = {
    **VENDOR_COMPILER_OPTIONS,
    "memory_plan_strategy": "it names one of rknn-toolkit2's allocators; the memory estimate here plans "
                            "with 'greedy_by_size' (this toolkit's strategies: 'greedy_by_size', 'first_fit', "
                            "'naive')",
}


def parse_config(**kwargs: Any) -> ModelConfig:
    """Validate ``config()`` keyword arguments of either generation.

    rknn-toolkit2's compiler options (:data:`VENDOR_COMPILER_OPTIONS`) are accepted and listed in
    ``no_effect_options``; any other unknown name is refused, with the closest valid name.

    Raises:
        ConfigError: naming the option, the bad value and what is allowed.
    """
    known = {f.name for f in fields(ModelConfig)} - {"no_effect_options"} | {"channel_mean_value"}
    unknown = sorted(set(kwargs) - known - set(VENDOR_COMPILER_OPTIONS))
    for name in unknown:
        if name in _UNSUPPORTED_TOOLKIT1:
            raise ConfigError(f"config: '{name}' is not supported: {_UNSUPPORTED_TOOLKIT1[name]}")
    if unknown:
        valid = sorted(known | set(VENDOR_COMPILER_OPTIONS))
        hints = [f"'{n}' (did you mean '{m[0]}'?)" if (m := difflib.get_close_matches(n, valid, 1)) else f"'{n}'"
                 for n in unknown]
        raise ConfigError(f"config: unknown option(s) {', '.join(hints)}; valid options are {valid}")

    cfg = ModelConfig()
    cfg.no_effect_options = {k: kwargs[k] for k in sorted(kwargs) if k in VENDOR_COMPILER_OPTIONS}
    cfg.target_platform, cfg.toolkit = _parse_platforms(kwargs.get("target_platform"),
                                                        any(k in kwargs for k in TOOLKIT1_ONLY))
    _set_normalisation(cfg, kwargs)
    _set_quantization(cfg, kwargs)
    _set_misc(cfg, kwargs)
    return cfg


def _parse_platforms(value: Any, toolkit1_hint: bool) -> tuple[list[str], int]:
    if value is None or value == [] or value == "":
        default = chips.DEFAULT_TOOLKIT1_PLATFORM if toolkit1_hint else chips.DEFAULT_TOOLKIT2_PLATFORM
        return [default], 1 if toolkit1_hint else 2
    names = [value] if isinstance(value, str) else list(value)
    resolved = [chips.get_chip(n) for n in names]
    generations = {c.toolkit for c in resolved}
    if len(generations) > 1:
        raise ConfigError(f"config: target_platform {names} mixes Toolkit 1 and Toolkit 2 chips; "
                          "a model is built for one NPU family")
    groups = {c.compatible for c in resolved}
    if len(groups) > 1:
        raise ConfigError(f"config: target_platform {names} are incompatible chips (e.g. rk1808 and rv1109 run "
                          "different NPUs); build one model per family")
    out: list[str] = []
    for c in resolved:
        if c.name not in out:
            out.append(c.name)
    return out, resolved[0].toolkit


def _float_list(value: Any, what: str) -> list[float]:
    try:
        return [float(v) for v in value]
    except (TypeError, ValueError) as e:
        raise ConfigError(f"config: {what} must be numbers, got {value!r}") from e


def _per_input_lists(value: Any, name: str) -> list[list[float]] | None:
    """Accept ``[[a,b,c]]`` (documented), ``[[..],[..]]`` (multi-input) and flat ``[a,b,c]``."""
    if value is None:
        return None
    if not isinstance(value, (list, tuple)) or len(value) == 0:
        raise ConfigError(f"config: {name} must be a list of per-input lists, e.g. [[123.675, 116.28, 103.53]]")
    if all(isinstance(v, (list, tuple)) for v in value):
        lists = [_float_list(v, name) for v in value]
    elif any(isinstance(v, (list, tuple)) for v in value):
        raise ConfigError(f"config: {name} mixes numbers and lists: {value!r}")
    else:
        lists = [_float_list(value, name)]
    for i, lst in enumerate(lists):
        if len(lst) == 0:
            raise ConfigError(f"config: {name}[{i}] is empty")
    return lists


def _set_normalisation(cfg: ModelConfig, kw: dict[str, Any]) -> None:
    if "channel_mean_value" in kw and ("mean_values" in kw or "std_values" in kw):
        raise ConfigError("config: give either channel_mean_value (Toolkit 1) or mean_values/std_values, not both")
    if kw.get("channel_mean_value") is not None:
        cfg.mean_values, cfg.std_values = _parse_channel_mean_value(kw["channel_mean_value"])
    else:
        cfg.mean_values = _per_input_lists(kw.get("mean_values"), "mean_values")
        cfg.std_values = _per_input_lists(kw.get("std_values"), "std_values")
    if cfg.mean_values and cfg.std_values:
        if len(cfg.mean_values) != len(cfg.std_values):
            raise ConfigError(f"config: mean_values has {len(cfg.mean_values)} input(s) but std_values has "
                              f"{len(cfg.std_values)}")
        for i, (m, s) in enumerate(zip(cfg.mean_values, cfg.std_values)):
            if len(m) != len(s) and len(s) != 1 and len(m) != 1:
                raise ConfigError(f"config: input {i}: mean_values has {len(m)} channel(s) but std_values has {len(s)}")
    for name, lists in (("mean_values", cfg.mean_values), ("std_values", cfg.std_values)):
        for i, values in enumerate(lists or []):
            if not all(math.isfinite(v) for v in values):   # NaN/Inf would make every output NaN
                raise ConfigError(f"config: {name}[{i}] = {values} contains NaN or Inf; give finite numbers")
    for i, s in enumerate(cfg.std_values or []):
        if any(v == 0 for v in s):
            raise ConfigError(f"config: std_values[{i}] contains 0 (division by zero)")
    if kw.get("reorder_channel") is not None:
        cfg.reorder_channel = _parse_reorder(kw["reorder_channel"])
    rgb2bgr = kw.get("quant_img_RGB2BGR", False)
    if isinstance(rgb2bgr, (list, tuple)):
        if not all(isinstance(v, bool) for v in rgb2bgr):
            raise ConfigError(f"config: quant_img_RGB2BGR must be a bool or a list of bools, got {rgb2bgr!r}")
        cfg.quant_img_RGB2BGR = list(rgb2bgr)
    elif isinstance(rgb2bgr, bool):
        cfg.quant_img_RGB2BGR = rgb2bgr
    else:
        raise ConfigError(f"config: quant_img_RGB2BGR must be True or False, got {rgb2bgr!r}")


def _parse_channel_mean_value(value: Any) -> tuple[list[list[float]], list[list[float]]]:
    """Toolkit 1: ``'M0 M1 M2 S0'`` per input, inputs separated by '#'."""
    if not isinstance(value, str):
        raise ConfigError(f"config: channel_mean_value must be a string like '103.94 116.78 123.68 58.82', got {value!r}")
    means, stds = [], []
    for part in value.split("#"):
        numbers = _float_list(part.split(), "channel_mean_value")
        if len(numbers) < 2:
            raise ConfigError(f"config: channel_mean_value '{part.strip()}' needs the means then one scale (M0 M1 M2 S0)")
        if numbers[-1] == 0:
            raise ConfigError(f"config: channel_mean_value '{part.strip()}' has scale 0 (division by zero)")
        means.append(numbers[:-1])
        stds.append([numbers[-1]] * (len(numbers) - 1))
    return means, stds


def _parse_reorder(value: Any) -> list[list[int]]:
    parts = value.split("#") if isinstance(value, str) else [value]
    out = []
    for part in parts:
        try:
            order = [int(v) for v in (part.split() if isinstance(part, str) else part)]
        except (TypeError, ValueError) as e:
            raise ConfigError(f"config: reorder_channel must be like '2 1 0', got {value!r}") from e
        if len(set(order)) != len(order):
            raise ConfigError(f"config: reorder_channel '{' '.join(map(str, order))}' repeats a channel; "
                              "each value must appear once (e.g. '2 1 0')")
        if sorted(order) != list(range(len(order))):
            raise ConfigError(f"config: reorder_channel '{' '.join(map(str, order))}' must be a permutation of "
                              f"0..{len(order) - 1}")
        out.append(order)
    return out


def _given(kw: dict[str, Any], name: str, default: Any) -> Any:
    """The option's value (``default`` when absent or None), stripped when a string."""
    value = kw.get(name, default)
    if value is None:
        value = default
    return value.strip() if isinstance(value, str) else value


def _choice(kw: dict[str, Any], name: str, default: Any, allowed: tuple[Any, ...]) -> Any:
    value = _given(kw, name, default)
    if value not in allowed:
        raise ConfigError(f"config: {name}={value!r} is not valid; choose one of {list(allowed)}")
    return value


def _set_quantization(cfg: ModelConfig, kw: dict[str, Any]) -> None:
    chip = chips.get_chip(cfg.platform)
    dtype = kw.get("quantized_dtype") or ("asymmetric_quantized-u8" if cfg.toolkit == 1 else "w8a8")
    try:
        cfg.quantized_dtype = check_dtype(dtype.strip() if isinstance(dtype, str) else dtype, chip)
        cfg.quantized_algorithm = check_algorithm(_given(kw, "quantized_algorithm", "normal"))
        cfg.quantized_method = check_method(_given(kw, "quantized_method", "layer" if cfg.toolkit == 1 else "channel"),
                                            cfg.quantized_dtype)
        cfg.weight_qtype = check_weight_qtype(kw.get("weight_qtype"), cfg.quantized_dtype)
    except ConfigError as e:
        raise ConfigError(f"config: {e}") from None
    cfg.quantized_hybrid_level = _int(kw, "quantized_hybrid_level", 0, 0, 3)
    cfg.batch_size = _int(kw, "batch_size", 100, 1, None)
    cfg.epochs = _int(kw, "epochs", -1, -1, None)
    if cfg.epochs == 0:
        raise ConfigError("config: epochs must be -1 (automatic) or a positive number")
    cfg.auto_hybrid_cos_thresh = _float(kw, "auto_hybrid_cos_thresh", 0.98, -1.0, 1.0)
    euc = kw.get("auto_hybrid_euc_thresh")
    cfg.auto_hybrid_euc_thresh = None if euc is None else _float(kw, "auto_hybrid_euc_thresh", 0.0, 0.0, None)
    fps = kw.get("auto_hybrid_min_fps")
    cfg.auto_hybrid_min_fps = None if fps is None else _float(kw, "auto_hybrid_min_fps", 0.0, 0.0, None)
    if cfg.auto_hybrid_min_fps is not None and cfg.auto_hybrid_min_fps <= 0:
        raise ConfigError("config: auto_hybrid_min_fps must be a positive estimated FPS, e.g. 30 (or None: no floor)")


def _int(kw: dict[str, Any], name: str, default: int, lo: int | None, hi: int | None) -> int:
    value = kw.get(name, default)
    if value is None:
        value = default
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"config: {name} must be an integer, got {value!r}")
    if (lo is not None and value < lo) or (hi is not None and value > hi):
        raise ConfigError(f"config: {name}={value} is out of range [{lo}, {hi if hi is not None else '∞'}]")
    return value


def _float(kw: dict[str, Any], name: str, default: float, lo: float | None, hi: float | None) -> float:
    value = kw.get(name, default)
    if value is None:
        value = default
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"config: {name} must be a number, got {value!r}")
    if (lo is not None and value < lo) or (hi is not None and value > hi):
        raise ConfigError(f"config: {name}={value} is out of range")
    return float(value)


def _bool(kw: dict[str, Any], name: str) -> bool:
    value = kw.get(name, False)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise ConfigError(f"config: {name} must be True or False, got {value!r}")
    return value


_BOOL_OPTIONS = ("remove_weight", "compress_weight", "single_core_mode", "model_pruning", "quantize_weight",
                 "remove_reshape", "sparse_infer", "enable_flash_attention", "need_horizontal_merge")


def _set_misc(cfg: ModelConfig, kw: dict[str, Any]) -> None:
    for name in _BOOL_OPTIONS:
        setattr(cfg, name, _bool(kw, name))
    cfg.float_dtype = _choice(kw, "float_dtype", "float16", ("float16", "float32"))
    cfg.optimization_level = _int(kw, "optimization_level", 3, 0, 3)
    vendor_plan = kw.get("memory_plan_strategy")
    if isinstance(vendor_plan, str) and vendor_plan in VENDOR_MEMORY_PLANS:   # rknn-toolkit2's own names
        cfg.memory_plan_strategy = VENDOR_MEMORY_PLANS[vendor_plan]
        if vendor_plan != "GreedyBySize":
            cfg.no_effect_options["memory_plan_strategy"] = vendor_plan
    else:
        cfg.memory_plan_strategy = _choice(kw, "memory_plan_strategy", "greedy_by_size", MEMORY_PLAN_STRATEGIES)
    custom = kw.get("custom_string")
    if custom is not None and not isinstance(custom, str):
        raise ConfigError(f"config: custom_string must be a string, got {type(custom).__name__}")
    if custom is not None and len(custom.encode("utf-8")) > 1024:
        raise ConfigError("config: custom_string is longer than 1024 bytes")
    cfg.custom_string = custom
    chip = chips.get_chip(cfg.platform)
    if cfg.sparse_infer and not chip.sparse_infer:
        raise ConfigError(f"config: sparse_infer is only supported on rk3576 (target is {cfg.platform})")
    if cfg.single_core_mode and chip.cores < 2:
        raise ConfigError(f"config: single_core_mode only applies to multi-core NPUs (rk3588, rk3576), "
                          f"not {cfg.platform}")
    yuv = kw.get("inputs_yuv_fmt")
    if yuv is not None:
        items = [yuv] if isinstance(yuv, str) else list(yuv)
        for item in items:
            if item is not None and str(item).lower() not in YUV_FORMATS:
                raise ConfigError(f"config: inputs_yuv_fmt '{item}' is not valid; choose one of {list(YUV_FORMATS)}")
        cfg.inputs_yuv_fmt = [None if i is None else str(i).lower() for i in items]
    op_target = kw.get("op_target")
    if op_target is not None:
        if not isinstance(op_target, dict) or not all(isinstance(k, str) for k in op_target):
            raise ConfigError("config: op_target must be a dict {'<op name>': 'cpu'|'npu'}")
        for name, target in op_target.items():
            if str(target).lower() not in ("cpu", "npu", "gpu"):
                raise ConfigError(f"config: op_target['{name}']={target!r}; targets are 'cpu', 'npu' or 'gpu'")
        cfg.op_target = {k: str(v).lower() for k, v in op_target.items()}
    cfg.dynamic_input = _parse_dynamic_input(kw.get("dynamic_input"))


def _parse_dynamic_input(value: Any) -> list[list[list[int]]] | None:
    if value is None:
        return None
    try:
        sets = [[[int(d) for d in shape] for shape in shape_set] for shape_set in value]
    except (TypeError, ValueError) as e:
        raise ConfigError("config: dynamic_input must be [[shape_in0, shape_in1, ...], [...], ...] "
                          "with integer dims, e.g. [[[1,3,224,224]], [[1,3,160,160]]]") from e
    if not sets or len({len(s) for s in sets}) != 1:
        raise ConfigError("config: dynamic_input: every shape set must list one shape per input")
    return sets
