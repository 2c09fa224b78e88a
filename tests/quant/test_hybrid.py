"""Hybrid quantization (step1 → edit cfg → step2), custom_hybrid, proposal and build(auto_hybrid=True)."""
from __future__ import annotations

import numpy as np
import pytest
import yaml

from openrknn.analysis.accuracy import cosine
from rknn.api import RKNN
import onnx
from onnx import TensorProto, helper, numpy_helper

from tests.helpers import three_convs, reference_session

CONV2_OUT = "c2"   # tensor written by conv2, the layer whose weights are hard to quantize
CONV2_LAYER_OUT = "r2"   # what the conv2 layer (Conv + fused Relu) stores: step1 names layers by it


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    """Model with a hard-to-quantize conv2, a 4-sample dataset, and the current folder set to tmp_path."""
    three_convs(tmp_path / "net.onnx", outlier=200.0)
    rng = np.random.default_rng(3)
    lines = []
    for i in range(4):
        np.save(tmp_path / f"x{i}.npy", rng.uniform(0, 1, (1, 3, 16, 16)).astype(np.float32))
        lines.append(f"x{i}.npy")
    (tmp_path / "dataset.txt").write_text("\n".join(lines) + "\n")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _rknn(workdir, **config) -> RKNN:
    rknn = RKNN()
    assert rknn.config(target_platform="rk3588", **config) == 0
    assert rknn.load_onnx(str(workdir / "net.onnx")) == 0
    return rknn


def _output_cosine(rknn: RKNN, workdir) -> float:
    x = np.load(workdir / "x0.npy")
    golden = reference_session(str(workdir / "net.onnx")).run(None, {"x": x})[0]
    assert rknn.init_runtime() == 0
    return cosine(golden, rknn.inference(inputs=[x], data_format="nchw")[0])


def test_step1_edit_step2_beats_plain_int8(workdir):
    plain = _rknn(workdir)
    assert plain.build(do_quantization=True, dataset="dataset.txt") == 0
    plain_cos = _output_cosine(plain, workdir)

    step1 = _rknn(workdir)
    assert step1.hybrid_quantization_step1(dataset="dataset.txt") == 0
    for name in ("net.model", "net.data", "net.quantization.cfg"):
        assert (workdir / name).is_file()
    text = (workdir / "net.quantization.cfg").read_text()
    assert text.startswith("%YAML 1.2") and "custom_quantize_layers" in text
    cfg = yaml.safe_load(text)
    assert CONV2_OUT in cfg["quantize_parameters"] or "r2" in cfg["quantize_parameters"]

    # an unedited config reproduces the plain build exactly
    same = RKNN()
    assert same.hybrid_quantization_step2("net.model", "net.data", "net.quantization.cfg") == 0
    assert _output_cosine(same, workdir) == pytest.approx(plain_cos, abs=1e-7)

    cfg["custom_quantize_layers"] = {CONV2_OUT: "float16"}
    (workdir / "net.quantization.cfg").write_text(yaml.safe_dump(cfg))
    hybrid = RKNN()
    assert hybrid.hybrid_quantization_step2("net.model", "net.data", "net.quantization.cfg") == 0
    hybrid_cos = _output_cosine(hybrid, workdir)
    assert hybrid_cos > plain_cos + 0.01 and hybrid_cos > 0.99, (plain_cos, hybrid_cos)
    assert hybrid.export_rknn(str(workdir / "hybrid.rknn")) == 0


