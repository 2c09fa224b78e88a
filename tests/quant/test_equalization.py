"""Cross-layer equalization of Conv → Relu → depthwise Conv: lossless in float, better in int8, and
accuracy analysis compares like with like (the golden graph is equalized too)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import onnx
from onnx import TensorProto, helper, numpy_helper

from openrknn.quant.fold import depthwise_pairs, equalize_depthwise
from rknn.api import RKNN
from tests.helpers import cosine, reference_session

GAINS = np.array([40.0, 0.05, 1.0, 8.0, 0.2, 3.0, 0.5, 20.0], np.float32)   # very unequal channel ranges


def unequal_channels(path: Path) -> Path:
    """Conv(3→8, 1×1, channel gains spread ×800) → Relu → depthwise 3×3 (gains undone) → Conv(8→4)."""
    rng = np.random.default_rng(0)
    w1 = rng.normal(0, 0.5, (8, 3, 1, 1)).astype(np.float32) * GAINS[:, None, None, None]
    dw = rng.normal(0, 0.5, (8, 1, 3, 3)).astype(np.float32) / GAINS[:, None, None, None]
    w3 = rng.normal(0, 0.5, (4, 8, 1, 1)).astype(np.float32)
    inits = [numpy_helper.from_array(a, n) for a, n in ((w1, "w1"), (dw, "dw_w"), (w3, "w3"),
                                                       (np.zeros(8, np.float32) + 0.1, "b1"))]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="pw1"),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("Conv", ["r1", "dw_w"], ["d"], name="dw", pads=[1, 1, 1, 1], group=8),
             helper.make_node("Conv", ["d", "w3"], ["y"], name="pw2")]
    graph = helper.make_graph(nodes, "eq", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 12, 12])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 12, 12])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)
    return path


def samples(count: int, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.uniform(-1, 1, (1, 3, 12, 12)).astype(np.float32) for _ in range(count)]


def run(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    return reference_session(model.SerializeToString()).run(None, {"x": x})[0]


def test_equalization_rescales_and_keeps_the_float_function(tmp_path):
    model = onnx.load(unequal_channels(tmp_path / "m.onnx"))
    assert [(a.name, b.name) for a, b, _ in depthwise_pairs(model)] == [("pw1", "dw")]
    before = onnx.ModelProto()
    before.CopyFrom(model)
    assert equalize_depthwise(model, [[x] for x in samples(4, 1)]) == 1
    w_before = numpy_helper.to_array(before.graph.initializer[0])
    w_after = numpy_helper.to_array(model.graph.initializer[0])
    ratio = np.abs(w_after).reshape(8, -1).max(1) / np.abs(w_before).reshape(8, -1).max(1)
    assert ratio.max() / ratio.min() > 10          # small-range channels were scaled up
    x = samples(1, 9)[0]
    np.testing.assert_allclose(run(model, x), run(before, x), rtol=1e-4, atol=1e-4)
    assert equalize_depthwise(model, [[x] for x in samples(4, 1)], method="layer") == 0


def test_equalized_build_is_more_accurate_and_analysis_sees_no_false_error(tmp_path):
    path = unequal_channels(tmp_path / "m.onnx")
    lines = []
    for i, x in enumerate(samples(8, 1)):
        np.save(tmp_path / f"s{i}.npy", x)
        lines.append(f"s{i}.npy")
    (tmp_path / "dataset.txt").write_text("\n".join(lines) + "\n")
    reference = reference_session(str(path))
    x = samples(1, 9)[0]
    expected = reference.run(None, {"x": x})[0]
    scores = {}
    for method in ("layer", "channel"):            # 'layer' leaves the pair alone
        rknn = RKNN()
        assert rknn.config(target_platform="rk3588", quantized_method=method) == 0
        assert rknn.load_onnx(str(path)) == 0
        assert rknn.build(do_quantization=True, dataset=str(tmp_path / "dataset.txt")) == 0
        assert rknn.init_runtime() == 0
        scores[method] = cosine(rknn.inference(inputs=[x], data_format="nchw")[0], expected)
        if method == "channel":
            np.save(tmp_path / "x.npy", x)
            result_dir = tmp_path / "snap"
            assert rknn.accuracy_analysis(inputs=[str(tmp_path / "x.npy")], output_dir=str(result_dir)) == 0
            table = (result_dir / "error_analysis.txt").read_text()
            relu_row = next(line for line in table.splitlines() if line.startswith("[Relu] r1"))
            single_cos = float(relu_row.split("|")[1].split()[-1])
            assert single_cos > 0.999, relu_row      # equalized channels are not reported as error
    assert scores["channel"] > 0.999 and scores["channel"] > scores["layer"]


def two_channels(path: Path) -> onnx.ModelProto:
    """x (2 channels) → Conv 1×1 (identity) → Relu → depthwise 3×3: the pair sees x's channels as they are."""
    inits = [numpy_helper.from_array(np.eye(2, dtype=np.float32).reshape(2, 2, 1, 1), "w1"),
             numpy_helper.from_array(np.full((2, 1, 3, 3), 0.1, np.float32), "dw_w")]
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], name="pw"),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu"),
             helper.make_node("Conv", ["r1", "dw_w"], ["y"], name="dw", pads=[1, 1, 1, 1], group=2)]
    graph = helper.make_graph(nodes, "eq2", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 8, 8])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    onnx.save(model, path)
    return model


def _pictures(narrow_peaks: list[float]) -> list[list[np.ndarray]]:
    """Channel 0 spans 0…10 in every sample; channel 1 peaks at the given value."""
    rng = np.random.default_rng(3)
    out = []
    for peak in narrow_peaks:
        x = rng.uniform(0, 1, (1, 2, 8, 8)).astype(np.float32)
        x[0, 0] *= 10 / x[0, 0].max()
        x[0, 1] *= peak / x[0, 1].max()
        out.append([x])
    return out


def test_rescale_kept_only_where_held_out_samples_agree(tmp_path, capsys):
    from openrknn import log
    log.configure(verbose=False)
    # every third sample is held out; there the narrow channel agrees with what the others showed
    model = two_channels(tmp_path / "a.onnx")
    assert equalize_depthwise(model, _pictures([0.1, 0.1, 0.1])) == 1
    assert "rescaled 1 of 1 Conv→depthwise pair(s)" in capsys.readouterr().out
    # the held-out sample shows the narrow channel at 20× its calibration peak: raising that channel
    # to the wide one's range would clip it, so the pair is left alone and the log says so
    model = two_channels(tmp_path / "b.onnx")
    before = [numpy_helper.to_array(i).copy() for i in model.graph.initializer]
    assert equalize_depthwise(model, _pictures([0.1, 0.1, 2.0])) == 0
    assert all(np.array_equal(a, numpy_helper.to_array(b)) for a, b in zip(before, model.graph.initializer))
    line = next(ln for ln in capsys.readouterr().out.splitlines() if "depthwise equalization" in ln)
    assert line.startswith("I quantize:") and "rescaled 0 of 1" in line and "kept 1 as they were" in line and "r1" in line


def test_headroom_leaves_room_above_the_calibration_range(tmp_path):
    model = two_channels(tmp_path / "m.onnx")
    assert equalize_depthwise(model, _pictures([0.1, 0.1, 0.1])) == 1
    w1 = numpy_helper.to_array(next(i for i in model.graph.initializer if i.name == "w1"))
    gain = w1[1, 1, 0, 0]                          # the narrow channel's factor 1/s
    from openrknn.quant.fold import HEADROOM
    assert HEADROOM > 1 and gain == pytest.approx(10 / 0.1 / HEADROOM, rel=1e-3)
