"""eval_perf cost model: calibration, monotonicity, core_mask, fallback, fusion names, result dict."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from openrknn.chips import get_chip
from openrknn.errors import ConfigError
from openrknn.api.common import NPUCoreMask
from openrknn.profile import estimate_perf
from openrknn.profile.calibration import BOARD_TOLERANCE, CALIBRATION_POINTS, predict, with_cost
from openrknn.profile.cost_model import padded_macs
from openrknn.profile.cost_table import cost_table
from openrknn.profile.layers import ConvGeometry, Layer, TensorInfo
from openrknn.profile.reference_nets import NetBuilder, reference_model, wrap_onnx


def conv_net(channels: int, size: int = 56, depth: int = 3, act: str | None = "relu", k: int = 3):
    b = NetBuilder("convs", (1, channels, size, size))
    x = "input"
    for _ in range(depth):
        x = b.conv(x, channels, k, act=act)
    return b.model([x])


def total(onnx_model, chip="rk3588", dtype="w8a8", mask=NPUCoreMask.NPU_CORE_AUTO, chip_obj=None):
    return estimate_perf(wrap_onnx(onnx_model, dtype, chip), chip_obj or get_chip(chip), mask).total_time_us


@pytest.mark.parametrize("point", CALIBRATION_POINTS, ids=lambda p: f"{p.chip}-{p.network}")
def test_published_board_fps_within_band(point):
    """The reference MobileNetV2 / ResNet50 stay within the band of Rockchip's published FPS that the
    fitted chip data reach (bench/perf_fit.py; docs/performance-model.md §5)."""
    assert abs(point.total_us / predict(point) - 1) <= BOARD_TOLERANCE


def test_time_grows_with_macs():
    times = [total(conv_net(c)) for c in (32, 64, 128, 256)]
    assert times == sorted(times) and times[-1] > 4 * times[0]


def test_lower_bandwidth_is_slower():
    chip = get_chip("rk3566")
    slow_chip = with_cost(chip, ddr=dict(chip.cost["ddr"], freq_mhz=chip.cost["ddr"]["freq_mhz"] / 4))
    memory_bound = conv_net(16, size=224, k=1)
    assert total(memory_bound, "rk3566", chip_obj=slow_chip) > 2 * total(memory_bound, "rk3566", chip_obj=chip)
    compute_bound = conv_net(64, size=112)
    assert total(compute_bound, "rk3566", chip_obj=slow_chip) >= total(compute_bound, "rk3566", chip_obj=chip)


def test_rw_bytes_and_ddr_cycles_grow_with_tensor_size():
    # 4x the pixels; maps large enough that activations, not the weights (read `weight_reads` times,
    # a fitted constant), dominate the traffic
    small = estimate_perf(wrap_onnx(conv_net(32, 56)), get_chip("rk3588"))
    big = estimate_perf(wrap_onnx(conv_net(32, 112)), get_chip("rk3588"))
    assert big.total_rw_kb > 3 * small.total_rw_kb
    assert big.layers[1].ddr_cycles > 3 * small.layers[1].ddr_cycles


def test_core_mask_changes_rk3588_estimate():
    model = reference_model("resnet50", "w8a8")
    one = estimate_perf(model, get_chip("rk3588"), NPUCoreMask.NPU_CORE_AUTO)
    two = estimate_perf(model, get_chip("rk3588"), NPUCoreMask.NPU_CORE_0_1)
    three = estimate_perf(model, get_chip("rk3588"), NPUCoreMask.NPU_CORE_0_1_2)
    assert three.total_time_us < two.total_time_us < one.total_time_us
    assert estimate_perf(model, get_chip("rk3588"), NPUCoreMask.NPU_CORE_ALL).total_time_us == three.total_time_us
    conv = next(r for r in three.layers if r.op_type.startswith("Conv"))
    assert conv.workload == pytest.approx((1 / 3, 1 / 3, 1 / 3))
    pool = next(r for r in three.layers if r.op_type == "MaxPool")     # MaxPool is not split (seed 002 §5.3.2)
    assert pool.workload == (1.0, 0.0, 0.0)


def test_core_mask_rejected_where_cores_do_not_exist():
    model = reference_model("mobilenet_v2", "w8a8")
    with pytest.raises(ConfigError, match="core"):
        estimate_perf(model, get_chip("rk3566"), NPUCoreMask.NPU_CORE_0_1)
    with pytest.raises(ConfigError, match="core"):
        estimate_perf(model, get_chip("rk3576"), NPUCoreMask.NPU_CORE_0_1_2)
    assert estimate_perf(model, get_chip("rk3576"), NPUCoreMask.NPU_CORE_0_1).total_time_us > 0


def test_float16_slower_than_int8():
    model = conv_net(128)
    assert total(model, dtype=None) > total(model, dtype="w8a8")


def test_fused_op_names_like_the_real_tool():
    names = {r.op_type for r in estimate_perf(reference_model("resnet50"), get_chip("rk3588")).layers}
    assert {"InputOperator", "ConvRelu", "Conv", "ConvAddRelu", "MaxPool", "OutputOperator"} <= names
    mv2 = estimate_perf(reference_model("mobilenet_v2"), get_chip("rk3588"))
    counts = {t: sum(r.op_type == t for r in mv2.layers) for t in ("ConvClip", "ConvAdd", "Conv")}
    assert counts == {"ConvClip": 35, "ConvAdd": 10, "Conv": 9}      # seed 002 §4.1.3 ranking table
    assert "ConvExSwish" in {r.op_type for r in estimate_perf(reference_model("yolov8n"), get_chip("rk3588")).layers}


def _argmax_model():
    w = numpy_helper.from_array(np.ones((8, 3, 3, 3), np.float32), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("ArgMax", ["r"], ["y"], name="argmax", axis=1)]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 32, 32])],
                          [helper.make_tensor_value_info("y", TensorProto.INT64, [1, 1, 32, 32])], [w])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_unsupported_and_forced_ops_run_on_cpu():
    model = wrap_onnx(_argmax_model())
    rows = {r.name: r for r in estimate_perf(model, get_chip("rk3588")).layers}
    assert rows["argmax"].target == "CPU" and rows["conv"].target == "NPU" and rows["conv"].op_type == "ConvRelu"
    model.metadata["op_target"] = {"relu": "cpu"}
    rows = {r.name: r for r in estimate_perf(model, get_chip("rk3588")).layers}
    assert rows["relu"].target == "CPU" and rows["conv"].op_type == "Conv"


def test_result_dict_keys():
    rep = estimate_perf(reference_model("mobilenet_v2"), get_chip("rk3588"))
    d = rep.to_dict()
    assert d["total_time"] == rep.total_time_us
    assert {"name", "operation", "target", "time"} <= set(d["layers"][1])
    assert set(d) == {"total_time", "layers"}
    assert rep.to_dict(perf_debug=False) == {"total_time": rep.total_time_us}    # toolkit2-1.1 §3.5.9
    t1 = estimate_perf(reference_model("mobilenet_v1", "asymmetric_quantized-u8"), get_chip("rk1808")).to_dict()
    assert set(t1["layers"][0]) == {"name", "time"}


def test_csv_written(tmp_path):
    rep = estimate_perf(reference_model("mobilenet_v2"), get_chip("rk3588"))
    lines = rep.to_csv(tmp_path / "eval_perf.csv").read_text().splitlines()
    assert lines[0].startswith("ID,OpType,DataType,Target") and len(lines) == len(rep.layers) + 1


@pytest.mark.parametrize("cin, out_hw, cout, published", [
    (64, (75, 75), 192, 1215000),     # seed 002 fig 8-6, layer 12
    (3, (240, 320), 32, 1382400),     # fig 8-3, layer 1
    (32, (120, 160), 64, 691200),     # fig 8-3, layer 2
    (128, (60, 80), 128, 1382400),    # fig 8-4, layer 118
])
def test_padded_mac_formula_matches_published_npu_cycles(cin, out_hw, cout, published):
    """Validation (not calibration): the tables' NPUCycles of 3x3 int8 convs equal padded MACs / 512."""
    h, w = out_hw
    layer = Layer("Conv", "Conv", "c", "conv", "NPU", "int8", [TensorInfo("x", (1, cin, h, w), "int8")], [],
                  ConvGeometry(h * w, 3, 3, cin, cout, 1, w))
    t = cost_table(get_chip("rk3566"))
    assert padded_macs(layer, t) / t.macs("int8") == published


