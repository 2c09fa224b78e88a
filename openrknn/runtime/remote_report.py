"""``eval_perf`` / ``eval_memory`` / ``accuracy_analysis(target=…)`` answered by a board, printed in the
simulator's layouts and marked "measured on <device>".
"""
from __future__ import annotations

import os
from typing import Any

import numpy as np

from openrknn import log
from openrknn.analysis.accuracy import LayerError, cosine, euclidean
from openrknn.analysis.report import RUNTIME_HEADER, format_table
from openrknn.graph.rknn_model import LAYOUT_NCHW, RKNNModel
from openrknn.chips import Chip
from openrknn.profile import LayerPerf, PerfReport, format_perf
from openrknn.profile.memory import human
from openrknn.profile.perf import active_cores
from openrknn.runtime.remote import RemoteRuntime

DEFAULT_LOOP_COUNT = 10
_RULE = "-" * 63          # the rule of the simulator's eval_perf printout (profile/perf_format.py)
_BAR = "=" * 54           # the bar of its memory dump (profile/memory.py)


def _timing_inputs(model: RKNNModel, runtime: RemoteRuntime, inputs: Any) -> list[np.ndarray]:
    """``eval_perf(inputs=…)``, else the last inference's inputs, else zeros of the model's input shapes."""
    if inputs is not None:
        return [np.asarray(v) for v in (inputs if isinstance(inputs, (list, tuple)) else [inputs])]
    if runtime.last_inputs is not None:
        return runtime.last_inputs
    zeros = []
    for spec in model.inputs:
        shape = list(spec.shape)
        if len(shape) == 4 and spec.layout == LAYOUT_NCHW:   # inference takes NHWC by default
            shape = [shape[0], shape[2], shape[3], shape[1]]
        zeros.append(np.zeros(shape, dtype=np.dtype(spec.dtype or "float32")))
    return zeros


def eval_perf(runtime: RemoteRuntime, model: RKNNModel, chip: Chip, core_mask: int, is_print: bool, inputs: Any,
              loop_cnt: int | None, perf_debug: bool) -> dict[str, Any]:
    """Time inferences on the board: the backend's per-layer table when it has one, else the median
    whole-model time. Returns the toolkit's dict (``{'total_time': us[, 'layers': …]}``) plus ``measured_on``."""
    loops = int(loop_cnt or DEFAULT_LOOP_COUNT)
    timing = runtime.time_runs(_timing_inputs(model, runtime, inputs), loops)
    if timing.get("layers"):
        report = board_perf_report(timing["layers"], chip, core_mask)
        if is_print:
            print(format_perf(report, perf_debug, note=f"Measured on {runtime.label} (the board's per-layer timings)."))
        result = report.to_dict(perf_debug=perf_debug)
        result["total_time"] = int(timing.get("backend_total_time_us") or result["total_time"])
        return {**result, "measured_on": runtime.label}
    if perf_debug:
        log.warning("eval_perf: the board's backend gives no per-layer timings; printing the whole-model time")
    if is_print:
        print(format_measured_perf(timing, runtime.label, chip.toolkit))
    return {"total_time": int(round(timing["total_time_us"])), "measured_on": runtime.label}


def board_perf_report(rows: list[dict[str, Any]], chip: Chip, core_mask: int) -> PerfReport:
    """A :class:`PerfReport` of the rows a board backend measured (``LayerPerf.to_dict`` keys, plus ``id``)."""
    layers = [LayerPerf(
        id=int(r["id"]), op_type=str(r.get("operation", "")), data_type=str(r.get("data_type", "")),
        target=str(r.get("target", "NPU")), input_shapes=[tuple(s) for s in r.get("input_shape", [])],
        output_shapes=[tuple(s) for s in r.get("output_shape", [])], ddr_cycles=int(r.get("ddr_cycles", 0)),
        npu_cycles=int(r.get("npu_cycles", 0)), max_cycles=int(r.get("max_cycles", 0)),
        time_us=float(r.get("time", 0)), mac_usage=r.get("mac_usage"),
        workload=tuple(w / 100.0 for w in r.get("workload", [])), rw_kb=float(r.get("rw_kb", 0)),
        full_name=str(r.get("full_name", r.get("name", ""))), name=str(r.get("name", ""))) for r in rows]
    return PerfReport(chip.name, chip.toolkit, chip.npu_freq_mhz, chip.cores, active_cores(chip, core_mask), core_mask,
                      True, layers)


