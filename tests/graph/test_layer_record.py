"""The typed layer record (``graph/npu_layers``): one place decides layers; every stage reads it."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from openrknn.graph import npu_layers

PACKAGE = Path(__file__).resolve().parents[2] / "openrknn"

# (pattern, why it means a stage decides fusion by itself)
FORBIDDEN = [
    (r'"Identity".*endswith\("__q"\)|endswith\("__q"\).*"Identity"', "fusion inferred from the lowered graph"),
    (r"\b(LAYER_KEY|FUSED_ACTIVATION_KEY|TARGET_KEY)\b|\"openrknn\.(layer|fused_activation|target)\"",
     "layer metadata read or written outside graph/npu_layers"),
    (r'op_type\s*(==|in)\s*[\(\{\[]?\s*"(Relu|Clip|HardSwish|Sigmoid|HardSigmoid)"\s*[,\)\}\]]\s*,?\s*"?(Relu|Clip)?',
     "an activation matched by op name to fuse it"),
    (r"^\s*(FUSED_ACTIVATIONS|PRINTED_NAME|PRINTED_ACTIVATION|_QUANT_DTYPES)\s*=", "a second table of printed/fused names"),
    (r"\bdef (fold_batchnorm|fold_affine|fold_bias_add|fold_channel_affine)\b", "a second BatchNorm/affine folding"),
    (r"\bdef _target\b.*\n(?:.*\n){0,3}.*forced_cpu|self\.forced_cpu", "op_target re-read outside the record"),
]
# importers turn a source format's fused-activation codes into ONNX nodes: not a fusion decision
ALLOWED = ("graph/", "frontends/")


def test_no_stage_outside_graph_decides_fusion():
    offences = []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE).as_posix()
        if relative.startswith(ALLOWED):
            continue
        text = path.read_text()
        for pattern, why in FORBIDDEN:
            for match in re.finditer(pattern, text, re.MULTILINE):
                line = text.count("\n", 0, match.start()) + 1
                offences.append(f"openrknn/{relative}:{line}: {why}: {match.group(0).strip()[:60]}")
    assert not offences, "\n".join(offences)


def test_the_grep_catches_what_it_forbids(tmp_path):
    """The patterns match the duplicates this test exists to keep out."""
    samples = ['if node.op_type == "Identity" and node.input[0].endswith("__q"):',
               'layer = next((p.value for p in node.metadata_props if p.key == npu_layers.LAYER_KEY), None)',
               '    if node.op_type in ("Relu", "Clip"):',
               'FUSED_ACTIVATIONS = {"Relu": "Relu"}',
               'def fold_batchnorm(model):',
               '        self.forced_cpu = {k for k in op_target}']
    for sample in samples:
        assert any(re.search(p, sample, re.MULTILINE) for p, _ in FORBIDDEN), sample


def _model() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    w = [numpy_helper.from_array(rng.normal(0, .3, (4, 4, 3, 3)).astype(np.float32), f"w{i}") for i in range(3)]
    nodes = [helper.make_node("Conv", ["x", "w0"], ["c0"], name="conv0", pads=[1, 1, 1, 1]),
             helper.make_node("Sigmoid", ["c0"], ["s0"], name="sig0"),
             helper.make_node("Mul", ["c0", "s0"], ["a0"], name="silu0"),
             helper.make_node("Conv", ["a0", "w1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["c1", "a0"], ["r1"], name="res1"),
             helper.make_node("Relu", ["r1"], ["y1"], name="relu1"),
             helper.make_node("Identity", ["y1"], ["i1"], name="ident"),
             helper.make_node("Conv", ["i1", "w2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c2"], ["y"], name="relu2")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])], w)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def test_record_fields():
    model = _model()
    npu_layers.mark_layers(model, frozenset({"relu2"}))
    records = npu_layers.layer_records(model.graph, {"a0": "int8"}, "float16")
    by_name = {r.name: r for r in records}
    assert [r.name for r in records] == ["conv0", "conv1", "ident", "conv2", "relu2"]
    assert by_name["conv0"].op_name == "ConvExSwish" and by_name["conv0"].kind == "conv"
    assert by_name["conv0"].nodes == ("conv0", "sig0", "silu0") and by_name["conv0"].stored == ("a0",)
    assert by_name["conv0"].dtype == "int8" and by_name["conv1"].dtype == "float16"
    assert by_name["conv1"].op_name == "ConvAddRelu" and by_name["conv1"].kind == "conv+add"
    assert by_name["ident"].kind == "alias"
    # op_target: the CPU node is a layer of its own, on the CPU; its Conv no longer fuses it
    assert by_name["relu2"].target == "CPU" and by_name["conv2"].op_name == "Conv"
    assert by_name["conv2"].target == "NPU"
    # re-marking without naming the CPU nodes keeps them (the build's preprocess re-mark)
    npu_layers.mark_layers(model)
    assert {r.name: r.target for r in npu_layers.layer_records(model.graph)}["relu2"] == "CPU"


def test_conv_gelu_prints_as_rknn_toolkit2_does():
    """x·0.5·(1 + erf(x/√2)) after a Conv: rknn-toolkit2 2.5.0 prints ``ConvExGelu`` (ConvNeXt, measured)."""
    rng = np.random.default_rng(1)
    consts = [numpy_helper.from_array(rng.normal(0, .3, (4, 4, 1, 1)).astype(np.float32), "w"),
              numpy_helper.from_array(np.array(1.4142135, np.float32), "r2"),
              numpy_helper.from_array(np.array(1.0, np.float32), "one"),
              numpy_helper.from_array(np.array(0.5, np.float32), "half")]
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv"), helper.make_node("Div", ["c", "r2"], ["d"]),
             helper.make_node("Erf", ["d"], ["e"]), helper.make_node("Add", ["e", "one"], ["p"]),
             helper.make_node("Mul", ["c", "p"], ["m"]), helper.make_node("Mul", ["m", "half"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])], consts)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    npu_layers.mark_layers(model)
    assert [(r.op_name, r.stored) for r in npu_layers.layer_records(model.graph)] == [("ConvExGelu", ("y",))]


def test_channel_sum_with_clip_is_conv_clip():
    """ReduceSum over the channels → Clip: rknn-toolkit2 2.5.0 lowers the sum to a 1×1 conv and
    fuses the Clip (``ConvClip``, measured); a sum over another axis stays a ReduceSum layer."""
    def model(axis: int) -> onnx.ModelProto:
        consts = [numpy_helper.from_array(np.array([axis], np.int64), "axes"),
                  numpy_helper.from_array(np.array(0.0, np.float32), "lo"),
                  numpy_helper.from_array(np.array(6.0, np.float32), "hi")]
        nodes = [helper.make_node("ReduceSum", ["x", "axes"], ["s"], name="sum", keepdims=1),
                 helper.make_node("Clip", ["s", "lo", "hi"], ["y"], name="clip")]
        graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8])],
                                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], consts)
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
        npu_layers.mark_layers(m)
        return m
    assert [(r.op_name, r.kind, r.stored) for r in npu_layers.layer_records(model(1).graph)] == \
        [("ConvClip", "conv", ("y",))]
    assert [r.op_name for r in npu_layers.layer_records(model(2).graph)] == ["ReduceSum", "Clip"]
