"""Placement rules read off rknn-toolkit2 2.5.0's Target column on the perf stand-ins
(``bench/perf_placement.py``): each test is one rule, on a graph of a few nodes."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from openrknn.chips import get_chip
from openrknn.graph import npu_limits, placement
from openrknn.profile.layers import default_dtypes
from openrknn.profile.reference_nets import wrap_onnx


def _model(nodes, inputs, consts=(), outputs=None) -> onnx.ModelProto:
    values = [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs.items()]
    outs = [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in (outputs or [nodes[-1].output[0]])]
    graph = helper.make_graph(nodes, "g", values, outs, [numpy_helper.from_array(np.asarray(a), n) for n, a in consts])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def _limit_cpu(model: onnx.ModelProto, chip: str, dtype: str = "int8") -> set[str]:
    names = {o for n in model.graph.node for o in n.output} | {i.name for i in model.graph.input}
    found = npu_limits.check_graph(model, chip, {n: dtype for n in names}, {})
    return {f.node for f in found if f.consequence == npu_limits.CPU}


def _targets(onnx_model: onnx.ModelProto, chip_name: str, dtype: str | None = "asymmetric_quantized-8") -> dict[str, str]:
    model = wrap_onnx(onnx_model, dtype)
    model.metadata[placement.LIMIT_CPU_KEY] = sorted(_limit_cpu(onnx_model, chip_name, "int8" if dtype else "float16"))
    act, weight = default_dtypes(model.quantized_dtype)
    layers = placement.executed_layers(model, placement.LiveGraph(model), get_chip(chip_name), act, weight)
    return {node.name: layer.record.target for layer in layers for node in layer.nodes}


def _conv(name: str, x: str, y: str, channels: int = 8) -> tuple[onnx.NodeProto, tuple[str, np.ndarray]]:
    weight = np.ones((channels, channels, 1, 1), np.float32)
    return helper.make_node("Conv", [x, name + "_w"], [y], name=name), (name + "_w", weight)


def test_reduce_mean_is_lowered_onto_the_npu():
    """pp_liteseg's channel mean and LPRNet's global mean: Reshape + Conv layers on the NPU
    (RK3566/RK3562/RK3588/RK3576), not the CPU ReduceMean the operator list alone would give."""
    conv, w = _conv("conv", "x", "c")
    nodes = [conv, helper.make_node("ReduceMean", ["c"], ["m"], name="mean", axes=[1], keepdims=1),
             helper.make_node("Sigmoid", ["m"], ["y"], name="sig")]
    model = _model(nodes, {"x": [1, 8, 16, 16]}, [w])
    for chip in ("rk3566", "rk3562", "rk3588", "rk3576"):
        assert "mean" not in _limit_cpu(model, chip), chip
        assert _targets(model, chip)["mean"] == "NPU", chip


def test_reduce_max_runs_on_the_npu_of_rk3576_only():
    conv, w = _conv("conv", "x", "c")
    nodes = [conv, helper.make_node("ReduceMax", ["c"], ["m"], name="max", axes=[1], keepdims=1),
             helper.make_node("Sigmoid", ["m"], ["y"], name="sig")]
    model = _model(nodes, {"x": [1, 8, 16, 16]}, [w])
    assert _targets(model, "rk3576")["max"] == "NPU"
    for chip in ("rk3566", "rk3562", "rk3588"):
        assert _targets(model, chip)["max"] == "CPU", chip


def test_focus_slices_strided_in_height_and_width_stay_on_the_npu():
    """yolox's Focus stem (x[..., ::2, ::2] and its Concat): one Conv on the NPU for rknn-toolkit2;
    a Slice strided along the channels (LPRNet) still goes to the CPU."""
    consts = [("s0", np.array([0, 0], np.int64)), ("s1", np.array([1, 1], np.int64)),
              ("end", np.array([1 << 30, 1 << 30], np.int64)), ("hw", np.array([2, 3], np.int64)),
              ("two", np.array([2, 2], np.int64)), ("c0", np.array([0], np.int64)),
              ("cend", np.array([1 << 30], np.int64)), ("c", np.array([1], np.int64)), ("c2", np.array([2], np.int64))]
    nodes = [helper.make_node("Slice", ["x", "s0", "end", "hw", "two"], ["a"], name="focus_a"),
             helper.make_node("Slice", ["x", "s1", "end", "hw", "two"], ["b"], name="focus_b"),
             helper.make_node("Concat", ["a", "b"], ["cat"], name="cat", axis=1),
             helper.make_node("Slice", ["cat", "c0", "cend", "c", "c2"], ["y"], name="channel_step")]
    model = _model(nodes, {"x": [1, 4, 16, 16]}, consts)
    for chip in ("rk3566", "rk3562", "rk3588"):
        targets = _targets(model, chip)
        assert targets["focus_a"] == targets["focus_b"] == "NPU", chip
        assert targets["channel_step"] == "CPU", chip


def _attention() -> onnx.ModelProto:
    """Window attention as timm's TinyViT exports it (qkv → Reshape → Transpose → MatMul → Softmax →
    MatMul → Transpose → Reshape), 4 windows of 16 tokens."""
    tokens, dim, heads = 16, 8, 2
    consts = [("wqkv", np.ones((dim, 3 * dim), np.float32) * 0.1), ("qkv_shape", np.array([4, tokens, 3, heads, dim // heads], np.int64)),
              ("scale", np.array(0.5, np.float32)), ("out_shape", np.array([4, tokens, dim], np.int64))]
    nodes = [helper.make_node("MatMul", ["x", "wqkv"], ["qkv"], name="qkv"),
             helper.make_node("Reshape", ["qkv", "qkv_shape"], ["qkv5"], name="attn_reshape"),
             helper.make_node("Transpose", ["qkv5"], ["qkvt"], name="attn_transpose", perm=[2, 0, 3, 1, 4]),
             helper.make_node("Split", ["qkvt"], ["q3", "k3", "v3"], name="split", axis=0),
             helper.make_node("Squeeze", ["q3", "axis0"], ["q"], name="sq_q"),
             helper.make_node("Squeeze", ["k3", "axis0"], ["k"], name="sq_k"),
             helper.make_node("Squeeze", ["v3", "axis0"], ["v"], name="sq_v"),
             helper.make_node("Transpose", ["k"], ["kt"], name="k_transpose", perm=[0, 1, 3, 2]),
             helper.make_node("MatMul", ["q", "kt"], ["s"], name="qk"),
             helper.make_node("Mul", ["s", "scale"], ["ss"], name="scale_mul"),
             helper.make_node("Softmax", ["ss"], ["p"], name="softmax", axis=-1),
             helper.make_node("MatMul", ["p", "v"], ["o"], name="pv"),
             helper.make_node("Transpose", ["o"], ["ot"], name="o_transpose", perm=[0, 2, 1, 3]),
             helper.make_node("Reshape", ["ot", "out_shape"], ["y"], name="o_reshape")]
    consts.append(("axis0", np.array([0], np.int64)))
    return _model(nodes, {"x": [4, tokens, dim]}, consts)


def test_attention_without_an_npu_entry_runs_node_by_node_with_its_softmax_on_the_cpu():
    """RK3566/RK3568 have no exSDPAttention and no NPU Softmax: rknn-toolkit2 prints exMatMul (NPU),
    exSoftmax13 (CPU; the 4 windows folded into batch 1), exMatMul. On RK3588 the Softmax of the
    same block is an NPU entry."""
    model = _attention()
    assert "softmax" in _limit_cpu(model, "rk3566", "float16")
    targets = _targets(model, "rk3566", None)
    assert targets["softmax"] == "CPU"
    assert targets["qk"] == targets["pv"] == "NPU"
    assert "softmax" not in _limit_cpu(model, "rk3588", "float16")


def test_reshape_of_a_cpu_layer_output_stays_on_the_cpu():
    """RetinaFace's heads on RK3566: Conv → Transpose (CPU, outside the chip's Transpose rules) →
    Reshape: rknn-toolkit2 runs the Reshape on the CPU too."""
    conv, w = _conv("conv", "x", "c", 4)
    nodes = [conv, helper.make_node("Transpose", ["c"], ["t"], name="to_nhwc", perm=[0, 2, 3, 1]),
             helper.make_node("Reshape", ["t", "shape"], ["r"], name="flatten"),
             helper.make_node("Sigmoid", ["r"], ["y"], name="sig")]
    model = _model(nodes, {"x": [1, 4, 40, 40]}, [w, ("shape", np.array([1, -1, 2], np.int64))])
    targets = _targets(model, "rk3566")
    assert targets["to_nhwc"] == "CPU" and targets["flatten"] == "CPU" and targets["sig"] == "NPU"
    nhwc_npu = _targets(model, "rk3588")
    if nhwc_npu["to_nhwc"] == "NPU":
        assert nhwc_npu["flatten"] == "NPU"


def _decode(batch: int) -> onnx.ModelProto:
    """yolov5's box decode on its 5-D head tensor: Sigmoid → Split (last axis) → Mul → Concat."""
    nodes = [helper.make_node("Sigmoid", ["x"], ["s"], name="sig"),
             helper.make_node("Split", ["s", "parts"], ["xy", "rest"], name="split", axis=4),
             helper.make_node("Mul", ["xy", "two"], ["xy2"], name="mul"),
             helper.make_node("Concat", ["xy2", "rest"], ["y"], name="cat", axis=4)]
    return _model(nodes, {"x": [batch, 3, 8, 8, 6]}, [("parts", np.array([2, 4], np.int64)),
                                                      ("two", np.array(2.0, np.float32))])


