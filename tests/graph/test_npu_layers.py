"""The NPU layer graph: the fusions exporters' graphs get, as each exporter writes them."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from openrknn.graph import npu_layers
from openrknn.graph.npu_layers import find_layers, internal_tensors, layer_groups
from openrknn.graph.passes import optimize
from tests.helpers import quantized_build

C = 4


def _const(name, value):
    return numpy_helper.from_array(np.asarray(value, np.float32), name)


def _model(tail_nodes, extra_inits=(), out="y"):
    """x → Conv(w) → c → tail → ``out`` (graph output)."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.normal(0, 0.3, (C, C, 3, 3)).astype(np.float32), "w"), *extra_inits]
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]), *tail_nodes]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, C, 8, 8])],
                              [helper.make_tensor_value_info(out, TensorProto.FLOAT, [1, C, 8, 8])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _hard_swish_div_after():
    return [helper.make_node("Add", ["c", "three"], ["a"]), helper.make_node("Clip", ["a", "zero", "six"], ["k"]),
            helper.make_node("Mul", ["c", "k"], ["m"]), helper.make_node("Div", ["m", "six"], ["y"])]


def _hard_swish_times_sixth():
    return [helper.make_node("Add", ["c", "three"], ["a"]), helper.make_node("Clip", ["a", "zero", "six"], ["k"]),
            helper.make_node("Mul", ["c", "k"], ["m"]), helper.make_node("Mul", ["m", "sixth"], ["y"])]


def _hard_swish_div_inside():
    return [helper.make_node("Add", ["c", "three"], ["a"]), helper.make_node("Clip", ["a", "zero", "six"], ["k"]),
            helper.make_node("Div", ["k", "six"], ["g"]), helper.make_node("Mul", ["c", "g"], ["y"])]


def _hard_swish_hardsigmoid():
    return [helper.make_node("HardSigmoid", ["c"], ["g"], alpha=1 / 6, beta=0.5),
            helper.make_node("Mul", ["c", "g"], ["y"])]


def _silu():
    return [helper.make_node("Sigmoid", ["c"], ["g"]), helper.make_node("Mul", ["c", "g"], ["y"])]


def _mish():
    return [helper.make_node("Softplus", ["c"], ["s"]), helper.make_node("Tanh", ["s"], ["t"]),
            helper.make_node("Mul", ["c", "t"], ["y"])]


def _gelu_erf():   # x·0.5·(1 + erf(x/√2)), PyTorch's export
    return [helper.make_node("Div", ["c", "sqrt2"], ["d"]), helper.make_node("Erf", ["d"], ["e"]),
            helper.make_node("Add", ["e", "one"], ["p"]), helper.make_node("Mul", ["c", "p"], ["m"]),
            helper.make_node("Mul", ["m", "half"], ["y"])]


def _gelu_erf_half_first():   # (x·0.5)·(1 + erf(x/√2))
    return [helper.make_node("Mul", ["c", "half"], ["h"]), helper.make_node("Div", ["c", "sqrt2"], ["d"]),
            helper.make_node("Erf", ["d"], ["e"]), helper.make_node("Add", ["e", "one"], ["p"]),
            helper.make_node("Mul", ["h", "p"], ["y"])]


def _gelu_tanh():   # 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))
    return [helper.make_node("Pow", ["c", "three"], ["cube"]), helper.make_node("Mul", ["cube", "k044"], ["kc"]),
            helper.make_node("Add", ["c", "kc"], ["inner"]), helper.make_node("Mul", ["inner", "s2pi"], ["z"]),
            helper.make_node("Tanh", ["z"], ["t"]), helper.make_node("Add", ["t", "one"], ["p"]),
            helper.make_node("Mul", ["c", "p"], ["m"]), helper.make_node("Mul", ["m", "half"], ["y"])]


CONSTS = [_const("three", 3.0), _const("zero", 0.0), _const("six", 6.0), _const("sixth", 1 / 6), _const("one", 1.0),
          _const("half", 0.5), _const("sqrt2", np.sqrt(2.0)), _const("k044", 0.044715), _const("s2pi", np.sqrt(2 / np.pi))]


@pytest.mark.parametrize("tail,name", [
    (_hard_swish_div_after, "HardSwish"), (_hard_swish_times_sixth, "HardSwish"), (_hard_swish_div_inside, "HardSwish"),
    (_hard_swish_hardsigmoid, "HardSwish"), (_silu, "Swish"), (_mish, "Mish"), (_gelu_erf, "Gelu"),
    (_gelu_erf_half_first, "Gelu"), (_gelu_tanh, "Gelu"),
    (lambda: [helper.make_node("HardSigmoid", ["c"], ["y"])], "HardSigmoid"),
    (lambda: [helper.make_node("Clip", ["c", "zero", "six"], ["y"])], "Clip")])
def test_activation_fuses_into_its_conv(tail, name):
    model = _model(tail(), CONSTS)
    groups = find_layers(model)
    assert len(groups) == 1, [(g.name, [n.op_type for n in g.nodes]) for g in groups]
    layer = groups[0]
    assert layer.activation == name and layer.main.op_type == "Conv"
    assert layer.outputs == ["y"] and "c" in layer.internal   # only the activation's output is stored


def test_marks_round_trip_and_the_optimised_graph_computes_the_same():
    model = _model(_hard_swish_div_after(), CONSTS)
    marked = optimize(model, 3)
    groups = [g for g in layer_groups(marked.graph) if len(g.nodes) > 1]
    assert [(g.name, g.activation, len(g.nodes)) for g in groups] == [("conv", "HardSwish", 5)]
    assert internal_tensors(marked.graph) == {"c", "a", "k", "m"}


def test_conv_residual_add_and_activation_are_one_layer():
    inits = [numpy_helper.from_array(np.ones((C, C, 1, 1), np.float32), "w2")]
    nodes = [helper.make_node("Conv", ["x", "w2"], ["skip"], name="skip_conv"),
             helper.make_node("Add", ["c", "skip"], ["s"], name="add"), helper.make_node("Relu", ["s"], ["y"], name="relu")]
    model = _model(nodes, inits)
    model.graph.node.insert(0, model.graph.node.pop(-3))   # the skip branch first, as exporters order it
    layers = {g.name: g for g in find_layers(model)}
    assert [n.name for n in layers["conv"].nodes] == ["conv", "add", "relu"]
    assert layers["conv"].activation == "Relu" and layers["conv"].internal == {"c", "s"}


def test_why_a_pattern_does_not_fuse_is_logged(caplog):
    import logging
    model = _model(_silu() + [helper.make_node("MaxPool", ["c"], ["p"], kernel_shape=[1, 1])])
    model.graph.output.append(helper.make_tensor_value_info("p", TensorProto.FLOAT, None))
    with caplog.at_level(logging.DEBUG, logger="openrknn"):
        find_layers(model)
    assert any("Swish after 'conv' not fused: its input 'c' is read elsewhere" in r.getMessage() for r in caplog.records)


def test_no_fusion_when_the_conv_output_is_read_elsewhere():
    model = _model(_silu() + [helper.make_node("MaxPool", ["c"], ["p"], kernel_shape=[1, 1])])
    model.graph.output.append(helper.make_tensor_value_info("p", TensorProto.FLOAT, None))
    layers = find_layers(model)
    conv = next(g for g in layers if g.main.op_type == "Conv")
    assert len(conv.nodes) == 1 and not conv.internal   # c is stored: Sigmoid·Mul is a layer of its own
    silu = next(g for g in layers if g.main.op_type == "Sigmoid")
    assert silu.activation == "Swish" and [n.op_type for n in silu.nodes] == ["Sigmoid", "Mul"]


def test_affine_without_a_nonlinearity_is_not_an_activation():
    model = _model([helper.make_node("Mul", ["c", "half"], ["y"])], CONSTS)
    assert all(len(g.nodes) == 1 for g in find_layers(model))


def test_hard_swish_conv_costs_one_layer_and_stores_no_conv_output(tmp_path):
    """eval_perf, quantization and the simulator agree: one ConvHardSwish layer, the Conv's output
    gets no quantization parameters, and the int8 build runs."""
    from openrknn.chips import get_chip
    from openrknn.profile import estimate_perf
    model = _model(_hard_swish_div_after() , CONSTS)
    model.graph.node.append(helper.make_node("Conv", ["y", "w"], ["z"], name="next", pads=[1, 1, 1, 1]))
    model.graph.output[0].name = "z"
    onnx.save(model, tmp_path / "m.onnx")
    rng = np.random.default_rng(1)
    rknn = quantized_build(tmp_path / "m.onnx", [rng.uniform(-2, 2, (1, C, 8, 8)).astype(np.float32) for _ in range(3)])
    ops = [layer.op_type for layer in estimate_perf(rknn._model, get_chip("rk3588")).layers]
    assert ops[1] == "ConvHardSwish" and "Clip" not in ops and "Div" not in ops
    assert "c" not in rknn._model.quant_params and "y" in rknn._model.quant_params
    assert rknn.init_runtime() == 0
    x = rng.uniform(-2, 2, (1, C, 8, 8)).astype(np.float32)
    out = rknn.inference(inputs=[x], data_format="nchw")[0]
    # the layer graph travels in the .rknn file: the reloaded model runs and costs the same
    from rknnlite.api import RKNNLite
    assert rknn.export_rknn(str(tmp_path / "m.rknn")) == 0
    lite = RKNNLite()
    assert lite.load_rknn(str(tmp_path / "m.rknn")) == 0 and lite.init_runtime() == 0
    np.testing.assert_array_equal(lite.inference(inputs=[x], data_format="nchw")[0], out)
    from openrknn.model_file import load_model
    reloaded = load_model(str(tmp_path / "m.rknn"))
    assert [layer.op_type for layer in estimate_perf(reloaded, get_chip("rk3588")).layers] == ops
    from onnx.reference import ReferenceEvaluator
    ref = ReferenceEvaluator(model).run(None, {"x": x})[0]
    assert np.dot(out.ravel(), ref.ravel()) / (np.linalg.norm(out) * np.linalg.norm(ref)) > 0.99


def test_learnable_scale_and_offset_after_hard_swish_are_layers_of_their_own():
    """x·Clip(x+3,0,6)/6 · w + b: rknn-toolkit2 2.5.0 stores the hard-swish output and runs
    ``Mul(x, w) → Add(·, b)`` as one ``BatchNormalization`` layer (measured; ``Mul(w, x)`` first-
    constant is a ``Mul`` and an ``Add`` layer, as on PP-OCRv4 rec). Keeping them inside the
    hard-swish layer (PP-OCRv4 rec int8 0.9865 → 0.9959 cosine) is the explicit option."""
    tail = _hard_swish_div_after()
    tail[-1].output[0] = "hs"
    tail += [helper.make_node("Mul", ["hs", "w_learn"], ["hw"]), helper.make_node("Add", ["hw", "b_learn"], ["y"])]
    model = _model(tail, CONSTS + [_const("w_learn", 1.03), _const("b_learn", 0.1)])
    groups = find_layers(model)
    assert [len(g.nodes) for g in groups] == [5, 2]
    assert groups[0].activation == "HardSwish" and groups[0].outputs == ["hs"] and groups[1].outputs == ["y"]
    fused = find_layers(model, fuse_constant_steps=True)
    assert [len(g.nodes) for g in fused] == [7]
    assert fused[0].activation == "HardSwish" and fused[0].outputs == ["y"] and "hs" in fused[0].internal


def test_decomposed_layer_norm_is_one_layer():
    """LayerNorm as exporters below opset 17 write it, after a MatMul: one ``LayerNorm`` layer."""
    rng = np.random.default_rng(2)
    inits = [numpy_helper.from_array(rng.normal(size=(8, 8)).astype(np.float32), "wm"), _const("two", 2.0),
             _const("eps", 1e-5), numpy_helper.from_array(np.ones(8, np.float32), "gamma"),
             numpy_helper.from_array(np.zeros(8, np.float32), "beta")]
    nodes = [helper.make_node("MatMul", ["x", "wm"], ["h"], name="mm"),
             helper.make_node("ReduceMean", ["h"], ["mean"], axes=[-1], name="ln"),
             helper.make_node("Sub", ["h", "mean"], ["d"]), helper.make_node("Pow", ["d", "two"], ["sq"]),
             helper.make_node("ReduceMean", ["sq"], ["var"], axes=[-1]), helper.make_node("Add", ["var", "eps"], ["ve"]),
             helper.make_node("Sqrt", ["ve"], ["std"]), helper.make_node("Div", ["d", "std"], ["n"]),
             helper.make_node("Mul", ["n", "gamma"], ["g"]), helper.make_node("Add", ["g", "beta"], ["y"])]
    graph = helper.make_graph(nodes, "ln", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8])], inits)
    groups = find_layers(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]))
    assert [(g.name, g.activation, len(g.nodes)) for g in groups] == [("mm", None, 1), ("ln", "LayerNorm", 9)]
    assert groups[1].outputs == ["y"] and "mean" in groups[1].internal


