"""Printed eval_perf tables carry exactly the documented columns (seed 002 §3.2.3 / §8.2.1, seed 001 §3.5)."""
from __future__ import annotations

import re

import pytest

from openrknn.chips import get_chip
from openrknn.profile import estimate_perf, format_perf
from openrknn.profile.reference_nets import reference_model

BASE = ["ID", "OpType", "DataType", "Target", "InputShape", "OutputShape", "DDRCycles", "NPUCycles", "MaxCycles",
        "Time(us)", "MacUsage(%)"]
RANK = ["OpType", "CallNumber", "CPUTime(us)", "GPUTime(us)", "NPUTime(us)", "TotalTime(us)", "TimeRatio(%)"]


def _header_after(lines, title):
    i = next(k for k, line in enumerate(lines) if line.strip() == title)
    return lines[i + 2].split()


@pytest.mark.parametrize("chip, workload", [("rk3588", ["WorkLoad(0/1/2)"]), ("rk3576", ["WorkLoad(0/1)"]),
                                            ("rk3566", []), ("rk3562", [])])
def test_layer_table_columns(chip, workload):
    text = format_perf(estimate_perf(reference_model("mobilenet_v2", platform=chip), get_chip(chip)), True)
    lines = text.splitlines()
    assert _header_after(lines, "Network Layer Information Table") == BASE + workload + ["RW(KB)", "FullName"]
    assert _header_after(lines, "Operator Time Consuming Ranking Table") == RANK
    n_cols = len(BASE) + len(workload) + 2
    body = [line for line in lines if re.match(r"^\d+\s", line)]
    assert len(body) == 57 and all(len(line.split()) == n_cols for line in body)


def test_totals_lines_and_fps():
    rep = estimate_perf(reference_model("mobilenet_v2"), get_chip("rk3588"))
    for debug in (True, False):
        text = format_perf(rep, debug)
        assert f"Total Operator Elapsed Per Frame Time(us): {rep.total_time_us}" in text.splitlines()
        assert f"Total Memory Read/Write Per Frame Size(KB): {rep.total_rw_kb}" in text.splitlines()
        assert re.search(r"^FPS\(1000MHz\): \d+\.\d\d$", text, re.M)
    short = format_perf(rep, False)
    assert "Network Layer Information Table" not in short and "Ranking" not in short


def test_rv1106_prints_totals_only():
    rep = estimate_perf(reference_model("mobilenet_v2", platform="rv1106"), get_chip("rv1106"))
    text = format_perf(rep, True)
    assert "Network Layer Information Table" not in text and "Total Operator Elapsed Per Frame Time(us)" in text
    assert "layers" not in rep.to_dict()


def test_toolkit1_format():
    rep = estimate_perf(reference_model("mobilenet_v1", "asymmetric_quantized-u8", "rk1808"), get_chip("rk1808"))
    lines = format_perf(rep, True).splitlines()
    assert lines[1].strip() == "Performance"
    assert lines[3].split() == ["Layer", "ID", "Name", "Time(us)"]
    assert lines[4].split()[1] == "tensor.transpose_3"
    assert sum("convolution.relu.pooling.layer2_2" in line for line in lines) == 27
    assert sum("fullyconnected.relu.layer_3" in line for line in lines) == 1
    assert f"Total Time(us): {rep.total_time_us}" in lines
    assert re.fullmatch(r"FPS\(800MHz\): \d+\.\d\d", lines[-2])