def test_int16_layer_in_an_8bit_model(workdir):
    """conv2 moved to int16 (Toolkit 1 spelling accepted): 16-bit weights and output, the int8
    conv3 reads it requantized to 8 bits; as accurate as float16 for this layer, and it round-trips."""
    plain = _rknn(workdir)
    assert plain.build(do_quantization=True, dataset="dataset.txt") == 0
    plain_cos = _output_cosine(plain, workdir)
    assert _rknn(workdir).hybrid_quantization_step1(dataset="dataset.txt") == 0
    cfg = yaml.safe_load((workdir / "net.quantization.cfg").read_text())
    cfg["custom_quantize_layers"] = {CONV2_OUT: "dynamic_fixed_point-i16"}
    (workdir / "net.quantization.cfg").write_text(yaml.safe_dump(cfg))
    hybrid = RKNN()
    assert hybrid.hybrid_quantization_step2("net.model", "net.data", "net.quantization.cfg") == 0
    model = hybrid._model
    assert model.quant_params["w2"]["dtype"] == "int16" and model.quant_params["w3"]["dtype"] == "int8"
    assert model.tensor_dtypes["r2"] == "int16" and model.tensor_dtypes["r1"] == "int8"
    hybrid_cos = _output_cosine(hybrid, workdir)
    assert hybrid_cos > plain_cos + 0.01 and hybrid_cos > 0.99, (plain_cos, hybrid_cos)

    assert hybrid.export_rknn(str(workdir / "i16.rknn")) == 0
    x = np.load(workdir / "x0.npy")
    loaded = RKNN()
    assert loaded.load_rknn(str(workdir / "i16.rknn")) == 0 and loaded.init_runtime() == 0
    np.testing.assert_array_equal(loaded.inference(inputs=[x], data_format="nchw")[0],
                                  hybrid.inference(inputs=[x], data_format="nchw")[0])
    cycles = {}
    for label, rknn in (("int8", plain), ("int16", hybrid)):   # 16-bit MACs run at a quarter of the int8 rate
        assert rknn.init_runtime(perf_debug=True) == 0
        layers = rknn.eval_perf(is_print=False)["layers"].values()
        cycles[label] = {v["name"]: v["npu_cycles"] for v in layers}
    assert cycles["int16"]["conv2"] > cycles["int8"]["conv2"], cycles
    assert cycles["int16"]["conv1"] == cycles["int8"]["conv1"]


def test_int16_layers_need_an_8bit_model(workdir, capsys):
    rknn = RKNN()
    assert rknn.config(target_platform="rv1106", quantized_dtype="w16a16i") == 0
    assert rknn.load_onnx(str(workdir / "net.onnx")) == 0
    assert rknn.hybrid_quantization_step1(dataset="dataset.txt") == 0
    cfg = yaml.safe_load((workdir / "net.quantization.cfg").read_text())
    cfg["custom_quantize_layers"] = {CONV2_OUT: "int16"}
    (workdir / "net.quantization.cfg").write_text(yaml.safe_dump(cfg))
    assert RKNN().hybrid_quantization_step2("net.model", "net.data", "net.quantization.cfg") == -1
    out = capsys.readouterr().out
    assert "E hybrid_quantization_step2" in out and "need an 8-bit model" in out


def test_edited_range_is_used(workdir):
    assert _rknn(workdir).hybrid_quantization_step1(dataset="dataset.txt") == 0
    cfg = yaml.safe_load((workdir / "net.quantization.cfg").read_text())
    name = next(n for n, p in cfg["quantize_parameters"].items() if p.get("dtype") == "int8" and p.get("qmethod") == "layer")
    cfg["quantize_parameters"][name]["min"] = [-100.0]
    cfg["quantize_parameters"][name]["max"] = [100.0]
    (workdir / "net.quantization.cfg").write_text(yaml.safe_dump(cfg))
    rknn = RKNN()
    assert rknn.hybrid_quantization_step2("net.model", "net.data", "net.quantization.cfg") == 0
    scale = rknn._model.quant_params[name]["scale"][0]
    assert scale == pytest.approx(200.0 / 255.0, rel=1e-4)


def test_toolkit1_names_and_bad_configs(workdir, capsys):
    assert _rknn(workdir).hybrid_quantization_step1(dataset="dataset.txt") == 0
    cfg = yaml.safe_load((workdir / "net.quantization.cfg").read_text())
    del cfg["custom_quantize_layers"]
    cfg["customized_quantize_layers"] = {"conv2": "float32"}    # Toolkit 1 spelling, layer name
    (workdir / "t1.cfg").write_text(yaml.safe_dump(cfg))
    rknn = RKNN()
    assert rknn.hybrid_quantization_step2("net.model", "net.data", "t1.cfg") == 0
    assert "conv2" in rknn._model.metadata["quantization"]["float_layers"]

    cfg["customized_quantize_layers"] = {"no_such_tensor": "float16"}
    (workdir / "bad.cfg").write_text(yaml.safe_dump(cfg))
    assert RKNN().hybrid_quantization_step2("net.model", "net.data", "bad.cfg") == -1
    assert "no_such_tensor" in capsys.readouterr().out
    cfg["customized_quantize_layers"] = {CONV2_OUT: "bfloat16"}
    (workdir / "bad.cfg").write_text(yaml.safe_dump(cfg))
    assert RKNN().hybrid_quantization_step2("net.model", "net.data", "bad.cfg") == -1
    assert "bfloat16" in capsys.readouterr().out
    assert RKNN().hybrid_quantization_step2("missing.model", "net.data", "net.quantization.cfg") == -1


