"""The integer simulator equals the numpy integer reference bit for bit, on worst-case patterns.

Weights at −128/+127, activations at both ends of their range and 3…512 input channels are the
patterns where a kernel that adds pairs of u8·s8 products in 16 bits (onnxruntime's x86 u8×s8
path on AVX2 without VNNI) saturates on full-range weights. These tests also run under ``qemu-x86_64 -cpu Haswell`` in
``.ci/run``, so they check exactness on a CPU without VNNI whatever CPU the machine has.
"""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from openrknn.sim import integer_arithmetic
from openrknn.sim.quantized import lower_quantized
from rknn.api import RKNN
from tests.quant import integer_patterns as patterns
from tests.quant import integer_reference as ref

SIZE = patterns.SIZE


def _build(tmp_path, nodes, inits, channels, out_c, seed=0, platform="rk3588"):
    return patterns.build_with_tail(tmp_path, nodes, inits, channels, out_c, seed, platform)


CONV_CASES = [  # (input channels, kernel, group)
    (3, 3, 1), (16, 3, 1), (64, 3, 1), (512, 1, 1), (512, 3, 1), (16, 3, 16), (64, 3, 64), (64, 5, 64), (64, 3, 4)]


@pytest.mark.parametrize("channels,kernel,group", CONV_CASES)
def test_conv_is_bit_exact_on_worst_case_patterns(tmp_path, channels, kernel, group):
    rng = np.random.default_rng(channels + kernel + group)
    out_c = channels if group == channels else 32
    pads = [kernel // 2] * 4
    w = numpy_helper.from_array(rng.normal(0, 0.3, (out_c, channels // group, kernel, kernel)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.normal(0, 0.1, out_c).astype(np.float32), "b")
    # rk3588 runs a Conv this deep over input-channel tiles and 16-wide groups per group
    # (graph/passes/wide_convs.py); the one deep integer sum is checked where it stays one layer
    lowered = channels * kernel * kernel // group > 3072 or 1 < group < channels
    model = _build(tmp_path, [helper.make_node("Conv", ["x", "w", "b"], ["t"], name="layer", pads=pads, group=group)],
                   [w, b], channels, out_c, platform="rk3562" if lowered else "rk3588")
    weight = patterns.worst_case_weight(model, "w", channels)
    bias = numpy_helper.to_array(next(i for i in model.graph.graph.initializer if i.name == "b")).astype(np.int64)
    x, xq = patterns.extreme_input(model, channels, SIZE, channels)
    px, pw = patterns.params(model, "x"), patterns.params(model, "w")
    acc = ref.conv_acc(xq, weight - pw.zero_point.reshape(-1, 1, 1, 1), pads=pads, group=group) + bias.reshape(1, -1, 1, 1)
    patterns.spread_output(model, "t", acc, px.scale[0], pw.scale)
    expected = ref.requantize(acc, px.scale[0], pw.scale, patterns.params(model, "t"), channel_axis=1)
    got = patterns.run_integers(model, x, ["t"])["t"]
    assert len(np.unique(expected)) > 20          # the pattern spreads over the range, not all clamped
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("channels,kernel,stride", [(16, 2, 2), (64, 3, 2), (512, 4, 2)])
def test_conv_transpose_is_bit_exact(tmp_path, channels, kernel, stride):
    """Integer ConvTranspose (no onnxruntime integer kernel: exact float32 sums, split weights at 512)."""
    rng = np.random.default_rng(channels)
    pads = [kernel // 2 - 1 if kernel > 2 else 0] * 4
    w = numpy_helper.from_array(rng.normal(0, 0.3, (channels, 8, kernel, kernel)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.normal(0, 0.1, 8).astype(np.float32), "b")
    model = _build(tmp_path, [helper.make_node("ConvTranspose", ["x", "w", "b"], ["t"], name="layer",
                                               strides=[stride, stride], pads=pads)], [w, b], channels, 8)
    lowered_ops = {n.op_type for n in lower_quantized(model).graph.node}
    assert "ConvTranspose" in lowered_ops and model.tensor_dtypes["w"] == "int8"
    weight = patterns.worst_case_weight(model, "w", channels)
    bias = numpy_helper.to_array(next(i for i in model.graph.graph.initializer if i.name == "b")).astype(np.int64)
    x, xq = patterns.extreme_input(model, channels, SIZE, channels)
    px, pw = patterns.params(model, "x"), patterns.params(model, "w")
    acc = ref.conv_transpose_acc(xq, weight, strides=(stride, stride), pads=pads) + bias.reshape(1, -1, 1, 1)
    patterns.spread_output(model, "t", acc, px.scale[0], pw.scale)
    expected = ref.requantize(acc, px.scale[0], pw.scale, patterns.params(model, "t"), channel_axis=1)
    np.testing.assert_array_equal(patterns.run_integers(model, x, ["t"])["t"], expected)


@pytest.mark.parametrize("op,transposed,k", [("MatMul", False, 16), ("MatMul", False, 512), ("Gemm", True, 512)])
def test_matmul_and_gemm_are_bit_exact(tmp_path, op, transposed, k):
    """A MatMul / Gemm on the rows of an integer tensor (``[H·W, K]``), K = 16 or 512."""
    rng = np.random.default_rng(k)
    channels = 4
    shape = (24, k) if transposed else (k, 24)
    w = numpy_helper.from_array(rng.normal(0, 0.3, shape).astype(np.float32), "w")
    w_in = numpy_helper.from_array(rng.normal(0, 0.3, (k, channels, 1, 1)).astype(np.float32), "w_in")
    shape_2d = numpy_helper.from_array(np.array([-1, k], np.int64), "shape_2d")
    nodes = [helper.make_node("Conv", ["x", "w_in"], ["c"], name="expand"),
             helper.make_node("Transpose", ["c"], ["ct"], perm=[0, 2, 3, 1], name="nhwc"),
             helper.make_node("Reshape", ["ct", "shape_2d"], ["rows"], name="rows")]
    if op == "Gemm":
        b = numpy_helper.from_array(rng.normal(0, 0.1, 24).astype(np.float32), "b")
        nodes.append(helper.make_node("Gemm", ["rows", "w", "b"], ["mm"], name="layer", transB=1))
        inits = [w, w_in, shape_2d, b]
    else:
        nodes.append(helper.make_node("MatMul", ["rows", "w"], ["mm"], name="layer"))
        inits = [w, w_in, shape_2d]
    back = numpy_helper.from_array(np.array([1, SIZE, SIZE, 24], np.int64), "back")
    nodes += [helper.make_node("Reshape", ["mm", "back"], ["mm4"], name="back"),
              helper.make_node("Transpose", ["mm4"], ["t"], perm=[0, 3, 1, 2], name="nchw")]
    inits.append(back)
    model = _build(tmp_path, nodes, inits, channels, 24)
    weight = patterns.worst_case_weight(model, "w", k)
    x, _ = patterns.extreme_input(model, channels, SIZE, k)
    rows = patterns.run_integers(model, x, ["rows"])["rows"]
    pr, pw = patterns.params(model, "rows"), patterns.params(model, "w")
    matrix = (weight.T if transposed else weight) - pw.zero_point.reshape(1, -1)
    acc = ref.matmul_acc(rows - pr.zero_point[0], matrix)
    if op == "Gemm":
        acc = acc + numpy_helper.to_array(next(i for i in model.graph.graph.initializer if i.name == "b")).astype(np.int64)
    patterns.spread_output(model, "mm", acc, pr.scale[0], pw.scale)
    expected = ref.requantize(acc, pr.scale[0], pw.scale, patterns.params(model, "mm"), channel_axis=1)
    got = patterns.run_integers(model, x, ["mm"])["mm"]
    assert len(np.unique(expected)) > 20
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("op,fn", [("Add", np.add), ("Mul", np.multiply)])
def test_elementwise_requantization_is_bit_exact(tmp_path, op, fn):
    """Add / Mul of two integer tensors with different parameters, requantized to a third."""
    rng = np.random.default_rng(5)
    wa = numpy_helper.from_array(rng.normal(0, 0.5, (8, 8, 1, 1)).astype(np.float32), "wa")
    wb = numpy_helper.from_array(rng.normal(0, 0.2, (8, 8, 1, 1)).astype(np.float32), "wb")
    nodes = [helper.make_node("Conv", ["x", "wa"], ["ca"], name="conv_a"),   # pools keep a and b stored
             helper.make_node("MaxPool", ["ca"], ["a"], name="pool_a", kernel_shape=[1, 1]),
             helper.make_node("Conv", ["x", "wb"], ["cb"], name="conv_b"),   # (a Conv + Add is one layer)
             helper.make_node("MaxPool", ["cb"], ["b"], name="pool_b", kernel_shape=[1, 1]),
             helper.make_node(op, ["a", "b"], ["t"], name="layer")]
    model = _build(tmp_path, nodes, [wa, wb], 8, 8)
    x = np.random.default_rng(6).uniform(-3, 3, (1, 8, SIZE, SIZE)).astype(np.float32)
    values = patterns.run_integers(model, x, ["a", "b", "t"])
    expected = ref.elementwise(fn, [(values["a"], patterns.params(model, "a")), (values["b"], patterns.params(model, "b"))],
                               patterns.params(model, "t"))
    assert len(np.unique(expected)) > 20
    np.testing.assert_array_equal(values["t"], expected)


# ---------------------------------------------------------------- what the CPU is handed
_INTEGER_OPS = {"QLinearConv": (0, 3, 5), "MatMulInteger": (0, 1, 3), "ConvInteger": (0, 1, 3),
                "QLinearMatMul": (0, 3, 5)}
_SAFE_WEIGHT = 64   # 2·255·64 < 2^15: a pair of u8·s8 products fits a 16-bit lane


def saturating_ops(model: onnx.ModelProto) -> list[str]:
    """Integer Conv/MatMul nodes with uint8 activations and int8 weights that can reach beyond ±64
    from their zero point: a kernel adding pairs of u8·s8 products in 16 bits may saturate on them."""
    model = onnx.shape_inference.infer_shapes(model)
    types = {v.name: v.type.tensor_type.elem_type for v in
             list(model.graph.value_info) + list(model.graph.input) + list(model.graph.output)}
    inits = {i.name: i for i in model.graph.initializer}
    types.update({name: i.data_type for name, i in inits.items()})
    found = []
    for node in model.graph.node:
        if node.op_type not in _INTEGER_OPS:
            continue
        act, weight, zero = (node.input[i] if i < len(node.input) else "" for i in _INTEGER_OPS[node.op_type])
        if types.get(act) != TensorProto.UINT8 or types.get(weight) != TensorProto.INT8:
            continue
        if weight not in inits:
            found.append(node.name or node.output[0])
            continue
        values = numpy_helper.to_array(inits[weight]).astype(np.int64)
        offset = numpy_helper.to_array(inits[zero]).astype(np.int64) if zero in inits else np.zeros(1, np.int64)
        axis = 0 if node.op_type in ("QLinearConv", "ConvInteger") else values.ndim - 1
        shape = [1] * values.ndim
        shape[axis] = -1 if offset.size > 1 else 1
        if np.abs(values - offset.reshape(shape)).max() > _SAFE_WEIGHT:
            found.append(node.name or node.output[0])
    return found


def _conv_kinds(model: onnx.ModelProto, names: list[str]) -> dict[str, str]:
    """Node name → "plain" (non-grouped), "depthwise" or "other" for the nodes ``names``."""
    inits = {i.name: i for i in model.graph.initializer}
    kinds = {}
    for node in model.graph.node:
        name = node.name or node.output[0]
        if name in names:
            group = next((a.i for a in node.attribute if a.name == "group"), 1)
            depthwise = group > 1 and node.input[3] in inits and inits[node.input[3]].dims[1] == 1
            kinds[name] = "plain" if group == 1 else "depthwise" if depthwise else "other"
    return kinds


def _unprobed(model: onnx.ModelProto, names: list[str]) -> list[str]:
    """``names`` less the u8 × s8 Convs whose kind (non-grouped / depthwise) the runtime's probe
    found exact with full-range weights."""
    exact = {"plain": integer_arithmetic.full_range_u8s8_is_exact(False),
             "depthwise": integer_arithmetic.full_range_u8s8_is_exact(True), "other": False}
    return [name for name, kind in _conv_kinds(model, names).items() if not exact[kind]]


@pytest.mark.parametrize("runtime_probe", ["saturating kernel", "this runtime"])
def test_lowered_graph_has_no_kernel_that_can_saturate(tmp_path, quant_setup, monkeypatch, runtime_probe):
    """Neither our lowering nor onnxruntime's optimizer hands the CPU a u8 × s8 integer op with
    full-range weights unless a probe found the runtime's kernel exact for that kind of Conv
    (else non-grouped Convs carry 7-bit weight halves, grouped ones u8 × u8)."""
    if runtime_probe == "saturating kernel":
        monkeypatch.setattr(integer_arithmetic, "_u8s8_probe", lambda depthwise: False)
    rknn = RKNN()
    assert rknn.config(target_platform="rk3588", mean_values=[[0, 0, 0]], std_values=[[255, 255, 255]]) == 0
    assert rknn.load_onnx(model=str(quant_setup["model"])) == 0
    assert rknn.build(do_quantization=True, dataset=str(quant_setup["dataset"])) == 0
    lowered = lower_quantized(rknn._model)
    assert "QLinearConv" in {n.op_type for n in lowered.graph.node}
    full_range = saturating_ops(lowered)
    plain = [n for n, kind in _conv_kinds(lowered, full_range).items() if kind == "plain"]
    assert (plain != []) == integer_arithmetic.full_range_u8s8_is_exact()   # the faster form where exact
    assert _unprobed(lowered, full_range) == []
    import onnxruntime as ort
    from openrknn.graph import runner as sim_session
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    options.optimized_model_filepath = str(tmp_path / "optimized.onnx")
    lowered.ir_version = min(lowered.ir_version, 10)   # older onnxruntime (Python 3.10) reads IR ≤ 11
    ort.InferenceSession(lowered.SerializeToString(), options, providers=["CPUExecutionProvider"],
                         disabled_optimizers=sim_session.disabled_optimizers(lowered))
    optimized = onnx.load(str(tmp_path / "optimized.onnx"))
    assert _unprobed(optimized, saturating_ops(optimized)) == []
    fused = {n.op_type for n in optimized.graph.node if n.op_type.startswith("QLinear")} - {"QLinearConv"}
    assert not fused, f"onnxruntime fused Q/DQ into {fused}, whose arithmetic is not the documented one"


def test_structural_check_finds_full_range_unsigned_by_signed_ops():
    """The check above can fail: a u8-activation × s8-weight QLinearConv with a weight of −128 is
    reported; the same op with 7-bit weights is not."""
    def model(weight_value):
        inits = [numpy_helper.from_array(np.full((2, 2, 1, 1), weight_value, np.int8), "w"),
                 numpy_helper.from_array(np.float32(1), "s"), numpy_helper.from_array(np.uint8(128), "z"),
                 numpy_helper.from_array(np.int8(0), "wz")]
        node = helper.make_node("QLinearConv", ["x", "s", "z", "w", "s", "wz", "s", "z"], ["y"], name="u8s8")
        graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.UINT8, [1, 2, 2, 2])],
                                  [helper.make_tensor_value_info("y", TensorProto.UINT8, None)], inits)
        return helper.make_model(graph)
    assert saturating_ops(model(-128)) == ["u8s8"]
    assert saturating_ops(model(-64)) == []


@pytest.mark.parametrize("channels", [16, 512])
def test_conv_inside_a_hard_swish_layer_is_exact(tmp_path, channels):
    """A Conv whose output stays inside its layer (hard-swish follows): the exact integer sum, then
    ``float32(acc)·float32(s_x·s_w)`` and the hard-swish steps in float32, quantized once. 512
    channels at full range pass 2^24, so the integer kernel computes that sum."""
    rng = np.random.default_rng(channels)
    w = numpy_helper.from_array(rng.normal(0, 0.3, (8, channels, 3, 3)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.normal(0, 0.1, 8).astype(np.float32), "b")
    consts = [numpy_helper.from_array(np.array(v, np.float32), n) for n, v in (("three", 3), ("zero", 0), ("six", 6))]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="layer", pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["c", "three"], ["a"]), helper.make_node("Clip", ["a", "zero", "six"], ["k"]),
             helper.make_node("Mul", ["c", "k"], ["m"]), helper.make_node("Div", ["m", "six"], ["t"])]
    # rk3588 splits a 512×3×3 Conv over input-channel tiles (graph/passes/wide_convs.py): the one
    # deep sum inside a hard-swish layer is checked where the Conv stays whole
    model = _build(tmp_path, nodes, [w, b] + consts, channels, 8, platform="rk3562" if channels * 9 > 3072 else "rk3588")
    assert "c" not in model.quant_params
    # a non-grouped Conv inside its layer: onnxruntime's ConvInteger (u8 × u8), faster than float32 there
    assert "ConvInteger" in {n.op_type for n in lower_quantized(model).graph.node if n.output[0].startswith("c__")}
    weight = patterns.worst_case_weight(model, "w", channels)
    bias = numpy_helper.to_array(next(i for i in model.graph.graph.initializer if i.name == "b")).astype(np.int64)
    x, xq = patterns.extreme_input(model, channels, SIZE, channels)
    px, pw = patterns.params(model, "x"), patterns.params(model, "w")
    acc = ref.conv_acc(xq, weight, pads=[1, 1, 1, 1]) + bias.reshape(1, -1, 1, 1)
    real = acc.astype(np.float32) * (np.float32(px.scale[0]) * pw.scale.astype(np.float32)).reshape(1, -1, 1, 1)
    hard_swish = real * np.clip(real + np.float32(3), np.float32(0), np.float32(6)) / np.float32(6)
    record = model.quant_params["t"]   # spread the output over the integer range
    record["scale"], record["zero_point"] = [float(np.abs(hard_swish).max() / 100)], [0]
    expected = np.clip(np.rint(hard_swish / np.float32(record["scale"][0])), -128, 127).astype(np.int64)
    assert len(np.unique(expected)) > 20
    np.testing.assert_array_equal(patterns.run_integers(model, x, ["t"])["t"], expected)


def test_grouped_conv_with_a_bias_beyond_float32_runs_as_float_sums_plus_an_int32_bias(tmp_path):
    """Two channels per group on rk3562, which keeps a grouped Conv whole (a depthwise Conv before a
    hard-swish now stores its sum in int8, as rknn-toolkit2 does: quant/annotate.py). The sums fit
    below 2^24 but sums + bias do not (a saturated int32 bias, as PP-OCRv4 rec's depthwise 5×5 Convs
    get): one float32 Conv for the sums, the bias added in int32 — the integer
    kernel's result, without onnxruntime's ConvInteger (~2.7x slower on grouped Convs)."""
    channels = 16
    rng = np.random.default_rng(7)
    w = numpy_helper.from_array(rng.normal(0, 0.3, (channels, 2, 3, 3)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.normal(0, 0.1, channels).astype(np.float32), "b")
    consts = [numpy_helper.from_array(np.array(v, np.float32), n) for n, v in (("three", 3), ("zero", 0), ("six", 6))]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="layer", pads=[1, 1, 1, 1], group=channels // 2),
             helper.make_node("Add", ["c", "three"], ["a"]), helper.make_node("Clip", ["a", "zero", "six"], ["k"]),
             helper.make_node("Mul", ["c", "k"], ["m"]), helper.make_node("Div", ["m", "six"], ["t"])]
    model = _build(tmp_path, nodes, [w, b] + consts, channels, channels, platform="rk3562")
    assert "c" not in model.quant_params
    weight = patterns.worst_case_weight(model, "w", channels)
    x, xq = patterns.extreme_input(model, channels, SIZE, channels)
    px, pw = patterns.params(model, "x"), patterns.params(model, "w")
    bias_init = next(i for i in model.graph.graph.initializer if i.name == "b")
    bias = numpy_helper.to_array(bias_init).astype(np.int64)
    bias[0] = 2 ** 24   # one channel's bias past 2^24: float32(acc) rounds there, as the reference does
    bias_init.CopyFrom(numpy_helper.from_array(bias.astype(np.int32), "b"))
    layer_ops = {n.op_type for n in lower_quantized(model).graph.node if n.output[0].startswith("c__")}
    assert "Conv" in layer_ops and "ConvInteger" not in layer_ops
    acc = ref.conv_acc(xq, weight, pads=[1, 1, 1, 1], group=channels // 2) + bias.reshape(1, -1, 1, 1)
    assert np.abs(acc[:, 0]).max() > 2 ** 24
    real = acc.astype(np.float32) * (np.float32(px.scale[0]) * pw.scale.astype(np.float32)).reshape(1, -1, 1, 1)
    hard_swish = real * np.clip(real + np.float32(3), np.float32(0), np.float32(6)) / np.float32(6)
    record = model.quant_params["t"]   # spread the other channels over the range (channel 0 saturates)
    record["scale"], record["zero_point"] = [float(np.abs(hard_swish[:, 1:]).max() / 100)], [0]
    expected = np.clip(np.rint(hard_swish / np.float32(record["scale"][0])), -128, 127).astype(np.int64)
    assert len(np.unique(expected)) > 20
    np.testing.assert_array_equal(patterns.run_integers(model, x, ["t"])["t"], expected)
