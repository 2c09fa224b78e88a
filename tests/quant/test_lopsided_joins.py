"""A build warns when one tensor joins inputs whose ranges differ by more than 100× (YOLOv8's stock
head concatenates boxes 0–320 with class scores 0–1; one int8 scale turns the scores into 0)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from rknn.api import RKNN


def boxes_and_scores(path: Path, box_gain: float) -> Path:
    """Conv → (×box_gain boxes, Sigmoid scores) → Concat → Conv: the Concat is stored int8."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.normal(0, 0.5, (4, 3, 1, 1)).astype(np.float32), "w1"),
             numpy_helper.from_array(np.float32(box_gain), "gain"),
             numpy_helper.from_array(rng.normal(0, 0.5, (4, 8, 1, 1)).astype(np.float32), "w2")]
    nodes = [helper.make_node("Conv", ["x", "w1"], ["feat"]),
             helper.make_node("Relu", ["feat"], ["pos"]),
             helper.make_node("Mul", ["pos", "gain"], ["boxes"]),
             helper.make_node("Sigmoid", ["feat"], ["scores"]),
             helper.make_node("Concat", ["boxes", "scores"], ["joined"], name="head_concat", axis=1),
             helper.make_node("Conv", ["joined", "w2"], ["y"])]
    graph = helper.make_graph(nodes, "join", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)
    return path


def _build(tmp_path: Path, box_gain: float) -> None:
    path = boxes_and_scores(tmp_path / f"m{box_gain}.onnx", box_gain)
    rng = np.random.default_rng(1)
    for i in range(3):
        np.save(tmp_path / f"s{i}.npy", rng.uniform(0, 1, (1, 3, 8, 8)).astype(np.float32))
    (tmp_path / "ds.txt").write_text("".join(f"s{i}.npy\n" for i in range(3)))
    rknn = RKNN()
    assert rknn.config(target_platform="rk3588") == 0
    assert rknn.load_onnx(str(path)) == 0
    assert rknn.build(do_quantization=True, dataset=str(tmp_path / "ds.txt")) == 0
    rknn.release()


def test_concat_of_boxes_and_scores_warns_with_node_ranges_and_advice(tmp_path, capsys):
    _build(tmp_path, 320.0)
    lines = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("W build: Concat")]
    assert len(lines) == 1, lines
    line = lines[0]
    assert "'head_concat'" in line and "'boxes'" in line and "'scores'" in line
    assert "into one int8 tensor" in line and "hybrid quantization" in line and "outputs=" in line


def test_concat_of_similar_ranges_is_quiet(tmp_path, capsys):
    _build(tmp_path, 2.0)
    assert "joins inputs whose ranges differ" not in capsys.readouterr().out
