"""Convolutions split over their input channels as rknn-toolkit2 2.5.0 does (probe convolutions
measured on rk3588, docs/fidelity.md): per chip (data), per weight width, exact in float."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from openrknn import chips
from openrknn.compile import build_model
from openrknn.config import parse_config
from openrknn.frontends.onnx_file import load_onnx
from openrknn.graph import npu_layers
from openrknn.graph.passes import optimize
from openrknn.graph.passes.wide_convs import conv_tiles, split_wide_convs
from tests.helpers import reference_session

_RNG = np.random.default_rng(3)


def _conv_model(cin: int, cout: int = 32, k: int = 3, relu: bool = True, residual: bool = False,
                shortcut_relu: bool = False) -> onnx.ModelProto:
    """x → 1×1 Conv + Relu (cin channels) → k×k Conv (+ residual Add of a 1×1 Conv of x, + Relu on
    that shortcut) (+ Relu)."""
    inits = [numpy_helper.from_array(_RNG.normal(0, .1, (cin, 8, 1, 1)).astype(np.float32), "w0"),
             numpy_helper.from_array(_RNG.normal(0, .1, (cout, cin, k, k)).astype(np.float32), "w"),
             numpy_helper.from_array(_RNG.normal(0, .1, cout).astype(np.float32), "b")]
    nodes = [helper.make_node("Conv", ["x", "w0"], ["p"], name="pre"), helper.make_node("Relu", ["p"], ["a"], name="r0"),
             helper.make_node("Conv", ["a", "w", "b"], ["c"], name="big", kernel_shape=[k, k], pads=[k // 2] * 4)]
    last = "c"
    if residual:
        inits.append(numpy_helper.from_array(_RNG.normal(0, .1, (cout, 8, 1, 1)).astype(np.float32), "ws"))
        nodes += [helper.make_node("Conv", ["x", "ws"], ["s0" if shortcut_relu else "s"], name="short"),
                  helper.make_node("Add", ["c", "s"], ["r"], name="add")]
        nodes.insert(0, nodes.pop(-2))   # the shortcut Conv written first
        if shortcut_relu:
            nodes.insert(1, helper.make_node("Relu", ["s0"], ["s"], name="short_relu"))
        last = "r"
    if relu:
        nodes.append(helper.make_node("Relu", [last], ["y"], name="r1"))
        last = "y"
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 6, 6])],
                              [helper.make_tensor_value_info(last, TensorProto.FLOAT, [1, cout, 6, 6])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def _rows(model: onnx.ModelProto) -> list[str]:
    npu_layers.mark_layers(model)
    return [r.op_name for r in npu_layers.layer_records(model.graph) if r.kind != "alias"]


def _run(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    return reference_session(model.SerializeToString()).run(None, {"x": x})[0]


def test_tiles_follow_the_measured_depths():
    assert conv_tiles(336, 9, 3072) == [(0, 336)]                  # 3024 bytes: one Conv
    assert conv_tiles(352, 9, 3072) == [(0, 176), (176, 352)]      # 3168: two halves
    assert conv_tiles(8192, 1, 3072) == [(0, 3072), (3072, 6144), (6144, 8192)]
    assert conv_tiles(6400, 1, 3072)[-1] == (6144, 6400)
    # halves only when a half is whole 16-channel blocks; else the limit's depth in 16-channel blocks
    assert conv_tiles(440, 9, 3072) == [(0, 336), (336, 440)]     # RegNetY's 440-wide Convs, int8
    assert conv_tiles(360, 9, 3072) == [(0, 336), (336, 360)]
    assert conv_tiles(6000, 1, 3072) == [(0, 3072), (3072, 6000)]
    assert conv_tiles(176, 18, 3072) == [(0, 160), (160, 176)]    # float16
    assert conv_tiles(440, 18, 3072) == [(0, 160), (160, 320), (320, 440)]


def test_tiles_of_the_6144_byte_chips_follow_their_blocks():
    """rknn-toolkit2 2.5.0 probe convolutions (docs/fidelity.md): rk3566 cuts in 8-channel blocks,
    rk3562/rk3576 in 16; the depth checked is the channels rounded up to the block."""
    assert conv_tiles(6144, 1, 6144, 8) == [(0, 6144)]                       # int8 1×1 kept
    assert conv_tiles(6160, 1, 6144, 8) == [(0, 3080), (3080, 6160)]         # rk3566: halves
    assert conv_tiles(6160, 1, 6144, 16) == [(0, 6144), (6144, 6160)]        # rk3562/rk3576
    assert conv_tiles(3088, 2, 6144, 8) == [(0, 1544), (1544, 3088)]         # float16 1×1, rk3566
    assert conv_tiles(3080, 2, 6144, 8) == [(0, 3072), (3072, 3080)]
    assert conv_tiles(680, 9, 6144, 8) == [(0, 680)]                         # rk3566 int8 3×3 kept
    assert conv_tiles(680, 9, 6144, 16) == [(0, 672), (672, 680)]            # rk3576: 688 rounded
    assert conv_tiles(688, 9, 6144, 8) == [(0, 344), (344, 688)]
    assert conv_tiles(344, 18, 6144, 8) == [(0, 336), (336, 344)]            # float16 3×3, rk3566
    assert conv_tiles(256, 26, 6144, 8) == [(0, 128), (128, 256)]            # LPRNet's 13×1 float16 Conv
    assert conv_tiles(4896, 2, 3072) == [(0, 1536), (1536, 3072), (3072, 4608), (4608, 4896)]   # rk3588


def test_deep_conv_is_split_with_its_activation_on_the_last_tile():
    """352 input channels, 3×3, int8: Split, Conv, ConvAddRelu (rknn-toolkit2 prints the same)."""
    model = optimize(_conv_model(352), 3)
    x = _RNG.normal(size=(1, 8, 6, 6)).astype(np.float32)
    before = _run(model, x)
    assert split_wide_convs(model, 3072, 1).modified
    assert _rows(model) == ["ConvRelu", "Split", "Conv", "ConvAddRelu"]
    np.testing.assert_allclose(_run(model, x), before, rtol=1e-4, atol=1e-5)
    untouched = optimize(_conv_model(336), 3)
    assert not split_wide_convs(untouched, 3072, 1).modified


def test_running_sums_of_four_tiles_carry_the_vendors_names():
    """resnet50 float16 on rk3588 (oracle corpus): rknn-toolkit2 splits layer4's 512×3×3 Convs into
    four tiles and stores the running sums as ``<output>_tile0_conv_add`` and ``<output>_tile2_conv_add``
    (its Feature Tensor table; the second tile's Conv as ``<output>_tile1_conv``), the last sum being
    the Conv's output."""
    model = optimize(_conv_model(512, relu=False), 3)
    x = _RNG.normal(size=(1, 8, 6, 6)).astype(np.float32)
    before = _run(model, x)
    assert split_wide_convs(model, 3072, 2).modified   # float16 weights: 160 + 160 + 160 + 32 channels
    outputs = [o for n in model.graph.node for o in n.output]
    assert {"c_tile1_conv", "c_tile0_conv_add", "c_tile2_conv_add"} <= set(outputs)
    assert outputs[-1] == "c"
    np.testing.assert_allclose(_run(model, x), before, rtol=1e-4, atol=1e-5)


def test_residual_add_after_a_split_conv_is_its_own_layer():
    """ResNet layer4 (rknn-toolkit2's resnet18 table): the tiles' ConvAdd takes the partial sum; an
    identity-style residual (layer4.1, here a ConvRelu's output) is ``AddRelu``, a projection shortcut
    Conv (layer4.0's ``downsample``) runs after the tiles and takes the Add, ``ConvAddRelu``."""
    x = _RNG.normal(size=(1, 8, 6, 6)).astype(np.float32)
    model = optimize(_conv_model(512, residual=True, shortcut_relu=True), 3)
    before = _run(model, x)
    split_wide_convs(model, 3072, 1)
    assert _rows(model) == ["ConvRelu", "ConvRelu", "Split", "Conv", "ConvAdd", "AddRelu"]
    np.testing.assert_allclose(_run(model, x), before, rtol=1e-4, atol=1e-5)
    model = optimize(_conv_model(512, residual=True), 3)
    before = _run(model, x)
    split_wide_convs(model, 3072, 1)
    assert _rows(model) == ["ConvRelu", "Split", "Conv", "ConvAdd", "ConvAddRelu"]
    np.testing.assert_allclose(_run(model, x), before, rtol=1e-4, atol=1e-5)


def test_the_limit_is_chip_data_and_counts_weight_bytes(tmp_path):
    """rk3588 splits above 3072 bytes, rk3566, rk3562 and rk3576 above 6144 (measured); float16
    weights are two bytes, so 176 channels × 3×3 split in float16 on rk3588 and not on rk3566."""
    assert chips.get_chip("rk3588").lowering["conv_split_input_bytes"] == 3072
    for name in ("rk3566", "rk3562", "rk3576"):
        assert chips.get_chip(name).lowering["conv_split_input_bytes"] == 6144
    path = tmp_path / "m.onnx"
    onnx.save(_conv_model(176), path)

    def convs(platform: str) -> int:
        built = build_model(load_onnx(str(path)), parse_config(target_platform=platform), False, None, None)
        return sum(n.op_type == "Conv" for n in built.graph.graph.node)
    assert convs("rk3588") == 3 and convs("rk3566") == 2


def _concat_model(second: int, silu: bool = False, third: bool = False, out: int = 4) -> onnx.ModelProto:
    """Conv(x)[16] and Conv+Relu(x)[second] (and Conv(x) again) concatenated, read by a 3×3 Conv
    of ``out`` channels + Relu (or SiLU)."""
    width = 16 + second + (16 if third else 0)
    inits = [numpy_helper.from_array(_RNG.normal(0, .3, (16, 8, 1, 1)).astype(np.float32), "wa"),
             numpy_helper.from_array(_RNG.normal(0, .3, (second, 8, 1, 1)).astype(np.float32), "wb"),
             numpy_helper.from_array(_RNG.normal(0, .3, (out, width, 3, 3)).astype(np.float32), "w"),
             numpy_helper.from_array(_RNG.normal(0, .3, out).astype(np.float32), "b")]
    act = ([helper.make_node("Sigmoid", ["c"], ["sg"], name="sg"), helper.make_node("Mul", ["c", "sg"], ["y"], name="silu")]
           if silu else [helper.make_node("Relu", ["c"], ["y"], name="r")])
    nodes = [helper.make_node("Conv", ["x", "wa"], ["a"], name="ca"), helper.make_node("Conv", ["x", "wb"], ["b0"], name="cb"),
             helper.make_node("Relu", ["b0"], ["bb"], name="rb"),
             helper.make_node("Concat", ["a", "bb"] + (["a"] if third else []), ["cat"], axis=1, name="cat"),
             helper.make_node("Conv", ["cat", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1])] + act
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 6, 6])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, out, 6, 6])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def test_concat_read_by_one_conv_is_one_conv_per_input():
    """Conv(Concat(a, b)) runs as Conv(a) and Conv(b) adding it (``ConvAdd``), no Concat layer
    (measured: probe graph, U-Net decoder); values equal."""
    x = _RNG.normal(size=(1, 8, 6, 6)).astype(np.float32)
    model = _concat_model(8)
    optimized = optimize(model, 3)
    assert "Concat" not in [n.op_type for n in optimized.graph.node]
    assert _rows(optimized) == ["Conv", "ConvRelu", "Conv", "ConvAddRelu"]
    np.testing.assert_allclose(_run(optimized, x), _run(model, x), rtol=1e-4, atol=1e-5)
    # before a SiLU: split when a piece is not whole 16-channel blocks, the SiLU then alone
    # (ReXNet 27 + 11: ConvAdd + exSwish); kept for whole blocks (YOLOv5's C3); both measured
    optimized = optimize(_concat_model(8, silu=True), 3)
    assert _rows(optimized) == ["Conv", "ConvRelu", "Conv", "ConvAdd", "exSwish"]
    assert "Concat" in [n.op_type for n in optimize(_concat_model(16, silu=True), 3).graph.node]
    # ... a Concat of more than two inputs stays when the Conv has at least as many output channels as
    # the inputs on average (DeepLab's ASPP 5 × 256 → 256), else it is split in the order 1, 0, 2
    # (LPRNet's 64 + 128 + 256 + 68 → 68; probes, docs/fidelity.md)
    assert "Concat" in [n.op_type for n in optimize(_concat_model(8, third=True, out=14), 3).graph.node]
    model = _concat_model(8, third=True, out=13)
    optimized = optimize(model, 3)
    assert _rows(optimized) == ["Conv", "ConvRelu", "Conv", "ConvAdd", "ConvAddRelu"]
    np.testing.assert_allclose(_run(optimized, x), _run(model, x), rtol=1e-4, atol=1e-5)