def test_batch_one_five_d_decode_stays_on_the_npu():
    """rknn-toolkit2 folds a batch-1 5-D tensor into 4-D: yolov5's decode Split/Mul/Concat are NPU
    layers on RK3588 and RK3566; with a batch of 2 the operator list's CPU fallback stands."""
    for chip in ("rk3588", "rk3566"):
        assert not _limit_cpu(_decode(1), chip) & {"split", "mul", "cat"}, chip
    assert {"split", "mul", "cat"} <= _limit_cpu(_decode(2), "rk3588")


def test_int8_layer_norm_stays_on_the_npu():
    """exNorm lists float16 only, yet rknn-toolkit2 prints ``exNorm INT8`` on the NPU (PP-OCRv4 rec,
    FPN, the transformer encoder)."""
    nodes = [helper.make_node("LayerNormalization", ["x", "gamma", "beta"], ["y"], name="ln", axis=-1)]
    model = _model(nodes, {"x": [1, 16, 32]}, [("gamma", np.ones(32, np.float32)), ("beta", np.zeros(32, np.float32))])
    for chip in ("rk3588", "rk3566"):
        assert "ln" not in _limit_cpu(model, chip, "int8"), chip


def test_int8_group_norm_stays_on_the_npu():
    """A GroupNorm exported as ``InstanceNormalization`` over ``[1, groups, -1]`` (FPN's decoder,
    probes): rknn-toolkit2 prints ``exNorm INT8`` on the NPU too (the operator list has no
    InstanceNormalization entry: it was a CPU layer here)."""
    nodes = [helper.make_node("InstanceNormalization", ["x", "gamma", "beta"], ["y"], name="gn")]
    model = _model(nodes, {"x": [1, 8, 512]}, [("gamma", np.ones(8, np.float32)), ("beta", np.zeros(8, np.float32))])
    assert "gn" not in _limit_cpu(model, "rk3588", "int8")


