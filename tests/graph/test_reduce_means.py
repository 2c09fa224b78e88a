"""ReduceMean and wide AveragePools lowered to convolutions as rknn-toolkit2 2.5.0 prints them
(probe graphs on rk3588 and rk3566, int8 and float16; LPRNet on rk3562/rk3576 too: the tables are
in docs/fidelity.md). One test per rule, each also exact in float against onnxruntime."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from openrknn.graph import npu_layers
from openrknn.graph.passes.reduce_means import lower_reduce_means
from openrknn.graph.passes.wide_convs import split_wide_convs
from tests.helpers import reference_session

_RNG = np.random.default_rng(5)


def _mean_model(shape: tuple[int, int, int, int], axes: list[int] | None, keepdims: int,
                reader: str | None = None) -> onnx.ModelProto:
    """x → 1×1 Conv + Relu (``shape``) → ReduceMean → (Div / Mul of the Relu by it, or the output)."""
    _, c, h, w = shape
    attrs = {"keepdims": keepdims, **({"axes": axes} if axes is not None else {})}
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv"), helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("ReduceMean", ["r"], ["m"], name="mean", **attrs)]
    out = "m"
    if reader:
        nodes.append(helper.make_node(reader, ["r", "m"], ["y"], name=reader.lower()))
        out = "y"
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, h, w])],
                              [helper.make_tensor_value_info(out, TensorProto.FLOAT, [])],
                              [numpy_helper.from_array(_RNG.normal(0, .3, (c, 8, 1, 1)).astype(np.float32), "w")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def _lowered(model: onnx.ModelProto, limit: int | None, weight_bytes: int, block: int | None = None) -> list[str]:
    """The printed OpTypes after the chip lowering (mean, then the wide-Conv split), outputs kept
    equal to the original's in float."""
    x = _RNG.uniform(0.1, 1, [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]).astype(np.float32)
    before = reference_session(model).run(None, {"x": x})[0]
    assert lower_reduce_means(model, limit, weight_bytes, block).modified
    split_wide_convs(model, limit, weight_bytes, block)
    onnx.checker.check_model(model)
    np.testing.assert_allclose(reference_session(model).run(None, {"x": x})[0], before, rtol=1e-5, atol=1e-6)
    npu_layers.mark_layers(model)
    return [r.op_name for r in npu_layers.layer_records(model.graph) if r.kind != "alias"][1:]   # after ConvRelu


def test_mean_of_a_whole_tensor_is_a_reshape_and_conv_tiles_and_an_expand_for_div():
    """LPRNet's ``x / mean(x²)`` over 64×4×18 (keepdims 0): rk3588 float16 prints Reshape, Split,
    Conv, ConvAdd, ConvAdd, Expand, Div (3 tiles of 1536 channels), rk3566 two tiles of 2304."""
    rows = _lowered(_mean_model((1, 64, 4, 18), None, 0, "Div"), 3072, 2)
    assert rows == ["Reshape", "Split", "Conv", "ConvAdd", "ConvAdd", "Expand", "Div"]
    rows = _lowered(_mean_model((1, 64, 4, 18), None, 0, "Div"), 6144, 2, 8)
    assert rows == ["Reshape", "Split", "Conv", "ConvAdd", "Expand", "Div"]


def test_a_mul_reads_the_whole_tensor_mean_without_expand():
    assert _lowered(_mean_model((1, 64, 4, 18), [1, 2, 3], 1, "Mul"), 3072, 2) == \
        ["Reshape", "Split", "Conv", "ConvAdd", "ConvAdd", "Mul"]


def test_a_small_whole_tensor_mean_is_one_conv_over_it():
    """H, W ≤ 7 and one NPU pass: a Conv with a 64×4×4 kernel (rk3588 float16 2048 bytes); 256×4×4
    float16 is too deep there and is reshaped and tiled, int8 on rk3566 (4096 bytes) is not."""
    assert _lowered(_mean_model((1, 64, 4, 4), None, 1, "Div"), 3072, 2) == ["Conv", "Expand", "Div"]
    assert _lowered(_mean_model((1, 256, 4, 4), None, 1, "Div"), 3072, 2)[:2] == ["Reshape", "Split"]
    assert _lowered(_mean_model((1, 256, 4, 4), None, 1, "Div"), 6144, 1, 8) == ["Conv", "Expand", "Div"]


def test_a_whole_tensor_mean_as_output_keeps_its_rank_through_a_reshape():
    rows = _lowered(_mean_model((1, 64, 4, 18), None, 0), 3072, 2)
    assert rows == ["Reshape", "Split", "Conv", "ConvAdd", "ConvAdd", "Reshape"]


def test_a_channel_mean_is_a_1x1_conv():
    assert _lowered(_mean_model((1, 64, 16, 16), [1], 1), 3072, 2) == ["Conv"]
    assert _lowered(_mean_model((1, 64, 16, 16), [1], 0), 3072, 2) == ["Conv", "Reshape"]