def _grouped_model(width: int, channels: int = 32) -> onnx.ModelProto:
    inits = [numpy_helper.from_array(_RNG.normal(0, .3, (channels, 8, 1, 1)).astype(np.float32), "w0"),
             numpy_helper.from_array(_RNG.normal(0, .3, (channels, width, 3, 3)).astype(np.float32), "w"),
             numpy_helper.from_array(_RNG.normal(0, .3, channels).astype(np.float32), "b")]
    nodes = [helper.make_node("Conv", ["x", "w0"], ["p"], name="pre"), helper.make_node("Relu", ["p"], ["a"], name="r0"),
             helper.make_node("Conv", ["a", "w", "b"], ["c"], name="g", group=channels // width, pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["y"], name="r1")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 6, 6])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, channels, 6, 6])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def test_grouped_convs_run_dense_or_per_group_as_the_chip_does():
    """rk3588 (data: 8 bytes) keeps 8-wide int8 groups as one dense Conv and splits 16-wide ones into
    Split, one Conv per group, Concat and the Relu alone (measured); rk3566 (4) splits 8-wide ones."""
    from openrknn.graph.passes.wide_convs import lower_grouped_convs
    assert chips.get_chip("rk3588").lowering["grouped_conv_dense_max_bytes"] == 8
    assert chips.get_chip("rk3566").lowering["grouped_conv_dense_max_bytes"] == 4
    x = _RNG.normal(size=(1, 8, 6, 6)).astype(np.float32)
    for width, limit, rows in ((8, 8, ["ConvRelu", "ConvRelu"]),
                               (16, 8, ["ConvRelu", "Split", "Conv", "Conv", "Concat", "Relu"]),
                               (8, 4, ["ConvRelu", "Split"] + ["Conv"] * 4 + ["Concat", "Relu"])):
        model = optimize(_grouped_model(width), 3)
        before = _run(model, x)
        assert lower_grouped_convs(model, limit).modified
        assert _rows(model) == rows, (width, limit)
        np.testing.assert_allclose(_run(model, x), before, rtol=1e-4, atol=1e-5)
    model = optimize(_grouped_model(8), 3)   # float16 weights: 8 channels are 16 bytes, split on rk3588
    lower_grouped_convs(model, 8, weight_bytes=2)
    assert "Concat" in _rows(model)
    # the pieces and the per-group Convs' outputs under the names rknn-toolkit2 stores (regnet_x)
    concat = next(n for n in model.graph.node if n.op_type == "Concat")
    assert list(concat.input) == [f"c_branch{g}" for g in range(4)]
    depthwise = optimize(_grouped_model(1), 3)
    assert not lower_grouped_convs(depthwise, 8).modified
