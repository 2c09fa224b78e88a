"""Where each layer runs on a chip is the layer record's (``graph/placement``): the rules, and that
``eval_perf``'s rows only copy the record's target."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from openrknn.chips import get_chip
from openrknn.graph import placement
from openrknn.profile import estimate_perf
from openrknn.profile.layers import default_dtypes
from openrknn.profile.reference_nets import wrap_onnx


def _model() -> onnx.ModelProto:
    """conv+relu → ArgMax (no NPU kernel); → GAP → Reshape as a graph output; an int64 graph
    input feeding a Gather; a Softsign (in neither op list)."""
    consts = [numpy_helper.from_array(np.ones((8, 3, 3, 3), np.float32), "w"),
              numpy_helper.from_array(np.array([1, 8], np.int64), "shape")]
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("ArgMax", ["r"], ["am"], name="argmax", axis=1),
             helper.make_node("GlobalAveragePool", ["r"], ["gap"], name="gap"),
             helper.make_node("Reshape", ["gap", "shape"], ["flat"], name="final_reshape"),
             helper.make_node("Softsign", ["flat"], ["soft"], name="softsign"),
             helper.make_node("Gather", ["r", "ids"], ["picked"], name="gather", axis=1),
             helper.make_node("Sigmoid", ["picked"], ["sig"], name="sigmoid")]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 6, 6]),
                     helper.make_tensor_value_info("ids", TensorProto.INT64, [2])],
        [helper.make_tensor_value_info(n, t, None) for n, t in
         (("am", TensorProto.INT64), ("flat", TensorProto.FLOAT), ("soft", TensorProto.FLOAT),
          ("sig", TensorProto.FLOAT))], consts)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def _targets(model, platform: str) -> dict[str, str]:
    chip = get_chip(platform)
    act, weight = default_dtypes(model.quantized_dtype)
    layers = placement.executed_layers(model, placement.LiveGraph(model), chip, act, weight)
    return {layer.record.name: layer.record.target for layer in layers}


def test_chip_placement_rules():
    model = wrap_onnx(_model())
    rk3588 = _targets(model, "rk3588")
    assert rk3588["conv"] == "NPU" and rk3588["sigmoid"] == "NPU"
    assert rk3588["argmax"] == "CPU"            # CPU_OPS
    assert rk3588["softsign"] == "CPU"          # no NPU kernel
    assert rk3588["gather"] == "CPU"            # reads an int64 tensor
    # a final Reshape (1,8,1,1) → (1,8) stays on the NPU (rknn-toolkit2 2.5.0, (1,64,1,1) → (1,64) on
    # rk3588 and rk3566); one to a single axis goes to the CPU (test_reshape_placement_follows_the_vendor)
    assert rk3588["final_reshape"] == "NPU"
    assert _targets(model, "rk1808")["final_reshape"] == "NPU"
    # a float model on a chip without float on its NPU: every float layer on the CPU
    assert _targets(wrap_onnx(_model(), None), "rv1106")["conv"] == "CPU"
    assert _targets(wrap_onnx(_model(), None), "rk3588")["conv"] == "NPU"
    # op_target and the chip's NPU limits (build's metadata) move a layer too
    model.metadata["op_target"] = {"sigmoid": "cpu"}
    model.metadata[placement.LIMIT_CPU_KEY] = ["conv"]
    moved = _targets(model, "rk3588")
    assert moved["sigmoid"] == "CPU" and moved["conv"] == "CPU"


def test_eval_perf_rows_copy_the_record_target():
    model = wrap_onnx(_model())
    model.metadata["op_target"] = {"sigmoid": "cpu"}
    for platform in ("rk3588", "rk1808", "rv1106"):   # (RKNPU1 drops some Reshape rows)
        targets = _targets(model, platform)
        rows = [row for row in estimate_perf(model, get_chip(platform)).layers
                if row.op_type not in ("InputOperator", "OutputOperator")]
        assert len(rows) >= 6 and all(row.target == targets[row.name] for row in rows), platform


def _reshapes_model() -> onnx.ModelProto:
    """LPRNet's whole-tensor mean: Conv (1,64,4,18) → Reshape (1,4608,1,1) → 1×1 Conv → Reshape to
    (1,) as the output; and (1,64,4,18) → (1,64,1,72) read by a Conv (channels kept)."""
    consts = [numpy_helper.from_array(np.ones((64, 3, 1, 1), np.float32), "w"),
              numpy_helper.from_array(np.full((1, 4608, 1, 1), 1 / 4608, np.float32), "wm"),
              numpy_helper.from_array(np.ones((4, 64, 1, 1), np.float32), "wk"),
              numpy_helper.from_array(np.array([1, 4608, 1, 1], np.int64), "flat"),
              numpy_helper.from_array(np.array([1], np.int64), "one"),
              numpy_helper.from_array(np.array([1, 64, 1, 72], np.int64), "row")]
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv"),
             helper.make_node("Reshape", ["c", "flat"], ["f"], name="to_channels"),
             helper.make_node("Conv", ["f", "wm"], ["m"], name="mean"),
             helper.make_node("Reshape", ["m", "one"], ["y"], name="to_one_axis"),
             helper.make_node("Reshape", ["c", "row"], ["r"], name="keeps_channels"),
             helper.make_node("Conv", ["r", "wk"], ["k"], name="after")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4, 18])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1]),
                               helper.make_tensor_value_info("k", TensorProto.FLOAT, [1, 4, 1, 72])], consts)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def test_reshape_placement_follows_the_vendor():
    """rknn-toolkit2 2.5.0 (LPRNet and probe graphs, docs/fidelity.md): RK3566 runs a Reshape that
    changes the channel axis on the CPU (chip data ``lowering.channel_reshape_on_cpu``), the other
    RKNPU2 chips on the NPU; a final Reshape to one axis is a CPU layer everywhere on RKNPU2."""
    model = wrap_onnx(_reshapes_model(), None)
    for platform in ("rk3588", "rk3562", "rk3576"):
        targets = _targets(model, platform)
        assert (targets["to_channels"], targets["keeps_channels"], targets["to_one_axis"]) == ("NPU", "NPU", "CPU")
    targets = _targets(model, "rk3566")
    assert (targets["to_channels"], targets["keeps_channels"], targets["to_one_axis"]) == ("CPU", "NPU", "CPU")
