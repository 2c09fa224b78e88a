"""An untrained GroupNorm as torch exports it (``Reshape → InstanceNormalization → Reshape → Mul(γ=1)
→ Add(β=0)``) followed by a ReLU is laid out as rknn-toolkit2 2.5.0 lays it out (probes and the
oracle corpus's FPN decoder, rk3588 int8, docs/fidelity.md): the identity affine goes, the ReLU runs
before the Reshape (``Reshape``, ``exNorm``, ``Relu``, ``Reshape``), and the ``exNorm`` output is
stored with the ReLU's scale — with the scale of a ``Resize`` after it, through the Reshape."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from openrknn.graph import npu_layers
from openrknn.graph.passes import optimize
from tests.helpers import cosine, quantized_build, reference_session, uniform_samples

C, G, S = 16, 4, 8
_RNG = np.random.default_rng(5)


def _group_norm_block(gamma: np.ndarray, beta: np.ndarray, activation: str | None = "Relu",
                      resize: bool = False) -> onnx.ModelProto:
    """Conv → GroupNorm (torch's export) → [activation] → [Resize ×2] → 1×1 Conv."""
    arrays = {"w": _RNG.normal(0, .3, (C, C, 3, 3)), "groups": np.array([0, G, -1], np.int64),
              "ones": np.ones(G), "zeros": np.zeros(G), "back": np.array([1, C, S, S], np.int64),
              "gamma": gamma, "beta": beta, "scales": np.array([1., 1., 2., 2.]), "w2": _RNG.normal(0, .3, (4, C, 1, 1))}
    inits = [numpy_helper.from_array(v if v.dtype == np.int64 else v.astype(np.float32), k) for k, v in arrays.items()]
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1] * 4, name="conv"),
             helper.make_node("Reshape", ["c", "groups"], ["g"], name="gn/Reshape"),
             helper.make_node("InstanceNormalization", ["g", "ones", "zeros"], ["n"], name="gn/InstanceNormalization"),
             helper.make_node("Reshape", ["n", "back"], ["r"], name="gn/Reshape_1"),
             helper.make_node("Mul", ["r", "gamma"], ["m"], name="gn/Mul"),
             helper.make_node("Add", ["m", "beta"], ["a"], name="gn/Add")]
    tensor = "a"
    if activation:
        nodes.append(helper.make_node(activation, [tensor], ["act"], name="act"))
        tensor = "act"
    if resize:
        nodes.append(helper.make_node("Resize", [tensor, "", "scales"], ["up"], mode="linear", name="up"))
        tensor = "up"
    nodes.append(helper.make_node("Conv", [tensor, "w2"], ["out"], name="head"))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, C, S, S])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def _rows(model: onnx.ModelProto) -> list[str]:
    return [r.op_name for r in npu_layers.layer_records(model.graph) if r.kind != "alias"]


def _same_outputs(optimized: onnx.ModelProto, model: onnx.ModelProto) -> None:
    x = _RNG.normal(size=(1, C, S, S)).astype(np.float32)
    got, want = (reference_session(m.SerializeToString()).run(None, {"x": x})[0] for m in (optimized, model))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


UNTRAINED = (np.ones((C, 1, 1)), np.zeros((C, 1, 1)))


@pytest.mark.parametrize("activation", ["Relu", None])
def test_untrained_affine_goes_and_the_relu_runs_before_the_reshape(activation):
    """rknn-toolkit2: ``Conv, Reshape, exNorm, Relu, Reshape, Conv`` (``Conv, Reshape, exNorm,
    Reshape, Conv`` without the ReLU); the ReLU's output is ``<reshape output>_sw``. Exact."""
    model = _group_norm_block(*UNTRAINED, activation=activation)
    optimized = optimize(model, 3)
    assert not {"Mul", "Add"} & {n.op_type for n in optimized.graph.node}
    if activation:
        assert _rows(optimized) == ["Conv", "Reshape", "exNorm", "Relu", "Reshape", "Conv"]
        relu = next(n for n in optimized.graph.node if n.op_type == "Relu")
        assert (list(relu.input), list(relu.output)) == (["n"], ["r_sw"])
    else:
        assert _rows(optimized) == ["Conv", "Reshape", "exNorm", "Reshape", "Conv"]
    _same_outputs(optimized, model)


