"""The build pipeline: what ``RKNN.build``, ``auto_hybrid_report`` and ``hybrid_quantization_step1/2``
run, top to bottom, each as one call from the facade.

    build ─▶ compile.build_model (graph passes, preprocess, quantize) ─▶ [auto_hybrid: the precision
             search of analysis.mixed_precision on the same calibration cache]
    hybrid_step1 ─▶ build_model (+ custom_hybrid) ─▶ [proposal] ─▶ quant.hybrid.write_step1
    hybrid_step2 ─▶ quant.hybrid.read_step2 ─▶ quant.quantize_model

The facade keeps the state (source, model, export path) and turns errors into ``E`` lines and
return codes; this module only imports the stages below it, never the facade.
"""
from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from openrknn import chips, log
from openrknn.analysis.correction_check import correction_judge
from openrknn.analysis.mixed_precision import auto_hybrid_build, propose_layers
from openrknn.analysis.tradeoff import format_tradeoff, tradeoff_points
from openrknn.compile import build_model, calibration_setup
from openrknn.config import ModelConfig
from openrknn.errors import ConfigError
from openrknn.frontends import SourceModel
from openrknn.graph.custom_ops import CustomOpRegistry
from openrknn.graph.rknn_model import RKNNModel
from openrknn.quant import quantize_model
from openrknn.quant.calibrate import CalibrationCache
from openrknn.quant.hybrid import custom_hybrid_pairs, read_step2, write_step1
from openrknn.quant.overrides import QuantOverrides
from openrknn.report import tradeoff_html, write_html

DEFAULT_REPORT_PLATFORMS = ("rk3566", "rk3588")


def build(source: SourceModel, cfg: ModelConfig, do_quantization: bool = True, dataset: str | None = None,
          rknn_batch_size: int | None = None, custom_ops: CustomOpRegistry | None = None,
          pre_compile: bool = False, auto_hybrid: bool = False) -> RKNNModel:
    """``RKNN.build``: the model, float16 or quantized with ``dataset``; with ``auto_hybrid`` the
    cheapest set of layers raised so the outputs meet the thresholds of ``cfg``.

    Raises:
        ConfigError / BuildError / QuantizationError: naming the problem.
    """
    if pre_compile:
        log.warning("build: pre_compile is ignored: pre-compiled models only run on boards with Rockchip's "
                    "driver; openrknn models stay simulator-runnable")
    if auto_hybrid and not do_quantization:
        raise ConfigError("build: auto_hybrid=True needs do_quantization=True and a dataset")
    cache = CalibrationCache() if auto_hybrid else None   # calibrated once, for the build and the search
    model = build_model(source, cfg, bool(do_quantization), dataset, rknn_batch_size, custom_ops, cache=cache)
    if auto_hybrid:
        model = auto_hybrid_model(model, cfg, dataset, custom_ops, cache)
    return model


def auto_hybrid_model(model: RKNNModel, cfg: ModelConfig, dataset: str | None,
                      custom_ops: CustomOpRegistry | None = None, cache: CalibrationCache | None = None) -> RKNNModel:
    """``build(auto_hybrid=True)``: raise the cheapest set of layers of the quantized ``model`` to
    float16 / int16 (per the target chip) so that the outputs meet the thresholds, within
    ``auto_hybrid_min_fps``; the search logs and records its choice (``metadata["auto_hybrid"]``)."""
    settings, samples = calibration_setup(model, cfg, dataset)
    result, _ = auto_hybrid_build(model, samples, settings, cfg, chips.get_chip(cfg.platform), custom_ops, cache)
    return result.model