def _window_attention_with_bias() -> onnx.ModelProto:
    """TinyViT's window attention (MobileSAM's encoder): :func:`_attention` with q scaled before
    q·kᵀ and a learned position bias added to the scores before the Softmax."""
    model = _attention()
    tokens = 16
    bias = np.linspace(-1, 1, tokens * tokens, dtype=np.float32).reshape(1, 1, tokens, tokens)
    nodes = []
    for node in model.graph.node:
        if node.name == "scale_mul":
            node = helper.make_node("Add", ["s", "bias"], ["ss"], name="bias_add")
        elif node.name == "qk":
            nodes.append(helper.make_node("Mul", ["q", "scale"], ["qs"], name="q_scale"))
            node = helper.make_node("MatMul", ["qs", "kt"], ["s"], name="qk")
        nodes.append(node)
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    model.graph.initializer.append(numpy_helper.from_array(bias, "bias"))
    return model


def test_unfused_attention_softmax_after_a_bias_add_runs_on_the_cpu(tmp_path):
    """RK3566 runs attention node by node (chip data ``lowering.fused_attention: false``) and
    rknn-toolkit2 prints ``exSoftmax13 FLOAT16 CPU`` for each of MobileSAM's 10 window Softmaxes,
    which read the scores plus a position bias: the exSoftmax13 layer (bias Add and Softmax) is on
    the CPU, the two exMatMul layers on the NPU."""
    import contextlib
    import io

    from rknn.api import RKNN
    path = tmp_path / "window_attention.onnx"
    onnx.save(_window_attention_with_bias(), str(path))
    rknn = RKNN()
    rknn.config(target_platform="rk3566")
    with contextlib.redirect_stdout(io.StringIO()):
        assert rknn.load_onnx(model=str(path)) == 0
        assert rknn.build(do_quantization=False) == 0
    model = rknn._model
    act, weight = default_dtypes(model.quantized_dtype)
    layers = placement.executed_layers(model, placement.LiveGraph(model), get_chip("rk3566"), act, weight)
    softmax = [layer for layer in layers if any(n.op_type == "Softmax" for n in layer.nodes)]
    assert len(softmax) == 1 and softmax[0].record.op_name == "exSoftmax13"
    assert softmax[0].record.target == "CPU"
    products = [layer.record.target for layer in layers if layer.record.op_name == "exMatMul"]
    assert products == ["NPU", "NPU"]