def test_a_trained_affine_stays():
    """Random γ, β: rknn-toolkit2 keeps the scale and offset (``BatchNormalizationRelu`` after the Reshape)."""
    model = _group_norm_block(_RNG.uniform(.5, 1.5, (C, 1, 1)), _RNG.uniform(-.5, .5, (C, 1, 1)))
    optimized = optimize(model, 3)
    assert [n.op_type for n in optimized.graph.node if n.op_type in ("Mul", "Add", "Relu")] == ["Mul", "Add", "Relu"]
    assert _rows(optimized) == ["Conv", "Reshape", "exNorm", "Reshape", "BatchNormalizationRelu", "Conv"]
    _same_outputs(optimized, model)


def test_a_widening_constant_keeps_the_pair():
    """Ones of shape [2, C, 1, 1] make a batch of two out of one: not an identity."""
    model = _group_norm_block(np.ones((2, C, 1, 1)), np.zeros((C, 1, 1)), activation=None)
    assert {"Mul", "Add"} <= {n.op_type for n in optimize(model, 3).graph.node}


def test_a_relu_between_two_reshapes_runs_before_them():
    """``Conv → MaxPool → Reshape → Relu → Reshape → Conv``: rknn-toolkit2 prints ``Conv, MaxPool,
    Relu, Conv`` (the Reshape pair then cancels)."""
    inits = [numpy_helper.from_array(_RNG.normal(0, .3, (C, C, 3, 3)).astype(np.float32), "w"),
             numpy_helper.from_array(np.array([1, C, 2, 8], np.int64), "flat"),
             numpy_helper.from_array(np.array([1, C, 4, 4], np.int64), "back"),
             numpy_helper.from_array(_RNG.normal(0, .3, (4, C, 1, 1)).astype(np.float32), "w2")]
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1] * 4, name="conv"),
             helper.make_node("MaxPool", ["c"], ["p"], kernel_shape=[2, 2], strides=[2, 2], name="pool"),
             helper.make_node("Reshape", ["p", "flat"], ["f"], name="flat"),
             helper.make_node("Relu", ["f"], ["act"], name="act"),
             helper.make_node("Reshape", ["act", "back"], ["b"], name="back"),
             helper.make_node("Conv", ["b", "w2"], ["out"], name="head")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, C, S, S])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    optimized = optimize(model, 3)
    assert _rows(optimized) == ["Conv", "MaxPool", "Relu", "Conv"]
    _same_outputs(optimized, model)


def test_the_norm_output_takes_the_scale_of_the_relu_and_resize_after_it(tmp_path):
    """The FPN decoder's ``exNorm → Relu → Reshape → Resize``: rknn-toolkit2 stores the norm's
    output, the Relu's and the Resize's with one scale (the Resize's range); before, openrknn
    stored the norm's output on its own, wider range (fpn_resnet18: 0.0260 where the vendor has 0.0115)."""
    path = tmp_path / "gn.onnx"
    onnx.save(_group_norm_block(*UNTRAINED, resize=True), str(path))
    rknn = quantized_build(path, uniform_samples((1, C, S, S)))
    params = rknn._model.quant_params
    relu = next(n for n in rknn._model.graph.graph.node if n.op_type == "Relu")
    norm, resize = "n", "up"
    scales = {t: float(params[t]["scale"][0]) for t in (norm, relu.output[0], resize)}
    assert len(set(scales.values())) == 1, scales
    x = uniform_samples((1, C, S, S), count=1, seed=7)[0]
    assert rknn.init_runtime() == 0
    got = rknn.inference(inputs=[x], data_format="nchw")[0]
    want = reference_session(path).run(None, {"x": x})[0]
    assert cosine(got, want) > 0.99   # the simulator runs the new layout (exNorm, Relu, Reshape, Resize)
    rknn.release()
