"""accuracy_analysis: per-layer errors, the files it writes, the worst layer it finds (seed 002 §3.2.2 / §7.1)."""
from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import numpy as np
import pytest

from openrknn.analysis import run_accuracy_analysis
from openrknn.analysis.accuracy import AnalysisResult, LayerError, cosine
from rknn.api import RKNN
from tests.helpers import three_convs

CELL = r"-?\d\.\d{5} \| \S+"        # "0.99991 | 0.012166"


def sample(tmp_path: Path, seed: int = 1) -> Path:
    path = tmp_path / f"x{seed}.npy"
    np.save(path, np.random.default_rng(seed).uniform(0, 1, (1, 3, 16, 16)).astype(np.float32))
    return path


def built(model_path: Path, **config) -> RKNN:
    rknn = RKNN()
    assert rknn.config(target_platform="rk3588", **config) == 0
    assert rknn.load_onnx(str(model_path)) == 0
    assert rknn.build(do_quantization=False) == 0
    return rknn


def rows_of(text: str) -> dict[str, str]:
    """``tensor -> rest of line`` for every ``[OpType] tensor`` row of error_analysis.txt (a tensor
    computed inside a layer, never stored, has a row without values)."""
    out = {}
    for line in text.splitlines():
        m = re.match(r"^\[(\w+)\] (\S+)\s*(.*)$", line)
        if m:
            out[m.group(2)] = m.group(3)
    return out


# --------------------------------------------------------------------- fp16 builds (no quantization needed)
def test_fp16_analysis_writes_every_artefact(tmp_path, capsys):
    rknn = built(three_convs(tmp_path / "m.onnx"))
    out = tmp_path / "snapshot"
    assert rknn.accuracy_analysis(inputs=[str(sample(tmp_path))], output_dir=str(out)) == 0
    text = (out / "error_analysis.txt").read_text()
    assert text in capsys.readouterr().out                       # the table is printed too
    lines = text.splitlines()
    assert lines[0].startswith("# simulator_error: calculate the output error of each layer of the simulator")
    assert lines[1].lstrip("# ").startswith("entire:") and lines[2].lstrip("# ").startswith("single:")
    header = [line.split() for line in lines[4:7]]
    assert header == [["layer_name", "simulator_error"], ["entire", "single"], ["cos", "euc", "cos", "euc"]]
    assert set(lines[7]) == {"-"}
    rows = rows_of(text)
    assert {"x", "r1", "r2", "y"} <= set(rows)
    for tensor in ("r1", "r2", "y"):
        cells = re.findall(CELL, rows[tensor])
        assert len(cells) == 2, rows[tensor]                     # entire and single
        assert all(float(c.split("|")[0]) > 0.999 for c in cells)   # fp16 keeps ~3 decimal digits
    # CSV and JSON carry the same numbers as the table
    records = json.loads((out / "error_analysis.json").read_text())
    with (out / "error_analysis.csv").open() as handle:
        table = list(csv.DictReader(handle))
    assert [r["tensor"] for r in records] == [r["tensor"] for r in table] == list(rows)
    assert set(records[0]) == {"op_type", "tensor", "entire_cos", "entire_euc", "single_cos", "single_euc"}
    y = next(r for r in records if r["tensor"] == "y")
    assert f"{y['entire_cos']:.5f}" == rows["y"].split()[0]
    assert float(next(r for r in table if r["tensor"] == "y")["single_euc"]) == pytest.approx(y["single_euc"])
    # per-tensor dumps, named through map_name_to_file.txt: the vendor's .txt plus npy/<name>.npy (its names)
    mapping = dict(line.split() for line in (out / "map_name_to_file.txt").read_text().splitlines())
    assert mapping["y"] == "y.txt"
    golden_y = np.load(out / "golden" / "npy" / "y.npy")
    simulated_y = np.load(out / "simulator" / "npy" / "y.npy")
    assert golden_y.shape == simulated_y.shape == (1, 4, 16, 16)
    assert cosine(golden_y, simulated_y) == pytest.approx(y["entire_cos"], abs=1e-6)
    golden_txt = np.genfromtxt(out / "golden" / "y.txt")      # how vendor scripts read the snapshot
    simulated_txt = np.genfromtxt(out / "simulator" / mapping["y"])
    np.testing.assert_array_equal(golden_txt.astype(np.float32), golden_y.reshape(-1))
    np.testing.assert_array_equal(simulated_txt.astype(np.float32), simulated_y.reshape(-1))


