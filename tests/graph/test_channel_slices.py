"""Channel Slices and shuffles lowered as rknn-toolkit2 2.5.0 does (probe graphs measured on rk3588
int8, docs/fidelity.md): the layer record's rows, and values unchanged by the rewrite."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from openrknn.graph import npu_layers
from openrknn.graph.passes import optimize
from tests.helpers import reference_session

_RNG = np.random.default_rng(7)


def _weights(name: str, *shape: int) -> onnx.TensorProto:
    return numpy_helper.from_array(_RNG.normal(0, .3, shape).astype(np.float32), name)


def _conv(name: str, x: str, y: str, cin: int, cout: int, k: int = 1):
    return ([helper.make_node("Conv", [x, f"{name}_w", f"{name}_b"], [y], name=name, kernel_shape=[k, k],
                              pads=[k // 2] * 4)], [_weights(f"{name}_w", cout, cin, k, k), _weights(f"{name}_b", cout)])


def _slice(name: str, x: str, y: str, start: int, end: int):
    consts = [numpy_helper.from_array(np.array([v], np.int64), f"{name}_{k}") for k, v in
              (("s", start), ("e", end), ("a", 1))]
    return [helper.make_node("Slice", [x, f"{name}_s", f"{name}_e", f"{name}_a"], [y], name=name)], consts


def _model(parts, extra_nodes=(), channels: int = 16) -> onnx.ModelProto:
    nodes, inits = [], []
    for n, i in parts:
        nodes += n
        inits += i
    nodes += list(extra_nodes)
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, channels, 8, 8])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def _rows(model: onnx.ModelProto) -> list[str]:
    return [r.op_name for r in npu_layers.layer_records(model.graph) if r.kind != "alias"
            and not all(n.startswith("Constant") for n in r.nodes)]


def _same_values(optimized: onnx.ModelProto, model: onnx.ModelProto) -> None:
    x = _RNG.normal(size=(1, 16, 8, 8)).astype(np.float32)
    run = lambda m: reference_session(m.SerializeToString()).run(None, {"x": x})[0]   # noqa: E731
    np.testing.assert_allclose(run(optimized), run(model), rtol=1e-5, atol=1e-5)


def test_conv_read_by_two_slices_is_split_into_two_convs():
    """Conv → Slice[0:16], Slice[16:32] → Convs: rknn-toolkit2 prints Conv, Conv (x_conv, x_conv#1)
    and stores the slices' tensors; no Slice row."""
    model = _model([_conv("c0", "x", "y", 16, 32), _slice("s0", "y", "a", 0, 16), _slice("s1", "y", "b", 16, 32),
                    _conv("ca", "a", "ya", 16, 16), _conv("cb", "b", "yb", 16, 16, 3)],
                   [helper.make_node("Concat", ["ya", "yb"], ["out"], axis=1, name="cat")])
    optimized = optimize(model, 3)
    assert _rows(optimized) == ["Conv", "Conv", "Conv", "Conv", "Concat"]
    stored = {t for r in npu_layers.layer_records(optimized.graph) for t in r.stored}
    assert {"a", "b"} <= stored and "y" not in stored
    _same_values(optimized, model)


def test_conv_also_read_elsewhere_keeps_its_slice():
    """C2f form: the Conv's output is also concatenated, so it is not split (measured)."""
    model = _model([_conv("c0", "x", "y", 16, 32), _slice("s1", "y", "b", 16, 32), _conv("cb", "b", "out", 16, 16)])
    model.graph.node.append(helper.make_node("Concat", ["y", "b"], ["z"], axis=1, name="cat"))
    model.graph.output.append(helper.make_tensor_value_info("z", TensorProto.FLOAT, None))
    assert "Slice" in _rows(optimize(model, 3))


def test_slices_after_an_activation_are_one_split_layer():
    """ConvRelu → two channel Slices: one ``Split`` row (rknn-toolkit2 ``s0_2sp``)."""
    model = _model([_conv("c0", "x", "y0", 16, 32), ([helper.make_node("Relu", ["y0"], ["y"], name="r")], []),
                    _slice("s0", "y", "a", 0, 16), _slice("s1", "y", "b", 16, 32)],
                   [helper.make_node("Add", ["a", "b"], ["out"], name="add")])
    optimized = optimize(model, 3)
    assert _rows(optimized) == ["ConvRelu", "Split", "Add"]
    split = next(r for r in npu_layers.layer_records(optimized.graph) if r.op_name == "Split")
    assert split.stored == ("a", "b") and split.kind == "data"
    _same_values(optimized, model)


def test_channel_shuffle_becomes_gather_conv_folded_into_the_next_conv():
    """ShuffleNetV2: Concat → Reshape/Transpose/Reshape → Slice pair. The passthrough half is a 1×1
    gather Conv that stores the Slice's tensor, the other half folds into the branch's Conv, which
    reads the Concat (rknn-toolkit2: Concat, Conv cb 32→16, Conv cat_conv 32→16, Concat)."""
    shuffle = [helper.make_node("Concat", ["u", "v"], ["cat"], axis=1, name="cat"),
               helper.make_node("Reshape", ["cat", "r1s"], ["r1"], name="rs1"),
               helper.make_node("Transpose", ["r1"], ["t"], perm=[0, 2, 1, 3, 4], name="tp"),
               helper.make_node("Reshape", ["t", "r2s"], ["r2"], name="rs2")]
    model = _model([_conv("c0", "x", "u", 16, 16), _conv("c1", "x", "v", 16, 16), (shuffle, [
        numpy_helper.from_array(np.array([1, 2, 16, 8, 8], np.int64), "r1s"),
        numpy_helper.from_array(np.array([1, 32, 8, 8], np.int64), "r2s")]),
        _slice("s0", "r2", "a", 0, 16), _slice("s1", "r2", "b", 16, 32), _conv("cb", "b", "yb", 16, 16)],
        [helper.make_node("Concat", ["a", "yb"], ["out"], axis=1, name="cat2")])
    optimized = optimize(model, 3)
    assert sorted(_rows(optimized)) == ["Concat", "Concat", "Conv", "Conv", "Conv", "Conv"]
    assert not {"Reshape", "Transpose", "Slice"} & {n.op_type for n in optimized.graph.node}
    cb = next(n for n in optimized.graph.node if n.name == "cb")
    assert cb.input[0] == "cat"
    assert "a" in {t for r in npu_layers.layer_records(optimized.graph) for t in r.stored}
    _same_values(optimized, model)


def test_full_range_slice_and_slice_of_a_concat_input_vanish():
    """GhostNet's ``cat(x1, x2)[:, :C]`` keeping every channel is no layer; a Slice that is exactly
    one Concat input reads that input (both measured)."""
    cat = [helper.make_node("Concat", ["u", "v"], ["cat"], axis=1, name="cat")]
    full = _model([_conv("c0", "x", "u", 16, 8), _conv("c1", "x", "v", 16, 8), (cat, []),
                   _slice("s0", "cat", "a", 0, 16), _conv("cb", "a", "out", 16, 16)])
    optimized = optimize(full, 3)
    assert _rows(optimized) == ["Conv", "Conv", "Concat", "Conv"]
    _same_values(optimized, full)
    pieces = _model([_conv("c0", "x", "u", 16, 8), _conv("c1", "x", "v", 16, 8), (cat, []),
                     _slice("s0", "cat", "a", 0, 8), _slice("s1", "cat", "b", 8, 16),
                     _conv("ca", "a", "ya", 8, 8), _conv("cb", "b", "yb", 8, 8)],
                    [helper.make_node("Add", ["ya", "yb"], ["out"], name="add")])
    optimized = optimize(pieces, 3)
    assert "Concat" not in _rows(optimized) and "Slice" not in _rows(optimized)
    _same_values(optimized, pieces)