def test_custom_hybrid_and_proposal(workdir):
    rknn = _rknn(workdir)
    assert rknn.hybrid_quantization_step1(dataset="dataset.txt", custom_hybrid=[["r1", "c2"]], proposal=True) == 0
    cfg = yaml.safe_load((workdir / "net.quantization.cfg").read_text())
    assert cfg["custom_quantize_layers"].get(CONV2_LAYER_OUT) == "float16"
    assert "proposal" in (workdir / "net.quantization.cfg").read_text()
    assert _rknn(workdir).hybrid_quantization_step1(dataset="dataset.txt", custom_hybrid=[["r1", "nowhere"]]) == -1


def test_auto_hybrid_moves_only_the_hard_layer(workdir, capsys):
    rknn = _rknn(workdir, auto_hybrid_cos_thresh=0.99)
    assert rknn.build(do_quantization=True, dataset="dataset.txt", auto_hybrid=True) == 0
    moved = rknn._model.metadata["auto_hybrid"]["float_layers"]
    assert moved == ["conv2"], moved
    assert _output_cosine(rknn, workdir) >= 0.99
    assert "auto_hybrid: 1 layer(s) moved" in capsys.readouterr().out


def test_auto_hybrid_uses_int16_where_the_npu_has_no_float16(workdir, capsys):
    rknn = RKNN()
    assert rknn.config(target_platform="rv1106", auto_hybrid_cos_thresh=0.99) == 0
    assert rknn.load_onnx(str(workdir / "net.onnx")) == 0
    assert rknn.build(do_quantization=True, dataset="dataset.txt", auto_hybrid=True) == 0
    facts = rknn._model.metadata["auto_hybrid"]
    assert facts["precision"] == "int16" and facts["float_layers"] == ["conv2"], facts
    assert rknn._model.quant_params["w2"]["dtype"] == "int16"
    assert _output_cosine(rknn, workdir) >= 0.99
    assert "moved to int16 ['conv2']" in capsys.readouterr().out


def test_auto_hybrid_judges_one_value_outputs_across_samples():
    from openrknn.analysis.mixed_precision import worst_output_cosines
    golden = [[np.array([[0.1]]), np.arange(32.0)], [np.array([[0.9]]), np.arange(32.0) + 1]]
    flat = [[np.array([[0.5]]), np.arange(32.0)], [np.array([[0.5]]), np.arange(32.0) + 1]]
    score, big = worst_output_cosines(golden, flat)
    assert score < 0.8          # per sample the cosine of one number is 1: stacked it shows the loss
    assert big == pytest.approx(1.0)
    noisy = [[np.array([[0.1]]), -np.arange(32.0)], [np.array([[0.9]]), np.arange(32.0) + 1]]
    assert worst_output_cosines(golden, noisy)[1] == pytest.approx(-1.0)   # the worst sample counts


def test_auto_hybrid_can_reach_the_all_float16_model(workdir):
    """Every layer that stores a quantized tensor is a candidate, so the search can reach the
    all-float16 model: a threshold near float16's own accuracy is met."""
    from openrknn.analysis.mixed_precision import _layer_of_tensor, output_ranking
    plain = _rknn(workdir)
    assert plain.build(do_quantization=True, dataset="dataset.txt") == 0
    model = plain._model
    weights = {i.name for i in model.graph.graph.initializer}
    stored = [t for t in model.quant_params if t not in weights and t in _layer_of_tensor(model)]
    ranked = set(output_ranking(model, [[np.load(workdir / "x0.npy")]]))
    assert {_layer_of_tensor(model)[t] for t in stored} <= ranked
    rknn = _rknn(workdir, auto_hybrid_cos_thresh=0.99999)
    assert rknn.build(do_quantization=True, dataset="dataset.txt", auto_hybrid=True) == 0
    assert rknn._model.metadata["auto_hybrid"]["met"], rknn._model.metadata["auto_hybrid"]
    assert _output_cosine(rknn, workdir) >= 0.9999