def test_output_dir_none_writes_the_two_text_files_to_snapshot(tmp_path, monkeypatch):
    """rknn-toolkit2: output_dir=None gives ./snapshot/error_analysis.txt and map_name_to_file.txt, no dumps."""
    rknn = built(three_convs(tmp_path / "m.onnx"))
    x = str(sample(tmp_path))
    work = tmp_path / "cwd"
    work.mkdir()
    monkeypatch.chdir(work)
    assert rknn.accuracy_analysis(inputs=[x], output_dir=None) == 0
    written = sorted(str(p.relative_to(work)) for p in work.rglob("*"))
    assert written == ["snapshot", "snapshot/error_analysis.txt", "snapshot/map_name_to_file.txt"]
    assert "[Conv]" in (work / "snapshot" / "error_analysis.txt").read_text()


def test_png_plot_marks_worst_layers(tmp_path):
    image = pytest.importorskip("PIL.Image")
    rknn = built(three_convs(tmp_path / "m.onnx"))
    assert rknn.accuracy_analysis(inputs=[str(sample(tmp_path))], output_dir=str(tmp_path / "s")) == 0
    png = image.open(tmp_path / "s" / "error_analysis.png").convert("RGB")
    assert png.size == (1000, 420)
    pixels = np.asarray(png)
    red = (pixels[..., 0] > 200) & (pixels[..., 1] < 60) & (pixels[..., 2] < 60)
    assert red.sum() > 20                                        # the worst layers are circled in red


def test_float32_reference_path_is_exact(tmp_path):
    rknn = built(three_convs(tmp_path / "m.onnx"), float_dtype="float32")
    assert rknn.accuracy_analysis(inputs=[str(sample(tmp_path))], output_dir=str(tmp_path / "s")) == 0
    records = json.loads((tmp_path / "s" / "error_analysis.json").read_text())
    stored = [r for r in records if r["tensor"] not in ("c1", "c2")]   # Conv outputs inside ConvRelu: not stored
    assert [r["tensor"] for r in stored] == ["x", "r1", "r2", "y"]
    assert all(r["entire_cos"] is None for r in records if r not in stored)
    for r in stored:
        assert r["entire_cos"] == pytest.approx(1.0, abs=1e-6) and r["entire_euc"] == pytest.approx(0.0, abs=1e-4)


def test_fp16_overflow_is_the_worst_layer(tmp_path):
    """Seed 002 §7.1.1: a tensor beyond ±65504 shows up as an abnormal value in the fp16 analysis."""
    rknn = built(three_convs(tmp_path / "m.onnx", overflow=True))
    model = rknn._model
    result = run_accuracy_analysis(model, [np.load(sample(tmp_path))], str(tmp_path / "s"), rknn._cfg())
    assert np.abs(result.golden["c2"]).max() > 65504
    worst = result.worst(1)[0]
    assert worst.tensor in ("c2", "r2")
    clean = {r.tensor: r for r in result.rows}["r1"]
    assert clean.single_cos > 0.999


def test_arrays_and_nhwc_arrays_are_accepted(tmp_path):
    rknn = built(three_convs(tmp_path / "m.onnx"))
    x = np.load(sample(tmp_path))
    a = run_accuracy_analysis(rknn._model, [x], str(tmp_path / "a"), rknn._cfg())
    b = run_accuracy_analysis(rknn._model, [x.transpose(0, 2, 3, 1)], str(tmp_path / "b"), rknn._cfg())
    assert [r.entire_cos for r in a.rows] == [r.entire_cos for r in b.rows]
    assert rknn.accuracy_analysis(inputs=[x[:, :2]], output_dir=str(tmp_path / "c")) == -1