def test_matmul_and_bias_add_are_one_gemm_layer():
    rng = np.random.default_rng(4)
    inits = [numpy_helper.from_array(rng.normal(size=(8, 8)).astype(np.float32), "wm"),
             numpy_helper.from_array(rng.normal(size=8).astype(np.float32), "bias")]
    nodes = [helper.make_node("MatMul", ["x", "wm"], ["h"], name="mm"), helper.make_node("Add", ["h", "bias"], ["hb"]),
             helper.make_node("Relu", ["hb"], ["y"])]
    graph = helper.make_graph(nodes, "gemm", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8])], inits)
    groups = find_layers(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]))
    assert [(g.name, g.activation, len(g.nodes)) for g in groups] == [("mm", "Relu", 3)]
    assert groups[0].internal == {"h", "hb"}


def test_scaled_dot_product_attention_is_laid_out_as_rknn_toolkit2_does():
    """q/k/v split from one tensor, Softmax(q·kᵀ·scale)·v, heads merged, up to the projection:
    rknn-toolkit2 2.5.0 prints ``Reshape``, ``Split``, ``exSDPAttention``, ``Reshape`` (PP-OCRv4 rec,
    the transformer encoder of the oracle corpus)."""
    rng = np.random.default_rng(6)
    t, heads, d = 6, 2, 4
    consts = [numpy_helper.from_array(np.array([1, t, 3, heads, d], np.int64), "split_shape"),
              numpy_helper.from_array(np.array([1, t, heads * d], np.int64), "merge_shape"),
              _const("scale", 0.5), numpy_helper.from_array(rng.normal(size=(heads * d, 8)).astype(np.float32), "proj")]
    for k in range(3):
        consts += [numpy_helper.from_array(np.array([k], np.int64), f"s{k}"),
                   numpy_helper.from_array(np.array([k + 1], np.int64), f"e{k}"),
                   numpy_helper.from_array(np.array([0], np.int64), f"ax{k}")]
    nodes = [helper.make_node("Reshape", ["x", "split_shape"], ["r"], name="heads"),
             helper.make_node("Transpose", ["r"], ["tr"], perm=[2, 0, 3, 1, 4])]
    for k, name in enumerate("qkv"):
        nodes += [helper.make_node("Slice", ["tr", f"s{k}", f"e{k}", f"ax{k}"], [f"{name}5"]),
                  helper.make_node("Squeeze", [f"{name}5", f"ax{k}"], [name])]
    nodes += [helper.make_node("Mul", ["q", "scale"], ["qs"]), helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
              helper.make_node("MatMul", ["qs", "kt"], ["scores"]), helper.make_node("Softmax", ["scores"], ["p"], axis=-1),
              helper.make_node("MatMul", ["p", "v"], ["o"]), helper.make_node("Transpose", ["o"], ["ot"], perm=[0, 2, 1, 3]),
              helper.make_node("Reshape", ["ot", "merge_shape"], ["merged"]),
              helper.make_node("MatMul", ["merged", "proj"], ["y"], name="proj")]
    graph = helper.make_graph(nodes, "attn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, t, 3 * heads * d])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, t, 8])], consts)
    groups = find_layers(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]))
    assert [(g.name, g.activation) for g in groups] == [("heads", None), ("q5", None), ("q", "SDPAttention"),
                                                         ("ot", None), ("proj", None)]
    assert [g.outputs for g in groups[:4]] == [["tr"], ["q5", "k5", "v5"], ["o"], ["merged"]]
    assert sum(len(g.nodes) for g in groups[:4]) == 15
    consts_names = {c.name for c in consts}
    printed = [npu_layers.group_kind_and_name(g, consts_names)[1] for g in groups]
    assert printed == ["Reshape", "Split", "exSDPAttention", "Reshape", "Conv"]


def test_mean_std_steps_are_the_input_stage_layer(tmp_path):
    """build() adds the mean/std Sub/Div after the graph passes; they are marked as one layer too, so
    the normalised input is quantized once (not after the Sub and again after the Div)."""
    model = _model([helper.make_node("Relu", ["c"], ["y"])])
    onnx.save(model, tmp_path / "m.onnx")
    rng = np.random.default_rng(3)
    rknn = quantized_build(tmp_path / "m.onnx", [rng.uniform(0, 255, (1, C, 8, 8)).astype(np.float32) for _ in range(2)],
                           mean_values=[[127.5] * C], std_values=[[64.0] * C])
    graph = rknn._model.graph.graph
    sub = next(n for n in graph.node if n.op_type == "Sub")
    div = next(n for n in graph.node if n.op_type == "Div")
    assert sub.output[0] in internal_tensors(graph)
    assert sub.output[0] not in rknn._model.quant_params and div.output[0] in rknn._model.quant_params
