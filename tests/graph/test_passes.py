"""Graph passes: each changes the structure it should and never the values."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from openrknn.graph.npu_layers import internal_tensors, layer_groups
from openrknn.graph.passes import FUSED_ACTIVATION_KEY, fused_activation, optimize
from tests.helpers import make_conv_model, reference_session


def _run(model: onnx.ModelProto, feeds: dict) -> list[np.ndarray]:
    return reference_session(model.SerializeToString()).run(None, feeds)


def _ops(model: onnx.ModelProto) -> list[str]:
    return [n.op_type for n in model.graph.node]


def test_batchnorm_folds_into_conv_with_equal_outputs(tmp_path):
    model = onnx.load(make_conv_model(tmp_path / "m.onnx"))
    x = np.random.default_rng(0).normal(size=(1, 3, 16, 16)).astype(np.float32)
    folded = optimize(model, 2)
    assert "BatchNormalization" not in _ops(folded) and "BatchNormalization" in _ops(optimize(model, 1))
    np.testing.assert_allclose(_run(folded, {"x": x})[0], _run(model, {"x": x})[0], rtol=1e-5, atol=1e-6)


def _gemm_bn_model(trans_b: int) -> onnx.ModelProto:
    rng = np.random.default_rng(1)
    w = rng.normal(size=(6, 4) if trans_b else (4, 6)).astype(np.float32)
    inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(rng.normal(size=6).astype(np.float32), "b")]
    for name, lo in (("s", 0.5), ("sh", -1), ("m", -1), ("v", 0.5)):
        inits.append(numpy_helper.from_array(rng.uniform(lo, 1.5, 6).astype(np.float32), name))
    nodes = [helper.make_node("Gemm", ["x", "w", "b"], ["g"], transB=trans_b),
             helper.make_node("BatchNormalization", ["g", "s", "sh", "m", "v"], ["y"], epsilon=1e-3)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 6])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


@pytest.mark.parametrize("trans_b", [0, 1])
def test_batchnorm_folds_into_gemm(trans_b):
    model = _gemm_bn_model(trans_b)
    x = np.random.default_rng(2).normal(size=(2, 4)).astype(np.float32)
    folded = optimize(model, 2)
    assert _ops(folded) == ["Gemm"]
    assert folded.graph.output[0].name == "y"
    np.testing.assert_allclose(_run(folded, {"x": x})[0], _run(model, {"x": x})[0], rtol=1e-5, atol=1e-5)


def test_shape_chain_folds_and_identity_goes(tmp_path):
    """x → Relu → Shape → Gather(0) → Unsqueeze → Concat([-1]) → Reshape(x) → Identity → y."""
    inits = [numpy_helper.from_array(np.array(0, dtype=np.int64), "zero"),
             numpy_helper.from_array(np.array([0], dtype=np.int64), "axes"),
             numpy_helper.from_array(np.array([-1], dtype=np.int64), "minus_one")]
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("Shape", ["r"], ["shape"]),
             helper.make_node("Gather", ["shape", "zero"], ["n"], axis=0),
             helper.make_node("Unsqueeze", ["n", "axes"], ["n1"]),
             helper.make_node("Concat", ["n1", "minus_one"], ["target"], axis=0),
             helper.make_node("Reshape", ["r", "target"], ["flat"], name="reshape"),
             helper.make_node("Identity", ["flat"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 12])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    optimized = optimize(model, 1)
    assert _ops(optimized) == ["Relu", "Reshape"]
    assert optimized.graph.output[0].name == "y"
    x = np.random.default_rng(3).normal(size=(2, 3, 4)).astype(np.float32)
    np.testing.assert_array_equal(_run(optimized, {"x": x})[0], _run(model, {"x": x})[0])
    assert _ops(optimize(model, 0)) == _ops(model)


def test_activation_fusion_marks_single_consumer_only(tmp_path):
    model = onnx.load(make_conv_model(tmp_path / "m.onnx"))
    optimized = optimize(model, 3)
    conv = next(n for n in optimized.graph.node if n.op_type == "Conv")
    assert fused_activation(conv) == "Relu"
    relu = next(n for n in optimized.graph.node if n.op_type == "Relu")
    assert [g.name for g in layer_groups(optimized.graph) if len(g.nodes) == 2] == [conv.name]
    assert layer_groups(optimized.graph)[0].internal == {conv.output[0]} and relu.output[0] not in internal_tensors(optimized.graph)
    # rknn-toolkit2 2.5.0 prints ConvRelu at optimization_level 0 too (measured): fusion is not a level option
    assert [fused_activation(n) for n in optimize(model, 2).graph.node if n.op_type == "Conv"] == ["Relu"]
    for level in (0, 1):   # BatchNormalization kept: BatchNormalizationRelu
        assert [fused_activation(n) for n in optimize(model, level).graph.node] == [None, "Relu"] + [None] * 5
    # a second reader of the conv output forbids the fusion: the NPU must store that tensor
    graph = optimized.graph
    graph.node.append(helper.make_node("Neg", [conv.output[0]], ["extra"]))
    graph.output.append(helper.make_tensor_value_info("extra", TensorProto.FLOAT, None))
    again = optimize(optimized, 3)   # the stale marks go
    assert fused_activation(next(n for n in again.graph.node if n.op_type == "Conv")) is None
    assert internal_tensors(again.graph) == set()


def test_random_ops_and_graph_outputs_are_not_folded():
    nodes = [helper.make_node("RandomUniform", [], ["u"], shape=[2], seed=1.0),
             helper.make_node("Add", ["u", "x"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    assert _ops(optimize(model, 3)) == ["RandomUniform", "Add"]


def test_unfused_channel_affine_folds_into_conv():
    """Conv → Mul(γ per channel) → Add(β per channel) → Sub(scalar) becomes one Conv."""
    rng = np.random.default_rng(4)
    inits = [numpy_helper.from_array(rng.normal(size=(4, 3, 3, 3)).astype(np.float32), "w"),
             numpy_helper.from_array(rng.uniform(0.5, 2, (1, 4, 1, 1)).astype(np.float32), "gamma"),
             numpy_helper.from_array(rng.normal(size=(4, 1, 1)).astype(np.float32), "beta"),
             numpy_helper.from_array(np.array(0.25, dtype=np.float32), "shift"),
             numpy_helper.from_array(rng.normal(size=(1, 1, 6, 6)).astype(np.float32), "spatial")]
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv"),
             helper.make_node("Mul", ["c", "gamma"], ["m"]),
             helper.make_node("Add", ["beta", "m"], ["a"]),
             helper.make_node("Sub", ["a", "shift"], ["s"]),
             helper.make_node("Mul", ["s", "spatial"], ["y"])]   # not per-channel: must stay
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 6, 6])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    folded = optimize(model, 2)
    assert _ops(folded) == ["Conv", "Mul"]
    x = rng.normal(size=(1, 3, 8, 8)).astype(np.float32)
    np.testing.assert_allclose(_run(folded, {"x": x})[0], _run(model, {"x": x})[0], rtol=1e-5, atol=1e-5)


def test_parallel_conv_branches_merge_into_one_conv():
    """RepVGG training form: Conv3×3(x) + Conv1×1(x) is one Conv, the identity BN(x) a layer of
    its own added by it, as rknn-toolkit2 2.5.0 runs it (measured); values equal up to float
    re-association."""
    import onnxruntime as ort
    rng = np.random.default_rng(4)
    inits = [numpy_helper.from_array(rng.normal(0, .3, (4, 2, 3, 3)).astype(np.float32), "w3"),
             numpy_helper.from_array(rng.normal(0, .3, 4).astype(np.float32), "b3"),
             numpy_helper.from_array(rng.normal(0, .3, (4, 2, 1, 1)).astype(np.float32), "w1"),
             numpy_helper.from_array(rng.uniform(.5, 1.5, 4).astype(np.float32), "g"),
             numpy_helper.from_array(rng.normal(0, .1, 4).astype(np.float32), "be"),
             numpy_helper.from_array(rng.normal(0, .1, 4).astype(np.float32), "mu"),
             numpy_helper.from_array(rng.uniform(.5, 1.5, 4).astype(np.float32), "va")]
    nodes = [helper.make_node("Conv", ["x", "w3", "b3"], ["a"], name="k3", pads=[1, 1, 1, 1], group=2),
             helper.make_node("Conv", ["x", "w1"], ["c"], name="k1", group=2),
             helper.make_node("BatchNormalization", ["x", "g", "be", "mu", "va"], ["n"], name="id"),
             helper.make_node("Add", ["a", "c"], ["s"], name="add1"),
             helper.make_node("Add", ["s", "n"], ["t"], name="add2"),
             helper.make_node("Relu", ["t"], ["y"], name="relu")]
    graph = helper.make_graph(nodes, "rep", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    merged = optimize(model, 3)
    assert sorted(_ops(merged)) == ["Add", "BatchNormalization", "Conv", "Relu"]
    x = rng.normal(size=(1, 4, 8, 8)).astype(np.float32)
    run = lambda m: ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(run(merged), run(model), rtol=1e-5, atol=1e-5)
    # branches on different inputs (a residual) stay apart
    residual = onnx.ModelProto()
    residual.CopyFrom(model)
    residual.graph.node[1].input[0] = "a"
    assert _ops(optimize(residual, 3)).count("Conv") == 2


@pytest.mark.parametrize("kxk_first", [True, False])
def test_strided_parallel_branches_stay_two_layers_fused_as_the_vendor_does(kxk_first):
    """A stride-2 Conv3×3(x) + Conv1×1(x) is not merged: rknn-toolkit2 2.5.0 prints ``Conv`` for the
    branch the exporter wrote second and ``ConvAddRelu`` for the first-written one (measured on
    timm's repvgg_a0 and on this probe with either branch first). Repeating the passes keeps it."""
    rng = np.random.default_rng(5)
    inits = [numpy_helper.from_array(rng.normal(0, .3, (4, 3, 3, 3)).astype(np.float32), "w3"),
             numpy_helper.from_array(rng.normal(0, .3, (4, 3, 1, 1)).astype(np.float32), "w1")]
    k3 = helper.make_node("Conv", ["x", "w3"], ["a"], name="k3", pads=[1, 1, 1, 1], strides=[2, 2])
    k1 = helper.make_node("Conv", ["x", "w1"], ["c"], name="k1", strides=[2, 2])
    nodes = ([k3, k1] if kxk_first else [k1, k3]) + [helper.make_node("Add", ["c", "a"], ["s"], name="add"),
                                                     helper.make_node("Relu", ["s"], ["y"], name="relu")]
    graph = helper.make_graph(nodes, "rep", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 4, 4])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    optimized = optimize(model, 3)
    assert _ops(optimized).count("Conv") == 2
    fused_into = "k3" if kxk_first else "k1"
    groups = [[n.name for n in g.nodes] for g in layer_groups(optimized.graph)]
    assert groups == [["k1" if kxk_first else "k3"], [fused_into, "add", "relu"]]
    again = optimize(optimized, 3)
    assert [n.name for n in again.graph.node] == [n.name for n in optimized.graph.node]
    x = rng.normal(size=(1, 3, 8, 8)).astype(np.float32)
    np.testing.assert_allclose(_run(optimized, {"x": x})[0], _run(model, {"x": x})[0], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("form", ["pointwise", "depthwise", "dense3x3", "plain_residual"])
def test_default_identity_bn_branch_goes_into_the_merged_conv(form):
    """MobileOne/RepVGG block with an untrained identity BN (γ = 1, β = 0, mean 0, variance 1):
    rknn-toolkit2 2.5.0 runs the whole block as one ``ConvRelu`` (measured on timm's mobileone_s0
    and on probes of these three forms); the fold is exact (the BN's 1/√(1+ε) is kept)."""
    rng = np.random.default_rng(6)
    c = 4
    group, k = {"pointwise": (1, 1), "depthwise": (c, 3), "dense3x3": (1, 3), "plain_residual": (2, 3)}[form]
    inits = [numpy_helper.from_array(rng.normal(0, .3, (c, c // group, k, k)).astype(np.float32), "wa"),
             numpy_helper.from_array(rng.normal(0, .3, c).astype(np.float32), "ba"),
             numpy_helper.from_array(rng.normal(0, .3, (c, c // group, 1, 1)).astype(np.float32), "wb"),
             numpy_helper.from_array(np.ones(c, np.float32), "g"), numpy_helper.from_array(np.zeros(c, np.float32), "be"),
             numpy_helper.from_array(np.zeros(c, np.float32), "mu"), numpy_helper.from_array(np.ones(c, np.float32), "va")]
    pad = [k // 2] * 4
    identity = "x" if form == "plain_residual" else "n"
    nodes = [helper.make_node("BatchNormalization", ["x", "g", "be", "mu", "va"], ["n"], name="id", epsilon=1e-3),
             helper.make_node("Conv", ["x", "wa", "ba"], ["a"], name="ka", pads=pad, group=group),
             helper.make_node("Conv", ["x", "wb"], ["b"], name="kb", group=group),
             helper.make_node("Add", ["a", "b"], ["s"], name="add1"),
             helper.make_node("Add", ["s", identity], ["t"], name="add2"),
             helper.make_node("Relu", ["t"], ["y"], name="relu")]
    if form == "plain_residual":
        nodes = nodes[1:]
        inits = inits[:3]
    graph = helper.make_graph(nodes, "one", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, c, 8, 8])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    merged = optimize(model, 3)
    assert _ops(merged) == ["Conv", "Relu"]
    assert [[n.op_type for n in g.nodes] for g in layer_groups(merged.graph)] == [["Conv", "Relu"]]
    x = rng.normal(size=(1, c, 8, 8)).astype(np.float32)
    np.testing.assert_allclose(_run(merged, {"x": x})[0], _run(model, {"x": x})[0], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("stride", [1, 2])
def test_depthwise_conv_branches_never_take_the_add(stride):
    """Depthwise 3×3(x) + depthwise 1×1(x): rknn-toolkit2 2.5.0 never prints ``ConvAdd`` for a
    depthwise Conv (measured on mobileone_s0's strided blocks and on probes at stride 1 and 2: at
    stride 2 ``Conv``, ``Conv``, ``AddRelu``; at stride 1 with a trained identity BN the merged
    ``Conv``, ``BatchNormalization``, ``AddRelu``)."""
    rng = np.random.default_rng(7)
    c = 4
    inits = [numpy_helper.from_array(rng.normal(0, .3, (c, 1, 3, 3)).astype(np.float32), "w3"),
             numpy_helper.from_array(rng.normal(0, .3, (c, 1, 1, 1)).astype(np.float32), "w1"),
             numpy_helper.from_array(rng.uniform(.5, 1.5, c).astype(np.float32), "g"),
             numpy_helper.from_array(rng.normal(0, .1, c).astype(np.float32), "be"),
             numpy_helper.from_array(rng.normal(0, .1, c).astype(np.float32), "mu"),
             numpy_helper.from_array(rng.uniform(.5, 1.5, c).astype(np.float32), "va")]
    nodes = [helper.make_node("Conv", ["x", "w1"], ["b"], name="k1", group=c, strides=[stride] * 2),
             helper.make_node("Conv", ["x", "w3"], ["a"], name="k3", pads=[1] * 4, group=c, strides=[stride] * 2),
             helper.make_node("Add", ["b", "a"], ["s"], name="add1")]
    if stride == 1:
        nodes += [helper.make_node("BatchNormalization", ["x", "g", "be", "mu", "va"], ["n"], name="id"),
                  helper.make_node("Add", ["s", "n"], ["t"], name="add2")]
    nodes.append(helper.make_node("Relu", [nodes[-1].output[0]], ["y"], name="relu"))
    side = 8 // stride
    graph = helper.make_graph(nodes, "dw", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, c, side, side])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    optimized = optimize(model, 3)
    groups = [[n.op_type for n in g.nodes] for g in layer_groups(optimized.graph)]
    if stride == 2:
        assert groups == [["Conv"], ["Conv"], ["Add", "Relu"]]
    else:
        assert sorted(groups) == [["Add", "Relu"], ["BatchNormalization"], ["Conv"]]
    x = rng.normal(size=(1, c, 8, 8)).astype(np.float32)
    np.testing.assert_allclose(_run(optimized, {"x": x})[0], _run(model, {"x": x})[0], rtol=1e-5, atol=1e-5)
