"""ConvNeXt's channels-last blocks as rknn-toolkit2 2.5.0 lowers them (probe blocks at opset 13 and
17, torchvision's convnext_tiny in the oracle corpus): ``dwConv → Transpose → LayerNorm → Linear →
GELU → Linear → Transpose → layer-scale Mul → residual Add`` prints ``Conv, exNorm, ConvExGelu,
ConvAdd`` — no Transpose, no Mul or Add layer."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from openrknn.chips import get_chip
from openrknn.graph import npu_layers
from openrknn.graph.passes import optimize
from openrknn.profile import estimate_perf
from tests.helpers import cosine, quantized_build, reference_session

C, H = 8, 6


def _layer_norm_nodes(x: str, out: str, opset: int) -> list[onnx.NodeProto]:
    if opset >= 17:
        return [helper.make_node("LayerNormalization", [x, "ln_g", "ln_b"], [out], name="ln", axis=-1, epsilon=1e-6)]
    return [helper.make_node("ReduceMean", [x], ["mu"], name="ln_mean", axes=[-1]),
            helper.make_node("Sub", [x, "mu"], ["d"], name="ln_sub"),
            helper.make_node("Pow", ["d", "two"], ["d2"], name="ln_pow"),
            helper.make_node("ReduceMean", ["d2"], ["var"], name="ln_var", axes=[-1]),
            helper.make_node("Add", ["var", "eps"], ["var_e"], name="ln_eps"),
            helper.make_node("Sqrt", ["var_e"], ["std"], name="ln_sqrt"),
            helper.make_node("Div", ["d", "std"], ["n"], name="ln_div"),
            helper.make_node("Mul", ["n", "ln_g"], ["ng"], name="ln_scale"),
            helper.make_node("Add", ["ng", "ln_b"], [out], name="ln_shift")]


def convnext_block(opset: int = 13, leak: bool = False) -> onnx.ModelProto:
    """torchvision's CNBlock as exported (bias first in the Linear's Add, GELU in its erf form);
    ``leak``: the channels-last LayerNorm output is also a graph output (the region is not closed)."""
    rng = np.random.default_rng(0)
    arrays = {"dw_w": rng.normal(0, 0.3, (C, 1, 3, 3)), "dw_b": rng.normal(0, 0.1, C),
              "ln_g": rng.uniform(0.5, 1.5, C), "ln_b": rng.normal(0, 0.1, C),
              "w1": rng.normal(0, 0.3, (C, 4 * C)), "b1": rng.normal(0, 0.1, 4 * C),
              "w2": rng.normal(0, 0.3, (4 * C, C)), "b2": rng.normal(0, 0.1, C),
              "gamma": rng.uniform(0.5, 1.5, (C, 1, 1)), "two": 2.0, "eps": 1e-6, "sqrt2": 2 ** 0.5, "one": 1.0,
              "half": 0.5}
    inits = [numpy_helper.from_array(np.asarray(v, np.float32), k) for k, v in arrays.items()]
    nodes = [helper.make_node("Conv", ["x", "dw_w", "dw_b"], ["dw"], name="dw", group=C, pads=[1, 1, 1, 1]),
             helper.make_node("Transpose", ["dw"], ["nhwc"], name="to_last", perm=[0, 2, 3, 1]),
             *_layer_norm_nodes("nhwc", "ln", opset),
             helper.make_node("MatMul", ["ln", "w1"], ["m1"], name="fc1"),
             helper.make_node("Add", ["b1", "m1"], ["a1"], name="fc1_bias"),
             helper.make_node("Div", ["a1", "sqrt2"], ["g0"], name="gelu_div"),
             helper.make_node("Erf", ["g0"], ["g1"], name="gelu_erf"),
             helper.make_node("Add", ["g1", "one"], ["g2"], name="gelu_add"),
             helper.make_node("Mul", ["a1", "g2"], ["g3"], name="gelu_mul"),
             helper.make_node("Mul", ["g3", "half"], ["g4"], name="gelu_half"),
             helper.make_node("MatMul", ["g4", "w2"], ["m2"], name="fc2"),
             helper.make_node("Add", ["b2", "m2"], ["a2"], name="fc2_bias"),
             helper.make_node("Transpose", ["a2"], ["nchw"], name="to_first", perm=[0, 3, 1, 2]),
             helper.make_node("Mul", ["gamma", "nchw"], ["scaled"], name="layer_scale"),
             helper.make_node("Add", ["scaled", "x"], ["y"], name="residual")]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, C, H, H])]
    if leak:
        outputs.append(helper.make_tensor_value_info("ln", TensorProto.FLOAT, [1, H, H, C]))
    graph = helper.make_graph(nodes, "cnblock", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, C, H, H])],
                              outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    onnx.checker.check_model(model)
    return model


def _samples(count=4):
    rng = np.random.default_rng(1)
    return [rng.normal(0, 1, (1, C, H, H)).astype(np.float32) for _ in range(count)]


@pytest.mark.parametrize("opset", [13, 17])
def test_channels_last_block_runs_channel_first_with_the_same_values(opset):
    model = convnext_block(opset)
    lowered = optimize(model, 3)
    ops = [n.op_type for n in lowered.graph.node]
    assert "Transpose" not in ops and "MatMul" not in ops and "LayerNormalization" not in ops
    x = _samples(1)[0]
    expected = reference_session(model).run(None, {"x": x})[0]
    got = reference_session(lowered).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("opset", [13, 17])
def test_convnext_block_prints_the_vendor_layers(tmp_path, opset):
    path = tmp_path / "m.onnx"
    onnx.save(convnext_block(opset), path)
    rknn = quantized_build(path, _samples())
    rows = [(row.op_type, row.data_type.upper()) for row in estimate_perf(rknn._model, get_chip("rk3588")).layers]
    assert rows == [("InputOperator", "INT8"), ("Conv", "INT8"), ("exNorm", "INT8"), ("ConvExGelu", "INT8"),
                    ("ConvAdd", "INT8"), ("OutputOperator", "INT8")]
    records = npu_layers.model_records(rknn._model)
    assert [r.stored for r in records][-1] == ("y",)   # layer scale + residual inside the second Linear's layer
    x = _samples(5)[4]
    expected = reference_session(path).run(None, {"x": x})[0]
    assert rknn.init_runtime() == 0
    assert cosine(rknn.inference(inputs=[x], data_format="nchw")[0], expected) > 0.999


def test_an_open_channels_last_region_keeps_its_transposes():
    lowered = optimize(convnext_block(13, leak=True), 3)
    assert [n.op_type for n in lowered.graph.node].count("Transpose") == 2
