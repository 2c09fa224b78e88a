"""The documented NPU limits per chip: one small generated graph per limit family, per chip where the
operator list differs (chips/data/op_limits/npu_op_limits.yaml, Rockchip's operator list v2.3.2)."""
from __future__ import annotations

import itertools

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from openrknn.graph import npu_limits as L

RNG = np.random.default_rng(0)


def graph(nodes, inputs, inits=(), opset=13):
    """A model of ``nodes`` over ``inputs`` (name -> shape); every node output is a graph output."""
    values = [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs.items()]
    outputs = [helper.make_tensor_value_info(nodes[-1].output[0], TensorProto.FLOAT, None)]
    g = helper.make_graph(nodes, "g", values, outputs, list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def const(name, array):
    return numpy_helper.from_array(np.asarray(array, np.float32) if np.asarray(array).dtype.kind == "f"
                                   else np.asarray(array), name)


def findings(model, chip, dtype="float16", quant=None):
    names = {o for n in model.graph.node for o in n.output} | {i.name for i in model.graph.input}
    return L.check_graph(model, chip, {n: dtype for n in names}, quant or {})


def only(found, node):
    return [f for f in found if f.node == node]


# ----------------------------------------------------------------------------- the data
def test_every_rknpu2_chip_has_its_operator_list():
    for chip in ("rk3566", "rk3568", "rk3588", "rk3562", "rk3576", "rv1126b", "rv1103", "rv1106", "rk2118",
                 "rv1103b", "rv1106b"):
        limits = L.limits_for(chip)
        assert limits is not None and limits.entry("Convolution") is not None, chip
    assert L.limits_for("rk1808") is None   # Toolkit 1 chips are not in the list
    assert L.limits_for("rk2118").cpu_availability == "none"
    assert "Gather" in L.limits_for("rv1106").cpu_availability
    assert L.limits_for("rk3588").cpu_availability == "all"


def test_every_transpose_rule_parses_on_every_chip():
    shape = {"n1": 1, "c1": 16, "h1": 32, "w1": 64, "p": 8192, "q": 2048}
    for chip in L.covered_chips():
        limits = L.limits_for(chip)
        for perm in itertools.permutations(range(4)):
            for dtype in ("int8", "float16", "int16"):
                L.rule_holds(L.transpose_rule(perm, limits, dtype), shape)   # raises on a rule it cannot read


def test_rule_expressions():
    values = {"n1": 4, "c1": 16, "h1": 1, "w1": 1, "p": 8192, "q": 2048}
    assert L.rule_holds("c1<8192, n<8192, h1*w1<8192, (h1=w1=1, n1%4=0) or (n1=h1=1, w1%4=0)", values)
    assert not L.rule_holds("c1<8192, n<8192, h1*w1<8192, (h1=w1=1, n1%4=0) or (n1=h1=1, w1%4=0)",
                            {**values, "n1": 3})
    assert L.rule_holds("n1*w1<p*8, c1*h1*w1p, w1%8=0 (printed without operator before p; presumably <p; unclear)",
                        {**values, "w1": 8})
    assert not L.rule_holds("NOT SUPPORTED", values) and L.rule_holds("no restriction", values)
    with pytest.raises(ValueError):
        L.rule_holds("__import__('os')", values)


# ----------------------------------------------------------------------------- Transpose
def _transpose(perm, shape):
    return graph([helper.make_node("Transpose", ["x"], ["y"], name="t", perm=perm)], {"x": shape})


@pytest.mark.parametrize("chip,target", [("rk3566", "CPU"), ("rk3568", "CPU"), ("rk3588", "NPU"), ("rk3562", "NPU"),
                                         ("rk3576", "NPU")])
def test_nchw_to_nhwc_transpose_per_chip(chip, target):
    found = findings(_transpose([0, 2, 3, 1], [1, 16, 8, 8]), chip)
    assert (("CPU" if found else "NPU") == target), [f.line() for f in found]
    if found:
        assert found[0].consequence == L.CPU and "§3.1.58" in found[0].section and "§4.66" in found[0].cpu_section
        assert "[0, 2, 3, 1]" in found[0].limit and "runs only these perms" in found[0].suggestion


def test_transpose_size_rule_on_rk3588():
    # [0,2,3,1] needs h1*w1 % 8 == 0 on the T-B chips; rknn-toolkit2 2.5.0 adds a Conv layer then
    found = findings(_transpose([0, 2, 3, 1], [1, 16, 3, 3]), "rk3588")
    assert found and "h1*w1%8=0" in found[0].limit and found[0].consequence == L.REWRITE
    assert "adds a Conv layer" in found[0].line() and found[0].severity == "W"


def test_rk2118_reports_an_op_without_npu_support_as_an_error_not_a_fallback():
    exponent = const("e", [4.0])
    model = graph([helper.make_node("Pow", ["x", "e"], ["y"], name="pow4")], {"x": [1, 8, 4, 4]}, [exponent])
    on_3588 = findings(model, "rk3588")
    assert on_3588[0].consequence == L.CPU and "§4.42 Pow" in on_3588[0].cpu_section
    found = findings(model, "rk2118")
    assert found and found[0].consequence == L.UNSUPPORTED and found[0].severity == "E"
    assert "unsupported on RK2118 (RK2118 has no CPU operators)" in found[0].line()
    assert L.placement(model.graph.node[0], model, "rk2118").target == "NONE"


def test_rk3566_supported_perm_with_its_size_rule():
    assert not findings(_transpose([2, 1, 0, 3], [4, 16, 1, 1]), "rk3566")
    assert findings(_transpose([2, 1, 0, 3], [3, 16, 1, 1]), "rk3566")   # n1 % 4 != 0


# ----------------------------------------------------------------------------- convolutions
def _conv(weight_shape, x_shape, **attrs):
    w = const("w", RNG.normal(0, 0.1, weight_shape))
    return graph([helper.make_node("Conv", ["x", "w"], ["y"], name="conv", **attrs)], {"x": x_shape}, [w])


@pytest.mark.parametrize("chip", ["rk3566", "rk3588", "rk2118", "rv1106b"])
def test_long_kernel_is_reported_with_a_split_suggestion(chip):
    found = findings(_conv((4, 4, 1, 40), [1, 4, 8, 64]), chip, "int8" if chip == "rv1106b" else "float16")
    kernel = [f for f in found if "kernel w 40" in f.limit]
    # rknn-toolkit2 2.5.0 splits it itself (16 + 16 + 8 taps, Slice + ConvAdd)
    assert kernel and kernel[0].consequence == L.REWRITE and "at most 16 taps" in kernel[0].line()
    assert "1×20 + 1×20" in kernel[0].suggestion


def test_one_d_convolution_kernel_is_its_width():
    found = findings(_conv((4, 4, 33), [1, 4, 100]), "rk3588")
    assert [f.limit for f in found] == ["kernel w 33 outside 1-31"]
    assert "1×17 + 1×16" in found[0].suggestion


def test_stride_pad_and_dilation_ranges():
    found = findings(_conv((4, 4, 3, 3), [1, 4, 64, 64], strides=[8, 1], pads=[16, 0, 0, 0], dilations=[1, 32]), "rk3588")
    limits = {f.limit.split(" outside")[0] for f in found}
    assert {"stride h 8", "pads [16, 0, 0, 0] (top, left, bottom, right)", "dilation w 32"} <= limits
    converter = {f.limit.split(" ")[0]: f.converter for f in found}
    assert converter["stride"] == "splits it into two convolutions" and "Pad layer" in converter["pads"]
    assert "Gather" in converter["dilation"] and all(f.consequence == L.REWRITE for f in found)
    assert not findings(_conv((4, 4, 3, 3), [1, 4, 64, 64], strides=[7, 7], pads=[15, 0, 0, 0]), "rk3588")


def test_dilation_rewrite_needs_a_gather_on_the_npu():
    # rknn-toolkit2 2.5.0 gathers the dilated rows/columns first: RK2118 has no NPU Gather (and no CPU)
    model = _conv((4, 4, 3, 3), [1, 4, 80, 80], dilations=[32, 32])
    assert {f.consequence for f in findings(model, "rk3588")} == {L.REWRITE}
    on_2118 = findings(model, "rk2118")
    assert on_2118 and {f.consequence for f in on_2118} == {L.UNSUPPORTED}
    assert "(RK2118 has no CPU operators; rknn-toolkit2 2.5.0 gathers" in on_2118[0].line()


def test_depthwise_kernel_is_limited_to_8():
    found = findings(_conv((4, 1, 9, 9), [1, 4, 32, 32], group=4), "rk3588")
    assert found and found[0].entry == "Depthwise Convolution" and "kernel h 9 outside 1-8" in found[0].limit
    assert found[0].consequence == L.KEPT and "check the board's results" in found[0].line()
    assert not findings(_conv((4, 4, 9, 9), [1, 4, 32, 32]), "rk3588")   # a regular conv takes 9×9


def test_conv_transpose_stride_differs_per_chip():
    w = const("w", RNG.normal(0, 0.1, (4, 4, 3, 3)))
    model = graph([helper.make_node("ConvTranspose", ["x", "w"], ["y"], name="up", strides=[3, 3])],
                  {"x": [1, 4, 8, 8]}, [w])
    on_3566 = [f for f in findings(model, "rk3566") if "stride h 3" in f.limit]   # 1, 2, 4 or 8 only
    # rknn-toolkit2 2.5.0: the zero insertion on the CPU (exConvTransposePad), the convolution on the NPU
    assert on_3566 and on_3566[0].consequence == L.CPU and on_3566[0].cpu_section == "§4.12 ConvTransposePad"
    assert L.placement(model.graph.node[0], model, "rk3566").target == "CPU"
    assert not findings(model, "rk3562")  # 1-8
    padded = graph([helper.make_node("ConvTranspose", ["x", "w"], ["y"], name="up", strides=[2, 2], pads=[3, 0, 0, 0])],
                   {"x": [1, 4, 8, 8]}, [w])
    assert any("pads rejected: kernel_h*dilation_h - dilation_h - pad_top < 0" in f.limit
               for f in findings(padded, "rk3588"))


def test_first_layer_width_rule():
    w = const("w", RNG.normal(0, 0.1, (4, 3, 3, 3)))
    wide = graph([helper.make_node("Conv", ["x", "w"], ["y"], name="first", pads=[1, 1, 1, 1])], {"x": [1, 3, 8, 5000]}, [w])
    found = findings(wide, "rk3566")
    assert found and "first layer" in found[0].limit and found[0].consequence == L.BOARD
    assert not findings(wide, "rk3588", "int8")   # int8: width <= 8192 and 5000*3 <= 2048*9 there
    assert findings(wide, "rk3588", "float16")     # float16: 5000*3 > 1024*9
    narrow = graph([helper.make_node("Conv", ["x", "w"], ["y"], name="first", pads=[1, 1, 1, 1])], {"x": [1, 3, 8, 300]}, [w])
    assert not findings(narrow, "rk3566")


# ----------------------------------------------------------------------------- Resize
def _resize(scale, x_shape=(1, 4, 8, 8), **attrs):
    scales = const("scales", [1, 1, scale, scale])
    return graph([helper.make_node("Resize", ["x", "", "scales"], ["y"], name="resize", **attrs)], {"x": list(x_shape)},
                 [scales])


def test_resize_scales():
    found = findings(_resize(2.5, mode="linear"), "rk3588")
    assert found and "2.5 × 2.5" in found[0].limit and found[0].consequence == L.CPU and "§4.50" in found[0].cpu_section
    assert "×5 on the NPU then a stride-2" in found[0].suggestion
    assert not findings(_resize(2.0, mode="linear"), "rk3588")
    assert findings(_resize(9.0, mode="nearest"), "rk3588")
    assert findings(_resize(2.0, mode="cubic"), "rk3588")
    # an exporter's nearest 'asymmetric'/'floor' ×2 picks the same pixels as half_pixel: stays on the NPU
    assert not findings(_resize(2.0, mode="nearest", coordinate_transformation_mode="asymmetric", nearest_mode="floor"),
                        "rk3566")
    assert findings(_resize(2.0, mode="linear", coordinate_transformation_mode="asymmetric"), "rk3566")
    assert findings(_resize(2.5, mode="linear"), "rk2118")[0].consequence == L.UNSUPPORTED
    assert findings(_resize(2.5, mode="linear"), "rk3562")[0].consequence == L.KEPT   # rknn-toolkit2 2.5.0
    # nearest by 1.5 and ×9 stay on the NPU with rknn-toolkit2 2.5.0: reported, not moved
    assert findings(_resize(1.5), "rk3588")[0].consequence == L.KEPT
    assert findings(_resize(0.5, mode="linear"), "rk3588")[0].consequence == L.KEPT


# ----------------------------------------------------------------------------- pooling, Softmax
def test_pooling_limits():
    pool = graph([helper.make_node("MaxPool", ["x"], ["y"], name="pool", kernel_shape=[8, 8])], {"x": [1, 4, 16, 16]})
    assert "kernel h 8 outside 1-7" in findings(pool, "rk3588")[0].limit
    assert findings(pool, "rk3588")[0].consequence == L.REWRITE   # a cascade of pooling layers
    ceil = graph([helper.make_node("MaxPool", ["x"], ["y"], name="pool", kernel_shape=[2, 2], strides=[2, 2],
                                   ceil_mode=1)], {"x": [1, 4, 15, 15]})
    assert any("ceil_mode" in f.limit for f in findings(ceil, "rk3588"))
    one = graph([helper.make_node("MaxPool", ["x"], ["y"], name="pool", kernel_shape=[1, 1])], {"x": [1, 4, 16, 16]})
    assert not findings(one, "rk3588") and findings(one, "rk2118")[0].consequence == L.UNSUPPORTED


def test_global_max_pool_input_size_differs_per_chip():
    model = graph([helper.make_node("GlobalMaxPool", ["x"], ["y"], name="gmp")], {"x": [1, 4, 1, 1]})
    assert findings(model, "rk3566")        # H, W 2-7 there
    assert not findings(model, "rk3588")    # 1-7
    big = graph([helper.make_node("GlobalMaxPool", ["x"], ["y"], name="gmp")], {"x": [1, 4, 20, 20]})
    assert findings(big, "rk3588") and not findings(big, "rk3576")   # 1-8192 on RK3576


def test_softmax_axes_and_chips():
    def softmax(axis):
        return graph([helper.make_node("Softmax", ["x"], ["y"], name="sm", axis=axis)], {"x": [1, 8, 4, 4]})
    assert not findings(softmax(1), "rk3588") and not findings(softmax(3), "rk3588")
    assert "axis 2" in findings(softmax(2), "rk3588")[0].limit
    on_3566 = findings(softmax(1), "rk3566")   # no NPU Softmax on RK3566/RK3568: the CPU one
    assert on_3566[0].consequence == L.CPU and "§4.57" in on_3566[0].cpu_section
    assert findings(softmax(2), "rk3588")[0].consequence == L.REWRITE   # Transpose + exSoftmax13 + Transpose


# ----------------------------------------------------------------------------- element-wise
def _binary(op, a, b):
    return graph([helper.make_node(op, ["a", "b"], ["y"], name="op")], {"a": a, "b": b})


def test_broadcast_patterns():
    assert not findings(_binary("Add", [1, 8, 16, 16], [1, 8, 16, 1]), "rk3588")
    assert not findings(_binary("Add", [1, 8, 16, 16], [1, 1, 1, 16]), "rk3588")
    channel = findings(_binary("Add", [1, 8, 16, 16], [1, 1, 16, 16]), "rk3588")
    assert channel and "Expand patterns" in channel[0].limit and channel[0].consequence == L.REWRITE
    assert findings(_binary("Sub", [1, 8, 16, 16], [1, 8, 16, 1]), "rk3588")   # Sub: [b,c,1,1] or scalar only
    assert not findings(_binary("Sub", [1, 8, 16, 16], [1, 8, 1, 1]), "rk3588")


def test_div_is_float16_only():
    model = _binary("Div", [1, 8, 4, 4], [1, 8, 4, 4])
    assert not findings(model, "rk3588", "float16")
    found = findings(model, "rk3588", "int8")
    assert found and "data type int8" in found[0].limit and found[0].consequence == L.CPU


def test_dtype_override_judges_every_layer_in_that_type():
    # openrknn keeps a Div of two activations in float16 in int8 builds; rknn-toolkit2 2.5.0 keeps it int8
    # and runs it on the CPU (its layer table), which the override reproduces
    model = _binary("Div", [1, 8, 4, 4], [1, 8, 4, 4])
    as_built = {"a": "float16", "b": "float16", "y": "float16"}
    assert not L.check_graph(model, "rk3588", as_built)
    found = L.check_graph(model, "rk3588", as_built, dtype_override="int8")
    assert found and found[0].consequence == L.CPU and "§4.16 Div" in found[0].cpu_section


def test_per_channel_activation_is_outside_the_limits():
    model = _binary("Add", [1, 8, 4, 4], [1, 8, 4, 4])
    quant = {"a": {"dtype": "int8", "axis": 1, "scale": [0.1] * 8, "zero_point": [0] * 8}}
    found = findings(model, "rk3588", "int8", quant)
    assert found and "per-channel" in found[0].limit
    assert not findings(model, "rk3588", "int8", {"a": {"dtype": "int8", "scale": [0.1], "zero_point": [0]}})


# ----------------------------------------------------------------------------- CPU-only ops
def test_cpu_only_ops_per_chip_cpu_list():
    argmax = graph([helper.make_node("ArgMax", ["x"], ["y"], name="am", axis=1)], {"x": [1, 8, 4, 4]})
    assert findings(argmax, "rk3588")[0].consequence == L.CPU                 # §4.5, full CPU list
    assert findings(argmax, "rv1106")[0].consequence == L.UNSUPPORTED         # not in the RV1106 subset
    assert findings(argmax, "rk2118")[0].consequence == L.UNSUPPORTED         # no CPU operators
    indices = const("i", np.array([0, 2], np.int64))
    gather = graph([helper.make_node("Gather", ["x", "i"], ["y"], name="g", axis=1)], {"x": [1, 8, 4, 4]}, [indices])
    assert not findings(gather, "rk3588")                                      # NPU entry
    assert findings(gather, "rv1106")[0].consequence == L.CPU                  # CPU Gather is in the subset
    assert findings(gather, "rk2118")[0].consequence == L.UNSUPPORTED


def test_placement_of_one_node():
    model = _transpose([0, 2, 3, 1], [1, 16, 8, 8])
    node = model.graph.node[0]
    assert L.placement(node, model, "rk3566").target == "CPU"
    assert L.placement(node, model, "rk3588").target == "NPU"
    assert L.placement(node, model, "rk2118").target == "NPU"   # fp16, 64 % 8 == 0: within the rule
    assert L.placement(node, model, "rk1808").target == "NPU"   # not covered: nothing to say
