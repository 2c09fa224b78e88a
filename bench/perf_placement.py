"""NPU/CPU placement of the perf stand-ins: rknn-toolkit2's Target column next to openrknn's.

    python bench/perf_placement.py LOGDIR [--only pp_liteseg ...] [--all]
    python bench/perf_placement.py LOGDIR --cycles      # rknn-toolkit2's own cycle estimate vs the boards

``LOGDIR`` holds rknn-toolkit2 2.5.0 verbose build logs named ``<model>.<chip>.<int8|fp16>.log``
(``build(do_quantization=...)`` of ``bench/.cache/perf_models/<model>.onnx`` with ``verbose=True``,
mean 0 / std 255, run with ``-I`` from a folder outside the repository). For each log, openrknn
builds the same network for the same chip and the layers whose target differs are printed
(``--all``: every CPU layer of either side), matched by the ONNX node name rknn-toolkit2 prints in
its FullName column. ``graph/placement.py`` is the rule these rows check.

``--cycles`` reads the table's ``Cycles(DDR/NPU/Total)`` and ``RW(KB)`` columns instead: per log the sum
of rknn-toolkit2's own estimate (it prices convolutions only; every other NPU layer prints 0/0/0), the
published board time of ``perf_fit.PUBLISHED`` and their ratio, the NPU layers it does not price, and
the layers that move the most bytes (``docs/performance-model.md`` §5 uses it for the misses).
"""
from __future__ import annotations

import argparse
import collections
import contextlib
import io
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(REPO / "bench" / "oracle"))

from perf_fit import CHIPS, FP16_CHIPS, MODELS, PUBLISHED, PUBLISHED_FP16, _dataset  # noqa: E402
from run_oracle import parse_table  # noqa: E402


def openrknn_rows(model: str, chip_name: str, quantize: bool) -> list[tuple[str, str, str, str]]:
    """(OpType, DataType, Target, FullName) of openrknn's executed layers."""
    import tempfile

    import onnx

    from openrknn.chips import get_chip
    from openrknn.profile.cost_table import cost_table
    from openrknn.profile.layers import build_layers
    from openrknn.profile.perf import _visible
    from rknn.api import RKNN
    path = MODELS / f"{model}.onnx"
    dims = onnx.load(str(path), load_external_data=False).graph.input[0].type.tensor_type.shape.dim
    chip = get_chip(chip_name)
    with tempfile.TemporaryDirectory() as tmp, contextlib.redirect_stdout(io.StringIO()):
        rknn = RKNN()
        rknn.config(mean_values=[[0, 0, 0]], std_values=[[255, 255, 255]], target_platform=chip_name)
        if rknn.load_onnx(model=str(path)) != 0 or rknn.build(
                do_quantization=quantize, dataset=str(_dataset(Path(tmp), tuple(d.dim_value for d in dims)))) != 0:
            raise RuntimeError(f"openrknn could not build {model} for {chip_name}")
        layers = build_layers(rknn._model, cost_table(chip), float_on_npu=chip.float_on_npu)
    return [(layer.op_type, layer.dtype.upper(), layer.target, layer.full_name) for layer in layers
            if _visible(layer, chip.toolkit)]


def _node(full_name: str) -> str:
    return full_name.split(":", 1)[-1]