def test_toolkit1_dataset_file_form(tmp_path):
    rknn = built(three_convs(tmp_path / "m.onnx"))
    first, second = sample(tmp_path, 1), sample(tmp_path, 2)
    dataset = tmp_path / "dataset.txt"
    dataset.write_text(f"{first.name}\n{second.name}\n")
    assert rknn.accuracy_analysis(inputs=str(dataset), output_dir=str(tmp_path / "t1"), calc_qnt_error=True) == 0
    golden_x = json.loads((tmp_path / "t1" / "error_analysis.json").read_text())
    assert golden_x[0]["tensor"] == "x"
    mapping = dict(line.split() for line in (tmp_path / "t1" / "map_name_to_file.txt").read_text().splitlines())
    assert mapping["x"] == "x.txt"
    assert np.array_equal(np.load(tmp_path / "t1" / "golden" / "npy" / "x.npy"), np.load(first))   # first line used


def test_wrong_input_count_is_an_error(tmp_path):
    rknn = built(three_convs(tmp_path / "m.onnx"))
    x = sample(tmp_path)
    assert rknn.accuracy_analysis(inputs=[str(x), str(x)], output_dir=str(tmp_path / "s")) == -1


def test_after_load_rknn_explains_source_model_is_needed(tmp_path, capsys):
    rknn = built(three_convs(tmp_path / "m.onnx"))
    assert rknn.export_rknn(str(tmp_path / "m.rknn")) == 0
    loaded = RKNN()
    assert loaded.load_rknn(str(tmp_path / "m.rknn")) == 0
    assert loaded.accuracy_analysis(inputs=[str(sample(tmp_path))], output_dir=str(tmp_path / "s")) == -1
    captured = capsys.readouterr()
    message = captured.out + captured.err
    assert re.search(r"E accuracy_analysis: .*original model.*load_rknn", message), message
    assert not (tmp_path / "s").exists()


def test_worst_orders_nan_first_and_skips_inputs():
    rows = [LayerError("Input", "x", 0.5, 1.0, 0.5, 1.0), LayerError("Conv", "a", 0.99, 1, 0.99, 1),
            LayerError("Conv", "b", 0.9, 1, float("nan"), 1), LayerError("Relu", "c", 0.9, 1, 0.95, 1),
            LayerError("Reshape", "d")]
    assert [r.tensor for r in AnalysisResult(rows=rows).worst(3)] == ["b", "c", "a"]


# --------------------------------------------------------------------- quantized builds
def quantized(model_path: Path, tmp_path: Path, **config) -> RKNN:
    dataset = tmp_path / "dataset.txt"
    dataset.write_text("\n".join(sample(tmp_path, s).name for s in range(1, 5)) + "\n")
    rknn = RKNN()
    assert rknn.config(target_platform="rk3588", **config) == 0
    assert rknn.load_onnx(str(model_path)) == 0
    assert rknn.build(do_quantization=True, dataset=str(dataset)) == 0
    return rknn


@pytest.mark.parametrize("method", ["channel", "layer"])
def test_quantized_analysis_finds_the_hard_layer(tmp_path, method):
    rknn = quantized(three_convs(tmp_path / "m.onnx", outlier=200.0), tmp_path, quantized_method=method)
    result = run_accuracy_analysis(rknn._model, [np.load(sample(tmp_path, 1))], str(tmp_path / "s"), rknn._cfg())
    rows = {r.tensor: r for r in result.rows}
    worst = result.worst(1)[0]
    assert worst.tensor in ("c2", "r2"), [(r.tensor, r.single_cos) for r in result.worst(5)]
    assert worst.single_cos < 0.9
    assert rows["r1"].single_cos > 0.99                         # the layer before it quantizes well
    assert rows["y"].single_cos > worst.single_cos                # the error is conv2's own, not conv3's
    text = (tmp_path / "s" / "error_analysis.txt").read_text()
    assert len(re.findall(CELL, rows_of(text)["y"])) == 2


def test_quantized_analysis_without_outlier_is_clean(tmp_path):
    rknn = quantized(three_convs(tmp_path / "m.onnx"), tmp_path)
    result = run_accuracy_analysis(rknn._model, [np.load(sample(tmp_path, 1))], str(tmp_path / "s"), rknn._cfg())
    assert all(r.single_cos > 0.98 for r in result.rows if r.single_cos is not None), \
        [(r.tensor, r.single_cos) for r in result.worst(5)]