def test_a_channel_mean_of_a_shared_input_is_reshaped_around_its_conv():
    """pp_liteseg's UAFM and a mean that scales its own input: Reshape (1,C,1,H·W), Conv, Reshape."""
    assert _lowered(_mean_model((1, 128, 16, 16), [1], 1, "Mul"), 3072, 1) == ["Reshape", "Conv", "Reshape", "Mul"]


def test_a_spatial_mean_is_a_global_average_pool():
    """Over H×W: rknn-toolkit2 prints the GlobalAveragePool cascade ``<x>_gavg_2conv0``, ``…2conv1``."""
    model = _mean_model((1, 64, 16, 16), [2, 3], 1, "Mul")
    assert _lowered(model, 3072, 2) == ["Conv", "Mul"]
    pool = next(n for n in model.graph.node if n.op_type == "GlobalAveragePool")
    assert pool.name == "r_gavg"
    assert list(npu_layers.vendor_pool_stage_names(model).values()) == ["r_gavg_2conv0"]
    assert _lowered(_mean_model((1, 64, 16, 16), [2, 3], 0), 3072, 2) == ["Conv", "Reshape"]


def test_a_mean_over_one_spatial_axis_is_transpose_conv_and_back():
    """LPRNet's last mean over H (68×4×18, keepdims 0): Transpose, Conv, Reshape; keepdims 1 over
    W: Transpose, Conv, Transpose."""
    assert _lowered(_mean_model((1, 68, 4, 18), [2], 0), 3072, 2) == ["Transpose", "Conv", "Reshape"]
    model = _mean_model((1, 64, 8, 18), [3], 1)
    assert _lowered(model, 3072, 2) == ["Transpose", "Conv", "Transpose"]
    assert [list(n.attribute[0].ints) for n in model.graph.node if n.op_type == "Transpose"] == [[0, 3, 1, 2], [0, 2, 3, 1]]


def test_a_normalisation_keeps_its_means():
    """``(x − mean(x)) / sqrt(mean((x − mean(x))²) + ε)`` over the channels is one exNorm layer."""
    nodes = [helper.make_node("ReduceMean", ["x"], ["m"], axes=[1]), helper.make_node("Sub", ["x", "m"], ["d"]),
             helper.make_node("Mul", ["d", "d"], ["s"]), helper.make_node("ReduceMean", ["s"], ["v"], axes=[1]),
             helper.make_node("Add", ["v", "eps"], ["ve"]), helper.make_node("Sqrt", ["ve"], ["sd"]),
             helper.make_node("Div", ["d", "sd"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 4, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 4, 4])],
                              [numpy_helper.from_array(np.array(1e-5, np.float32), "eps")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    assert not lower_reduce_means(model, 3072, 2).modified


@pytest.mark.parametrize(("kernel", "strides", "lowered"), [([4, 10], [4, 2], True), ([2, 8], [2, 2], True),
                                                            ([5, 5], [5, 5], False), ([7, 7], [1, 1], False)])
def test_an_overlapping_pool_wider_than_7_is_a_depthwise_conv(kernel, strides, lowered):
    """LPRNet's AveragePool 4×10 / stride 4×2 prints ``Conv … <node>_2dw``; 5×5 and 7×7 stay pools."""
    nodes = [helper.make_node("AveragePool", ["x"], ["y"], name="pool", kernel_shape=kernel, strides=strides)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 18, 44])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    x = _RNG.normal(size=(1, 16, 18, 44)).astype(np.float32)
    before = reference_session(model).run(None, {"x": x})[0]
    assert lower_reduce_means(model, 3072, 2).modified == lowered
    assert [n.op_type for n in model.graph.node] == (["Conv"] if lowered else ["AveragePool"])
    if lowered:
        assert model.graph.node[0].name == "pool_2dw"
        np.testing.assert_allclose(reference_session(model).run(None, {"x": x})[0], before, rtol=1e-5, atol=1e-6)


def test_build_lowers_means_on_toolkit2_chips_only(tmp_path):
    """``build`` applies the rules on the chips they were measured on (rknn-toolkit2); a Toolkit 1
    chip keeps its ReduceMean (no reference there)."""
    from openrknn.compile import build_model
    from openrknn.config import parse_config
    from openrknn.frontends.onnx_file import load_onnx
    path = tmp_path / "m.onnx"
    onnx.save(_mean_model((1, 64, 4, 18), None, 0, "Div"), path)

    def ops(platform: str) -> list[str]:
        built = build_model(load_onnx(str(path)), parse_config(target_platform=platform), False, None, None)
        return [n.op_type for n in built.graph.graph.node]
    assert "ReduceMean" not in ops("rk3588") and ops("rk3588").count("Conv") == 4   # the Relu's Conv + 3 tiles
    assert "ReduceMean" in ops("rk1808")