def compare(log: Path, show_all: bool) -> None:
    model, chip, dtype = log.name.split(".")[:3]
    theirs = parse_table(log.read_text(errors="replace"))
    if not theirs:
        print(f"== {model} {chip} {dtype}: no layer table in {log.name}")
        return
    mine = openrknn_rows(model, chip, dtype == "int8")
    io_ops = ("InputOperator", "OutputOperator")
    cpu_t = collections.Counter(f"{r[0]} {r[1]}" for r in theirs if r[2] == "CPU" and r[0] not in io_ops)
    cpu_o = collections.Counter(f"{r[0]} {r[1]}" for r in mine if r[2] == "CPU" and r[0] not in io_ops)
    print(f"== {model} {chip} {dtype}: layers rknn-toolkit2 {len(theirs)}, openrknn {len(mine)}")
    print(f"   CPU rknn-toolkit2: {dict(cpu_t)}")
    print(f"   CPU openrknn:      {dict(cpu_o)}")
    target_o = {_node(r[3]): r for r in mine}
    target_t = {_node(r[3]): r for r in theirs}
    for row in theirs:
        if row[0] in io_ops:
            continue
        other = target_o.get(_node(row[3]))
        if (other and other[2] != row[2]) or (show_all and row[2] == "CPU"):
            print(f"   rknn {row[2]} {row[0]} {row[1]:8s} {row[3]}  | openrknn: {other[2] + ' ' + other[0] if other else '-'}")
    for row in mine:
        if row[0] in io_ops or row[2] != "CPU":
            continue
        other = target_t.get(_node(row[3]))
        if other is None or show_all:
            print(f"   openrknn CPU {row[0]} {row[1]:8s} {row[3]}  | rknn: {other[2] + ' ' + other[0] if other else '-'}")


def cycle_rows(text: str) -> list[dict]:
    """Rows of the first layer table with rknn-toolkit2's cycle and RW estimates."""
    rows, started = [], False
    for line in text.splitlines():
        body = line.split("]", 1)[-1].strip() if "RKNN:" in line else line.strip()
        if not started:
            started = "Network Layer Information Table" in body
            continue
        parts = body.split()
        if len(parts) >= 9 and parts[0].isdigit() and parts[6].count("/") == 2:
            if rows and int(parts[0]) <= rows[-1]["id"]:
                break
            ddr, npu, total = (int(x) for x in parts[6].split("/"))
            rest = [x for x in parts[7:] if not x.endswith("%")]   # RK3576 adds a SparseRatio column
            rows.append({"id": int(parts[0]), "op": parts[1], "dtype": parts[2], "target": parts[3],
                         "out": parts[5], "ddr": ddr, "npu": npu, "total": total, "rw_kb": float(rest[0]),
                         "name": rest[-1]})
        elif rows and body.startswith("----"):
            break
    return rows


def cycles(log: Path, top: int = 4) -> None:
    """rknn-toolkit2's summed per-layer estimate next to the published board FPS."""
    model, chip, dtype = log.name.split(".")[:3]
    rows = cycle_rows(log.read_text(errors="replace"))
    if not rows:
        print(f"== {model} {chip} {dtype}: no layer table in {log.name}")
        return
    table, chips = (PUBLISHED_FP16, FP16_CHIPS) if dtype == "fp16" else (PUBLISHED, CHIPS)
    board_us = 1e6 / table[model][1][chips.index(chip)] if model in table and chip in chips else float("nan")
    total = sum(r["total"] for r in rows)   # NPU cycles at 1 GHz = ns
    unpriced = collections.Counter(r["op"] for r in rows if r["target"] == "NPU" and r["total"] == 0)
    print(f"== {model} {chip} {dtype}: {len(rows)} layers, rknn-toolkit2 Σ cycles {total / 1e3:.0f} us at 1 GHz "
          f"(DDR {sum(r['ddr'] for r in rows) / 1e3:.0f}, NPU {sum(r['npu'] for r in rows) / 1e3:.0f}), "
          f"board {board_us:.0f} us: board / estimate {board_us / (total / 1e3):.2f}")
    print(f"   NPU layers it prices at 0: {dict(unpriced)}")
    for r in sorted(rows, key=lambda r: -r["rw_kb"])[:top]:
        print(f"   RW {r['rw_kb']:8.0f} KB  {r['target']} {r['op']:<16} {r['out']:<20} {r['name']}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("logdir", type=Path)
    parser.add_argument("--only", nargs="*")
    parser.add_argument("--all", action="store_true")
    parser.add_argument("--cycles", action="store_true",
                        help="rknn-toolkit2's own per-layer cycle estimate vs the published board FPS")
    args = parser.parse_args(argv)
    for log in sorted(args.logdir.glob("*.log")):
        if args.only and log.name.split(".")[0] not in args.only:
            continue
        if args.cycles:
            cycles(log)
        else:
            compare(log, args.all)
    return 0


if __name__ == "__main__":
    sys.exit(main())
