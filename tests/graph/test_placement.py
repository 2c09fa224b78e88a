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
    assert rk3588["final_reshape"] == "CPU"     # a final Reshape, RKNPU2
    assert _targets(model, "rk1808")["final_reshape"] == "NPU"   # ... but not on RKNPU1
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
