"""Printed ``eval_perf`` tables: Toolkit2 (seed 002 §3.2.3, §8.2.1) and Toolkit1 (seed 001 §3.5/§3.6.9)."""
from __future__ import annotations

from openrknn.profile.op_support import TOOLKIT1_NAME
from openrknn.profile.perf import LayerPerf, PerfReport

LAYER_COLUMNS = ["ID", "OpType", "DataType", "Target", "InputShape", "OutputShape", "DDRCycles", "NPUCycles",
                 "MaxCycles", "Time(us)", "MacUsage(%)", "RW(KB)", "FullName"]
RANKING_COLUMNS = ["OpType", "CallNumber", "CPUTime(us)", "GPUTime(us)", "NPUTime(us)", "TotalTime(us)",
                   "TimeRatio(%)"]
_RULE = "-" * 63


def workload_column(cores: int) -> str | None:
    """``WorkLoad(0/1/2)`` on RK3588, ``WorkLoad(0/1)`` on RK3576, none on single-core chips."""
    return f"WorkLoad({'/'.join(str(i) for i in range(cores))})" if cores > 1 else None


def layer_columns(report: PerfReport) -> list[str]:
    cols = list(LAYER_COLUMNS)
    wl = workload_column(report.cores)
    if wl:
        cols.insert(cols.index("RW(KB)"), wl)
    return cols


def _shape(shapes: list[tuple[int, ...]]) -> str:
    return ",".join("(" + ",".join(str(d) for d in s) + ")" for s in shapes) or "\\"


def _row(r: LayerPerf, cores: int) -> list[str]:
    cpu = r.target != "NPU"
    row = [str(r.id), r.op_type, r.data_type.upper(), r.target, _shape(r.input_shapes), _shape(r.output_shapes),
           str(r.ddr_cycles), "0" if cpu else str(r.npu_cycles), str(r.max_cycles), str(round(r.time_us)),
           "\\" if r.mac_usage is None else f"{r.mac_usage:.2f}"]
    if cores > 1:
        row.append("/".join(f"{100 * w:.1f}%" for w in r.workload))
    row += [str(round(r.rw_kb)), r.full_name]
    return row


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    return [fmt.format(*header).rstrip()] + [fmt.format(*r).rstrip() for r in rows]


def _totals(report: PerfReport) -> list[str]:
    return [f"Total Operator Elapsed Per Frame Time(us): {report.total_time_us}",
            f"Total Memory Read/Write Per Frame Size(KB): {report.total_rw_kb}"]


def _note(report: PerfReport) -> str:
    cores = len(report.active_cores)
    return (f"Estimated by the openrknn cost model for {report.chip.upper()} (NPU {report.npu_freq_mhz:g} MHz, "
            f"{cores} core{'s' if cores > 1 else ''}); not measured on a board.")


def format_toolkit2(report: PerfReport, perf_debug: bool, note: str | None = None) -> str:
    """Toolkit2 printout; ``perf_debug=False`` (and RV110x, which has no per-layer mode) prints totals only."""
    fps = f"FPS({report.npu_freq_mhz:g}MHz): {report.fps:.2f}"
    note = note or _note(report)
    if not perf_debug or not report.per_layer_supported:
        return "\n".join([note, _RULE, *_totals(report), _RULE, fps])
    table = _table(layer_columns(report), [_row(r, report.cores) for r in report.layers])
    rule = "-" * max(len(_RULE), max(len(line) for line in table))
    lines = [note, rule, "Network Layer Information Table".center(len(rule)).rstrip(), rule,
             table[0], rule, *table[1:], rule, *_totals(report), rule, ""]
    rank_rows = [[r["op_type"], str(r["calls"]), str(round(r["cpu"])), str(round(r["gpu"])), str(round(r["npu"])),
                  str(round(r["total"])), f"{r['ratio']:.2f}%"] for r in report.ranking()]
    rank = _table(RANKING_COLUMNS, rank_rows)
    rrule = "-" * max(len(_RULE), max(len(line) for line in rank))
    lines += [rrule, "Operator Time Consuming Ranking Table".center(len(rrule)).rstrip(), rrule, rank[0], rrule,
              *rank[1:], rrule, fps]
    return "\n".join(lines)


def format_toolkit1(report: PerfReport) -> str:
    """Toolkit1 simulator printout (seed 001 §3.5): ``Layer ID  Name  Time(us)``, total and FPS."""
    bar = "=" * 75
    lines = [bar, "Performance".center(75).rstrip(), bar, f"{'Layer ID':<12}{'Name':<56}Time(us)"]
    for r in report.layers:
        lines.append(f"{r.id:<12}{_toolkit1_name(r):<56}{round(r.time_us)}")
    lines += [f"Total Time(us): {report.total_time_us}", f"FPS({report.npu_freq_mhz:g}MHz): {report.fps:.2f}", bar]
    return "\n".join(lines)


def _toolkit1_name(r: LayerPerf) -> str:
    return TOOLKIT1_NAME.get(r.kind, r.name)


def format_perf(report: PerfReport, perf_debug: bool, note: str | None = None) -> str:
    """The text ``eval_perf(is_print=True)`` prints for ``report`` (``note``: the first line, for
    timings measured on a board instead of estimated).

    Example:
        >>> from openrknn.chips import get_chip
        >>> from openrknn.profile import estimate_perf
        >>> from openrknn.profile.reference_nets import reference_model
        >>> text = format_perf(estimate_perf(reference_model("mobilenet_v2", "w8a8"), get_chip("rk3588")), False)
        >>> "Total Operator Elapsed Per Frame Time(us):" in text
        True
    """
    if report.toolkit == 1:
        return format_toolkit1(report) if note is None else note + "\n" + format_toolkit1(report)
    return format_toolkit2(report, perf_debug, note)
