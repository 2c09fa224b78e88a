"""eval_perf / eval_memory through the RKNN facade (init_runtime options reach the cost model)."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from rknn.api import RKNN


def convs(path, channels: int = 64, size: int = 56) -> str:
    rng = np.random.default_rng(0)
    inits, nodes, x = [], [], "x"
    for i, cin in enumerate((3, channels, channels)):
        inits.append(numpy_helper.from_array(rng.normal(0, 0.1, (channels, cin, 3, 3)).astype(np.float32), f"w{i}"))
        nodes += [helper.make_node("Conv", [x, f"w{i}"], [f"c{i}"], name=f"conv{i}", pads=[1, 1, 1, 1]),
                  helper.make_node("Relu", [f"c{i}"], [f"r{i}"], name=f"relu{i}")]
        x = f"r{i}"
    graph = helper.make_graph(nodes, "convs", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, size, size])],
                              [helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, channels, size, size])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)
    return str(path)


def runtime(tmp_path, platform: str = "rk3588", **config) -> RKNN:
    rknn = RKNN()
    assert rknn.config(target_platform=platform, **config) == 0
    assert rknn.load_onnx(convs(tmp_path / "m.onnx")) == 0
    assert rknn.build(do_quantization=False) == 0
    return rknn


def test_eval_perf_and_memory_through_the_facade(tmp_path, capsys):
    rknn = runtime(tmp_path)
    assert rknn.init_runtime(perf_debug=True, eval_mem=True) == 0
    perf = rknn.eval_perf()
    text = capsys.readouterr().out
    assert "Network Layer Information Table" in text and f"Per Frame Time(us): {perf['total_time']}" in text
    assert {0, 1, 2, 3, 4} <= set(perf["layers"]) and perf["layers"][1]["operation"] == "ConvRelu"
    memory = rknn.eval_memory()
    assert set(memory) == {"weight_memory", "internal_memory", "other_memory", "total_memory"}
    assert "Memory Profile Info Dump" in capsys.readouterr().out


def test_core_mask_reaches_the_estimate(tmp_path):
    rknn = runtime(tmp_path)
    assert rknn.init_runtime(core_mask=RKNN.NPU_CORE_0) == 0
    one = rknn.eval_perf(is_print=False)["total_time"]
    assert rknn.init_runtime(core_mask=RKNN.NPU_CORE_0_1_2) == 0
    three = rknn.eval_perf(is_print=False)["total_time"]
    assert three < one


def test_single_core_mode_model_runs_on_one_core(tmp_path, capsys):
    single = runtime(tmp_path, single_core_mode=True)
    assert single.export_rknn(str(tmp_path / "single.rknn")) == 0
    assert single.init_runtime(core_mask=RKNN.NPU_CORE_0_1_2) == 0
    assert "single_core_mode" in capsys.readouterr().out
    estimate = single.eval_perf(is_print=False)["total_time"]
    plain = runtime(tmp_path)
    assert plain.init_runtime(core_mask=RKNN.NPU_CORE_0) == 0
    assert estimate == plain.eval_perf(is_print=False)["total_time"]
    reloaded = RKNN()
    assert reloaded.load_rknn(str(tmp_path / "single.rknn")) == 0   # the flag travels in the file
    assert reloaded.init_runtime(core_mask=RKNN.NPU_CORE_0_1_2) == 0
    assert reloaded.eval_perf(is_print=False)["total_time"] == estimate


def test_op_target_cpu_layer_costed_on_cpu(tmp_path):
    rknn = runtime(tmp_path, op_target={"conv1": "cpu"})
    assert rknn.init_runtime(perf_debug=True) == 0
    layers = {v["name"]: v for v in rknn.eval_perf(is_print=False)["layers"].values()}
    assert layers["conv1"]["target"] == "CPU" and layers["conv0"]["target"] == "NPU"
    # 29 M MACs on one CPU core; 5x: the float16 MAC rate of the NPU is fitted (docs/performance-model.md §5)
    assert layers["conv1"]["time"] > 5 * layers["conv2"]["time"]


def test_eval_memory_needs_eval_mem(tmp_path, capsys):
    rknn = runtime(tmp_path)
    assert rknn.init_runtime() == 0
    assert rknn.eval_memory() is None
    assert "eval_mem" in capsys.readouterr().out


@pytest.mark.parametrize("platform", ["rk3566", "rk3562", "rk3576", "rv1106", "rk1808", "rv1126"])
def test_every_platform_estimates(tmp_path, platform):
    rknn = runtime(tmp_path, platform=platform)
    assert rknn.init_runtime(eval_mem=True) == 0
    assert rknn.eval_perf(is_print=False)["total_time"] > 0
    assert rknn.eval_memory(is_print=False)


def test_input_normalisation_is_not_a_layer(tmp_path):
    """mean/std run in the NPU's input stage: the same layers and time as without them."""
    plain = runtime(tmp_path)
    normalised = runtime(tmp_path, mean_values=[[123.7, 116.3, 103.5]], std_values=[[58.4, 57.1, 57.4]])
    for rknn in (plain, normalised):
        assert rknn.init_runtime(perf_debug=True) == 0
    a, b = plain.eval_perf(is_print=False), normalised.eval_perf(is_print=False)
    assert len(a["layers"]) == len(b["layers"]) and a["total_time"] == b["total_time"]