def test_config_is_written_in_the_documented_layout(workdir):
    """4-space indent and block lists, as seed 002 §6.3 shows the file."""
    rknn = _rknn(workdir)
    assert rknn.hybrid_quantization_step1(dataset="dataset.txt") == 0
    text = (workdir / "net.quantization.cfg").read_text()
    lines = text.splitlines()
    at = lines.index("quantize_parameters:")
    assert lines[at + 1].startswith("    ") and not lines[at + 1].startswith("     ")
    assert lines[at + 2].startswith("        qtype: ")
    min_line = next(i for i, line in enumerate(lines) if line.strip() == "min:")
    assert lines[min_line + 1].strip().startswith("- ") and "[" not in text.split("quantize_parameters:")[1]


def _hardswish_net(path) -> None:
    """x → conv1+relu → conv2 → hard-swish as exported (x·Clip(x+3,0,6)/6) → conv3 → y.

    conv2 has a large bias (up to ±40) and reads an outlier channel, so its int8 weights are poor;
    its output ``c2`` is inside the hard-swish layer, which stores ``hs``."""
    rng = np.random.default_rng(5)
    w1 = rng.normal(0, 0.4, (8, 3, 3, 3)).astype(np.float32)
    w2 = rng.normal(0, 0.05, (8, 8, 3, 3)).astype(np.float32)
    w2[:, 7] = 5.0
    b2 = rng.uniform(-40, 40, 8).astype(np.float32)
    w3 = rng.normal(0, 0.3, (4, 8, 1, 1)).astype(np.float32)
    arrays = {"w1": w1, "b1": np.zeros(8, np.float32), "w2": w2, "b2": b2, "w3": w3,
              "three": np.array(3.0, np.float32), "zero": np.array(0.0, np.float32),
              "six": np.array(6.0, np.float32)}
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["c2", "three"], ["a"]),
             helper.make_node("Clip", ["a", "zero", "six"], ["cl"]),
             helper.make_node("Mul", ["c2", "cl"], ["m"]),
             helper.make_node("Div", ["m", "six"], ["hs"]),
             helper.make_node("Conv", ["hs", "w3"], ["y"], name="conv3")]
    graph = helper.make_graph(nodes, "hs", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 16, 16])],
                              [numpy_helper.from_array(a, n) for n, a in arrays.items()])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)


def test_int16_applies_to_the_whole_npu_layer(workdir):
    """Naming a Conv whose hard-swish follows makes the whole layer int16: the stored hard-swish
    output too (not only the internal conv output), and the bias stays exact (added in float: in
    int32 units of two 16-bit scales a ±40 bias would saturate)."""
    _hardswish_net(workdir / "net.onnx")
    plain = _rknn(workdir)
    assert plain.build(do_quantization=True, dataset="dataset.txt") == 0
    plain_cos = _output_cosine(plain, workdir)
    assert _rknn(workdir).hybrid_quantization_step1(dataset="dataset.txt") == 0
    cfg = yaml.safe_load((workdir / "net.quantization.cfg").read_text())
    cfg["custom_quantize_layers"] = {"r1": "int16", "c2": "int16"}
    (workdir / "net.quantization.cfg").write_text(yaml.safe_dump(cfg))
    hybrid = RKNN()
    assert hybrid.hybrid_quantization_step2("net.model", "net.data", "net.quantization.cfg") == 0
    model = hybrid._model
    assert model.tensor_dtypes["hs"] == "int16" and model.quant_params["w2"]["dtype"] == "int16"
    hybrid_cos = _output_cosine(hybrid, workdir)
    assert hybrid_cos > plain_cos and hybrid_cos > 0.99999, (plain_cos, hybrid_cos)
