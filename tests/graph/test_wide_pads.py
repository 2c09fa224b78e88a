"""Convolutions padded beyond 15 read a Pad layer of their own, as rknn-toolkit2 2.5.0 does (probe
graphs on rk3588, rk3566 and rk3576, docs/fidelity.md): DeepLab's ASPP pads 24 on an 8×8 map."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from openrknn import chips
from openrknn.graph import npu_layers
from openrknn.graph.passes.base import attribute
from openrknn.graph.passes.wide_pads import drop_padding_taps, split_wide_pads
from tests.helpers import quantized_build, reference_session

_RNG = np.random.default_rng(5)
# (name, group, dilation, pad): DeepLab's ASPP branches, a second Conv with the same wide pads, a
# dense Conv over the limit on one side only
_CONVS = [("aspp12", 16, 12, [12] * 4), ("aspp24", 16, 24, [24] * 4), ("aspp36", 16, 36, [36] * 4),
          ("twin24", 16, 24, [24] * 4), ("dense", 1, 1, [16, 1, 2, 3])]


def _aspp_model(size: int = 8) -> onnx.ModelProto:
    """x (``size``²) → Relu → the Convs of ``_CONVS``, each a graph output."""
    nodes, inits, outputs = [helper.make_node("Relu", ["x"], ["r"], name="relu")], [], []
    for name, group, dilation, pads in _CONVS:
        inits.append(numpy_helper.from_array(_RNG.normal(0, .3, (16, 16 // group, 3, 3)).astype(np.float32), f"{name}_w"))
        nodes.append(helper.make_node("Conv", ["r", f"{name}_w"], [name], name=name, group=group, kernel_shape=[3, 3],
                                      dilations=[dilation] * 2, pads=pads))
        outputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, None))
    graph = helper.make_graph(nodes, "aspp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, size, size])],
                              outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return onnx.shape_inference.infer_shapes(model)


def test_the_rule_is_chip_data():
    for name in ("rk3588", "rk3566", "rk3568", "rk3576", "rk3562", "rv1106", "rv1103", "rv1106b", "rv1103b"):
        lowering = chips.get_chip(name).lowering
        assert (lowering["conv_pad_max"], lowering["conv_dilation_max"]) == (15, 31), name


def test_each_widely_padded_conv_reads_its_own_pad_and_runs_unpadded():
    model = _aspp_model()
    x = _RNG.normal(size=(1, 16, 8, 8)).astype(np.float32)
    before = reference_session(model).run(None, {"x": x})
    assert split_wide_pads(model, 15, 31).modified
    nodes = {n.name: n for n in model.graph.node}
    pads = [n for n in model.graph.node if n.op_type == "Pad"]
    # rknn-toolkit2's names; pad 12 stays in its Conv, dilation 36 is not padded (the toolkit drops its taps)
    assert [p.output[0] for p in pads] == ["r_pad", "r_pad#1", "r_pad#2"]
    assert [nodes[c].input[0] for c in ("aspp12", "aspp24", "aspp36", "twin24", "dense")] == \
        ["r", "r_pad", "r", "r_pad#1", "r_pad#2"]
    assert attribute(nodes["aspp24"], "pads") == [0, 0, 0, 0] and attribute(nodes["aspp12"], "pads") == [12] * 4
    amounts = {i.name: numpy_helper.to_array(i).tolist() for i in model.graph.initializer}
    assert amounts[pads[2].input[1]] == [0, 0, 16, 1, 0, 0, 2, 3]   # all four pads, also those within the limit
    after = reference_session(model).run(None, {"x": x})
    for b, a in zip(before, after):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
    assert not split_wide_pads(_aspp_model(), None).modified   # a chip without the lowering


def test_an_int8_build_prints_the_pad_with_its_inputs_parameters_and_unchanged_outputs(tmp_path, monkeypatch):
    path = tmp_path / "aspp.onnx"
    onnx.save(_aspp_model(), path)
    samples = [_RNG.normal(size=(1, 16, 8, 8)).astype(np.float32) for _ in range(2)]
    rknn = quantized_build(path, samples)
    model = rknn._model
    from openrknn.profile import estimate_perf
    rows = [(layer.op_type, layer.data_type, layer.target, layer.full_name)
            for layer in estimate_perf(model, chips.get_chip("rk3588")).layers]
    assert ("Pad", "int8", "NPU", "Pad:r_pad") in rows and sum(r[0] == "Pad" for r in rows) == 3
    # the padded depthwise Conv now runs on the NPU (its pads were outside the Conv's 0-15)
    assert next(r for r in rows if r[3] == "Conv:aspp24")[2] == "NPU"
    assert next(r for r in rows if r[3] == "Conv:aspp36")[2] == "NPU"   # a 1×1 Conv now, as the toolkit's
    stored = [t for rec in npu_layers.model_records(model) if rec.kind != "alias" for t in rec.stored]
    assert "r_pad" in stored
    for name in ("r_pad", "r_pad#1"):
        assert model.quant_params[name]["scale"] == model.quant_params["r"]["scale"]
        assert model.quant_params[name]["zero_point"] == model.quant_params["r"]["zero_point"]
    assert rknn.init_runtime() == 0
    padded = rknn.inference(inputs=[samples[0]], data_format="nchw")
    import openrknn.compile as compile_stage
    monkeypatch.setattr(compile_stage, "split_wide_pads", lambda *a, **k: None)
    plain = quantized_build(path, samples)
    assert not any(n.op_type == "Pad" for n in plain._model.graph.graph.node)
    assert plain.init_runtime() == 0
    for a, b in zip(padded, plain.inference(inputs=[samples[0]], data_format="nchw")):
        np.testing.assert_array_equal(a, b)


def test_taps_that_read_only_padding_are_dropped_beyond_dilation_31():
    """rknn-toolkit2 runs DeepLab's dilation-36 branch on its 8×8 map as a 1×1 Conv (probes: dilation
    32 and 36, 3×3 and 5×5); where the taps read data (64×64) it gathers instead: left here."""
    model = _aspp_model()
    x = _RNG.normal(size=(1, 16, 8, 8)).astype(np.float32)
    before = reference_session(model).run(None, {"x": x})
    assert drop_padding_taps(model, 31).modified
    conv = next(n for n in model.graph.node if n.name == "aspp36")
    weights = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    assert weights[conv.input[1]].shape == (16, 1, 1, 1) and "aspp36_w" not in weights
    assert attribute(conv, "pads") == [0, 0, 0, 0] and attribute(conv, "dilations") == [1, 1]
    assert weights["aspp24_w"].shape == (16, 1, 3, 3)   # dilation 24: the Pad's, not this rule
    for b, a in zip(before, reference_session(model).run(None, {"x": x})):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
    assert not drop_padding_taps(_aspp_model(64), 31).modified


@pytest.mark.parametrize("chip", ["rk3566", "rk3576"])
def test_the_other_measured_chips_pad_alike(tmp_path, chip):
    path = tmp_path / "aspp.onnx"
    onnx.save(_aspp_model(), path)
    rknn = quantized_build(path, [_RNG.normal(size=(1, 16, 8, 8)).astype(np.float32)], target_platform=chip)
    assert sum(n.op_type == "Pad" for n in rknn._model.graph.graph.node) == 3