def test_first_conv_of_an_int8_build_is_costed_int8(tmp_path):
    """The NPU's input stage writes the normalised integers the first Conv reads: in a w8a8 build
    with mean/std that Conv is an int8 layer, like every other one (not float16)."""
    from tests.helpers import make_conv_model, quantized_build
    model = make_conv_model(tmp_path / "m.onnx", size=32)
    rng = np.random.default_rng(0)
    rknn = quantized_build(model, [rng.integers(0, 256, (1, 3, 32, 32)).astype(np.float32) for _ in range(3)],
                           mean_values=[[127.5] * 3], std_values=[[64] * 3])
    report = estimate_perf(rknn._model, get_chip("rk3588"))
    first_conv = next(layer for layer in report.layers if layer.op_type.startswith("Conv"))
    assert first_conv.data_type == "int8"
    assert report.layers[0].op_type == "InputOperator" and report.layers[0].data_type == "int8"


def test_large_global_average_pool_runs_as_a_depthwise_cascade():
    """12×96 → 2×14 → 1×2 → 1×1: three Conv rows, as rknn-toolkit2 prints a GlobalAveragePool."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 12, 96])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 1, 1])
    graph = helper.make_graph([helper.make_node("GlobalAveragePool", ["x"], ["y"], name="gap")], "g", [x], [y])
    layers = estimate_perf(wrap_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])),
                           get_chip("rk3588")).layers
    rows = [row for row in layers if row.name.startswith("gap")]
    assert [row.op_type for row in rows] == ["Conv"] * 3
    assert [row.output_shapes[0] for row in rows] == [(1, 8, 2, 14), (1, 8, 1, 2), (1, 8, 1, 1)]
    small = helper.make_graph([helper.make_node("GlobalAveragePool", ["x"], ["y"], name="gap")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 7, 7])], [y])
    assert len([r for r in estimate_perf(wrap_onnx(helper.make_model(small, opset_imports=[helper.make_opsetid("", 13)])),
                                         get_chip("rk3588")).layers if r.name.startswith("gap")]) == 1


def test_lookup_table_activation_costs_more_than_relu():
    """SiLU goes through the NPU's lookup table (activation_cycles_per_element), Relu does not: the
    published yolov5s is 48.4 FPS on RK3588, its ReLU variant 66.1."""
    silu, relu = total(conv_net(64, act="silu")), total(conv_net(64, act="relu"))
    assert silu > relu
    chip = get_chip("rk3588")
    free = with_cost(chip, activation_cycles_per_element=0.0)
    assert total(conv_net(64, act="silu"), chip_obj=free) == total(conv_net(64, act="relu"), chip_obj=free)


def test_weight_reads_multiply_only_the_weight_bytes():
    chip = get_chip("rk3588")
    once = estimate_perf(wrap_onnx(conv_net(64, size=8)), with_cost(chip, weight_reads=1.0))
    thrice = estimate_perf(wrap_onnx(conv_net(64, size=8)), with_cost(chip, weight_reads=3.0))
    weights = 64 * 64 * 9 + 64 * 4          # int8 weights + int32 bias of one conv
    assert thrice.layers[1].rw_kb - once.layers[1].rw_kb == pytest.approx(2 * weights / 1024)