def auto_hybrid_report(source: SourceModel, cfg: ModelConfig, dataset: str | None,
                       custom_ops: CustomOpRegistry | None = None, model_name: str = "model",
                       target_platforms: Sequence[str] | None = None, max_points: int = 10,
                       is_print: bool = True, report_path: str | None = None,
                       step1_dir: str | None = None) -> tuple[RKNNModel, list[dict[str, Any]]]:
    """``RKNN.auto_hybrid_report``: the auto_hybrid build and the measured trade-off points (one dict
    per build along the search order); prints the table, writes the HTML page (``report_path``)
    and the step-1 files of the choice (``step1_dir``). Returns (the chosen model, the points)."""
    if isinstance(max_points, bool) or not isinstance(max_points, int) or max_points == 1 or max_points < 0:
        raise ConfigError(f"auto_hybrid_report: max_points must be 0 (the choice only) or an integer >= 2, "
                          f"got {max_points!r}")
    if step1_dir is not None and not os.path.isdir(step1_dir):
        raise ConfigError(f"auto_hybrid_report: step1_dir '{step1_dir}' is not a folder; create it first")
    names = list(dict.fromkeys(list(target_platforms or DEFAULT_REPORT_PLATFORMS) + [cfg.platform]))
    report_chips = [chips.get_chip(name) for name in names]
    cache = CalibrationCache()
    model = build_model(source, cfg, True, dataset, None, custom_ops, cache=cache)
    settings, samples = calibration_setup(model, cfg, dataset)
    result, plan = auto_hybrid_build(model, samples, settings, cfg, chips.get_chip(cfg.platform),
                                     custom_ops, cache, always_plan=True)
    points = tradeoff_points(plan, samples, settings, report_chips, result, custom_ops, max_points)
    result.model.metadata["auto_hybrid"]["tradeoff"] = [p.to_dict() for p in points]   # the workbench plots it
    if step1_dir is not None:
        write_step1(result.model, samples, settings, model_name, step1_dir, result.float_layers,
                    "chosen by auto_hybrid", result.int16_layers)
    if is_print:
        print(format_tradeoff(points, cfg.auto_hybrid_cos_thresh))
    if report_path:
        log.info(f"auto_hybrid_report: report saved to "
                 f"{write_html(report_path, tradeoff_html(points, cfg.auto_hybrid_cos_thresh))}")
    return result.model, [p.to_dict() for p in points]


def hybrid_step1(source: SourceModel, cfg: ModelConfig, dataset: str | None, rknn_batch_size: int | None = None,
                 custom_ops: CustomOpRegistry | None = None, model_name: str = "model", proposal: bool = False,
                 proposal_dataset_size: int = 1, custom_hybrid: Any = None, folder: str = ".") -> None:
    """``RKNN.hybrid_quantization_step1``: write {model_name}.model / .data / .quantization.cfg in
    ``folder`` (seed 002 §6.3); ``custom_hybrid`` pairs and the ``proposal``'s layers are listed in
    ``custom_quantize_layers``."""
    pairs = custom_hybrid_pairs(custom_hybrid)
    model = build_model(source, cfg, True, dataset, rknn_batch_size, custom_ops,
                        QuantOverrides(float_subgraphs=pairs) if pairs else None)
    float_layers = list(model.metadata.get("quantization", {}).get("float_layers", []))
    settings, samples = calibration_setup(model, cfg, dataset)
    note = ""
    if proposal:
        proposed = propose_layers(model, samples[:max(1, int(proposal_dataset_size))], custom_ops=custom_ops)
        float_layers = list(dict.fromkeys(float_layers + proposed))
        note = (f"proposal: {len(proposed)} layer(s) lose most accuracy when quantized alone (single-mode "
                "cosine < 0.99); they are listed in custom_quantize_layers")
    write_step1(model, samples, settings, model_name, folder, float_layers, note)


def hybrid_step2(model_input: str, data_input: str, model_quantization_cfg: str,
                 custom_ops: CustomOpRegistry | None = None) -> RKNNModel:
    """``RKNN.hybrid_quantization_step2``: the model quantized from the step-1 files and the edited config."""
    inputs = read_step2(model_input, data_input, model_quantization_cfg)
    model = quantize_model(inputs.float_model, inputs.samples, inputs.settings, inputs.overrides, custom_ops,
                           CalibrationCache(every_layer_corrected=inputs.every_layer_corrected),   # step 1's decision
                           correction_judge(inputs.float_model, custom_ops))
    log.info(f"hybrid_quantization_step2: {len(inputs.overrides.float_layers)} layer(s) in float16, "
             f"{len(inputs.overrides.params)} edited parameter set(s)")
    return model


def rebuild_with_float_layers(source: SourceModel, cfg: ModelConfig, dataset: str | None,
                              custom_ops: CustomOpRegistry | None, layers: Sequence[str]) -> RKNNModel:
    """The workbench's Hybrid page: the loaded model quantized again with ``layers`` (node names) in
    float16 — the build of ``hybrid_quantization_step2`` with a cfg listing them."""
    return build_model(source, cfg, True, dataset, None, custom_ops, QuantOverrides(float_layers=frozenset(layers)))