def format_measured_perf(timing: dict[str, Any], device: str, toolkit: int) -> str:
    """The eval_perf printout for a board's whole-model time."""
    total = int(round(timing["total_time_us"]))
    fps = f"FPS: {1e6 / total:.2f}" if total else "FPS: -"
    note = (f"Measured on {device}: whole-model time, median of {timing['runs']} run(s) "
            f"(min {timing['min_time_us']:.0f} us, max {timing['max_time_us']:.0f} us); no per-layer timings.")
    if toolkit == 1:
        bar = "=" * 75
        return "\n".join([bar, "Performance".center(75).rstrip(), bar, note, f"Total Time(us): {total}", fps, bar])
    return "\n".join([note, _RULE, f"Total Operator Elapsed Per Frame Time(us): {total}", _RULE, fps])


def eval_memory(runtime: RemoteRuntime, is_print: bool) -> dict[str, Any]:
    """The board's memory figures: its backend's NPU counters when it has them, else the server process's
    resident-memory growth while the model was loaded."""
    answer = runtime.memory()
    if is_print:
        print(format_measured_memory(answer, runtime.label))
    backend = answer.get("backend")
    if isinstance(backend, dict):
        return {**backend, "measured_on": runtime.label}
    return {"total_memory": answer.get("rss_delta"), "model_size": answer.get("model_size"),
            "measured_on": runtime.label}


def format_measured_memory(answer: dict[str, Any], device: str) -> str:
    backend = answer.get("backend")
    if isinstance(backend, dict) and "total_memory" in backend:
        body = [f"Measured on {device}.", "NPU model memory detail(bytes):"]
        body += [f"    {label}: {human(backend[key])}" for key, label in
                 (("weight_memory", "Weight Memory"), ("internal_memory", "Internal Tensor Memory"),
                  ("other_memory", "Other Memory"), ("total_memory", "Total Memory")) if key in backend]
    else:
        delta = answer.get("rss_delta")
        body = [f"Measured on {device} (the board's backend has no NPU memory counters):",
                f"    Total Memory: {'unknown' if delta is None else human(max(0, delta))} "
                "(server process growth while loading the model)"]
    return "\n".join([_BAR, "            Memory Profile Info Dump", _BAR, *body, "",
                      "INFO: When evaluating memory usage, we need consider",
                      f"the size of model, current model size is: {human(answer.get('model_size') or 0)}", _BAR])


def runtime_errors(model: RKNNModel, golden: dict[str, np.ndarray], simulated: dict[str, np.ndarray],
                   board_outputs: list[np.ndarray]) -> list[LayerError]:
    """Rows for the board's outputs: ``entire`` vs the float model, ``single_sim`` vs the simulator."""
    names = [o.name for o in model.golden.graph.output] if model.golden is not None else []
    rows = []
    for name, value in zip(names, board_outputs):
        row = LayerError("Output", name)
        if name in golden:
            row.entire_cos, row.entire_euc = cosine(golden[name], value), euclidean(golden[name], value)
        if name in simulated:
            row.single_cos, row.single_euc = cosine(simulated[name], value), euclidean(simulated[name], value)
        rows.append(row)
    return rows


def accuracy_on_board(runtime: RemoteRuntime, model: RKNNModel, result: Any, feeds: dict[str, np.ndarray],
                      output_dir: str) -> list[LayerError]:
    """Run ``feeds`` (graph layout) on the board, append the runtime_error section to error_analysis.txt."""
    formats = ["nchw" if spec.layout == LAYOUT_NCHW and len(spec.shape) == 4 else "nhwc" for spec in model.inputs]
    board = runtime.run([feeds[spec.name] for spec in model.inputs], formats)
    rows = runtime_errors(model, result.golden, result.simulator, board)
    text = (f"# measured on {runtime.label} (the board returns the model's outputs only)\n"
            + format_table(rows, RUNTIME_HEADER, "runtime_error", ("entire", "single_sim")))
    path = os.path.join(output_dir, "error_analysis.txt")
    with open(path, "a", encoding="utf-8") as handle:
        handle.write("\n" + text)
    print(text)
    os.makedirs(os.path.join(output_dir, "runtime"), exist_ok=True)
    for index, value in enumerate(board):
        np.save(os.path.join(output_dir, "runtime", f"output_{index}.npy"), np.asarray(value, np.float32))
    return rows