# --------------------------------------------------------------------- lopsided layers (issue: shared biases)
def _result(rows: list[tuple[str, str, float, float | None]], inputs: dict[str, list[str]]) -> AnalysisResult:
    return AnalysisResult(rows=[LayerError(op, t, entire, None, single, None) for op, t, entire, single in rows],
                          layer_inputs=inputs)


def test_first_lopsided_layer_is_right_alone_and_fed_right_inputs():
    result = _result([("Input", "x", 1.0, 1.0), ("Conv", "a", 0.9995, 0.9999), ("Conv", "b_pre", None, None),
                      ("Relu", "b", 0.98, 0.99999), ("Conv", "c", 0.95, 0.99999)],
                     {"a": ["x"], "b_pre": ["a"], "b": ["b_pre"], "c": ["b"]})
    row, inputs = result.first_lopsided()
    assert row.tensor == "b"                           # its fused Conv is looked through to 'a'
    assert [r.tensor for r in inputs] == ["a"]
    # 'c' also drops, but its input 'b' is already wrong: the error came from upstream, not from 'c'
    result.rows[3].entire_cos = 0.995
    assert result.first_lopsided() is None


def test_accuracy_analysis_prints_the_lopsided_summary(tmp_path, capsys, monkeypatch):
    rknn = built(three_convs(tmp_path / "m.onnx"))
    assert rknn.accuracy_analysis(inputs=[str(sample(tmp_path))], output_dir=str(tmp_path / "a")) == 0
    assert "I accuracy_analysis: no layer loses accuracy only in the whole model" in capsys.readouterr().out
    from openrknn.analysis import accuracy
    real = accuracy._single_layer_errors

    def single_better_than_entire(model, golden_graph, golden, result, *rest):
        real(model, golden_graph, golden, result, *rest)
        for row in result.rows:                        # as if 'r2' were right alone but wrong in the model
            if row.tensor == "r2":
                row.entire_cos, row.single_cos = 0.9, 0.99999
    monkeypatch.setattr(accuracy, "_single_layer_errors", single_better_than_entire)
    assert rknn.accuracy_analysis(inputs=[str(sample(tmp_path))], output_dir=str(tmp_path / "b")) == 0
    line = next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("W accuracy_analysis:"))
    assert "'r2'" in line and "single cos 0.99999" in line and "entire cos 0.90000" in line


def _conv_identity_conv(path: Path) -> Path:
    """x → Conv → Identity → Conv → y: the Identity is a layer of its own (it fuses nothing)."""
    import onnx
    from onnx import helper, numpy_helper
    rng = np.random.default_rng(3)
    w1 = numpy_helper.from_array(rng.normal(0, 0.3, (4, 3, 3, 3)).astype(np.float32), "w1")
    w2 = numpy_helper.from_array(rng.normal(0, 0.3, (4, 4, 3, 3)).astype(np.float32), "w2")
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
         helper.make_node("Identity", ["c1"], ["i1"], name="ident"),
         helper.make_node("Conv", ["i1", "w2"], ["y"], name="conv2", pads=[1, 1, 1, 1])],
        "cic", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 3, 16, 16])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 4, 16, 16])], [w1, w2])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)
    return path


def test_identity_between_convs_keeps_its_simulator_value(tmp_path):
    """An Identity copies its integer input: it is not a fused activation, its row has values."""
    rknn = quantized(_conv_identity_conv(tmp_path / "m.onnx"), tmp_path, optimization_level=0)
    result = run_accuracy_analysis(rknn._model, [np.load(sample(tmp_path, 1))], str(tmp_path / "s"), rknn._cfg())
    rows = {r.tensor: r for r in result.rows}
    for tensor in ("c1", "i1", "y"):
        assert rows[tensor].entire_cos is not None and rows[tensor].entire_cos > 0.98, (tensor, rows[tensor])
        assert rows[tensor].single_cos is not None, (tensor, rows[tensor])
