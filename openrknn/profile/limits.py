"""The NPU-limit check of a built model (``openrknn check``, ``RKNN.check_limits``, ``build``'s W lines).

:mod:`openrknn.graph.npu_limits` says which layers break the chip's documented limits; this module
adds what the cost model knows — the estimated time of each CPU fallback — and prints the report.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from openrknn import chips, log
from openrknn.errors import ConfigError
from openrknn.graph import npu_limits, placement
from openrknn.graph.npu_limits import Finding
from openrknn.graph.rknn_model import RKNNModel
from openrknn.profile.cost_model import cpu_time_us
from openrknn.profile.cost_table import cost_table
from openrknn.profile.layers import build_layers

METADATA_KEY = placement.LIMIT_CPU_KEY   # node names the limits put on the CPU (read by graph.placement)


@dataclass
class LimitReport:
    """Findings of one model on one chip (``covered`` False: the operator list has no such chip)."""

    chip: str
    covered: bool
    findings: list[Finding] = field(default_factory=list)

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "E"]

    def to_dict(self) -> dict[str, Any]:
        return {"chip": self.chip, "covered": self.covered, "findings": [f.to_dict() for f in self.findings]}


def check_model(model: RKNNModel, platform: str | None = None, dtype_override: str | None = None) -> LimitReport:
    """Check every layer of ``model`` against ``platform``'s operator list (default: its first platform)."""
    if dtype_override not in (None, "int8", "int16", "float16"):
        raise ConfigError(f"data type '{dtype_override}' is not one the NPU runs; use int8, int16 or float16")
    chip = chips.get_chip(platform or model.platforms[0])
    if npu_limits.limits_for(chip.name) is None:
        return LimitReport(chip.display_name, False)
    findings = npu_limits.check_graph(model.graph, chip.name, model.tensor_dtypes, model.quant_params, dtype_override)
    return LimitReport(chip.display_name, True, _with_cpu_cost(model, chip, findings))


def check_build(model: RKNNModel, platform: str) -> None:
    """``build``'s hook: every finding as a ``W`` line, and the layers the limits move to the CPU
    recorded in the model (``metadata[METADATA_KEY]``), so ``eval_perf`` costs them there."""
    try:
        report = check_model(model, platform)
    except Exception as e:  # noqa: BLE001 - the check advises; it never fails a build
        log.debug(f"build: NPU limit check skipped ({type(e).__name__}: {e})")
        return
    log_findings(report)
    if cpu_layers(report):
        model.metadata[METADATA_KEY] = cpu_layers(report)


def _with_cpu_cost(model: RKNNModel, chip: chips.Chip, findings: list[Finding]) -> list[Finding]:
    """Each CPU fallback with the cost model's CPU time of its layer (None when it cannot be costed)."""
    if not any(f.consequence == npu_limits.CPU for f in findings):
        return findings
    try:
        cost = cost_table(chip)
        layers = {layer.name: layer for layer in build_layers(model, cost, chip.float_on_npu)}
    except Exception as e:  # noqa: BLE001 - the check stands without the estimate
        log.debug(f"check: no CPU time estimate ({type(e).__name__}: {e})")
        return findings
    out = []
    for finding in findings:
        layer = layers.get(finding.node)
        if finding.consequence == npu_limits.CPU and layer is not None:
            finding = npu_limits.with_cost(finding, cpu_time_us(layer, cost))
        out.append(finding)
    return out


def cpu_layers(report: LimitReport) -> list[str]:
    """Node names the limits move to the CPU (what ``eval_perf`` then costs on the CPU)."""
    return sorted({f.node for f in report.findings if f.consequence == npu_limits.CPU})


def format_report(report: LimitReport) -> str:
    """The printed report: one line per finding, its advice below it, and a summary."""
    if not report.covered:
        return (f"{report.chip}: not covered by Rockchip's operator list v2.3.2 (RKNPU2 chips only); "
                "nothing checked")
    if not report.findings:
        return f"{report.chip}: every layer is within the documented NPU limits"
    lines = [f"{report.chip}: {len(report.findings)} finding(s) (operator list v2.3.2)"]
    for finding in report.findings:
        lines.append(f"{finding.severity} {finding.line()}")
        if finding.suggestion:
            lines.append(f"    advice: {finding.suggestion}")
    cpu = cpu_layers(report)
    rewritten = {f.node for f in report.findings if f.consequence == npu_limits.REWRITE}
    lines.append(f"{len(cpu)} layer(s) on the CPU, {len(rewritten)} rewritten by the converter, "
                 f"{len({f.node for f in report.errors})} that cannot run as built")
    return "\n".join(lines)


def log_findings(report: LimitReport, api: str = "build") -> None:
    """The findings as ``W`` lines (build's log), advice included."""
    for finding in report.findings:
        log.warning(f"{api}: NPU limit: {finding.line()}")
        if finding.suggestion:
            log.warning(f"{api}:     advice: {finding.suggestion}")


__all__ = ["LimitReport", "check_model", "check_build", "format_report", "log_findings", "cpu_layers", "METADATA_KEY"]
