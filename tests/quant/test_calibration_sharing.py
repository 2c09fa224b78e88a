"""Which tensors share one quantization, as rknn-toolkit2 2.5.0's ``normal`` calibration decides
(its ``hybrid_quantization_step1`` configs of probe graphs on rk3588; docs/fidelity.md, "Scales"):

* a piece (a Split on any axis, a Slice of channels) has its own range; a Slice along H or W
  keeps its input's;
* a Relu/Clip that is a layer of its own gives its input its parameters (the producer saturates);
* a Resize's input takes the Resize's parameters when nothing else reads it, else the output
  takes the input's; an AveragePool's output always takes its input's (the default; its own range
  on request, ``QuantSettings(average_pool_shares_input=False)``).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from openrknn.quant import annotate
from openrknn.quant.numerics import QuantParams
from openrknn.quant.quantizer import shared_params
from tests.helpers import cosine, quantized_build, reference_session

_RNG = np.random.default_rng(0)


def _conv(x: str, out: str, cin: int, cout: int, inits: list) -> onnx.NodeProto:
    inits += [numpy_helper.from_array(_RNG.normal(0, 0.3, (cout, cin, 1, 1)).astype(np.float32), f"{out}_w"),
              numpy_helper.from_array(_RNG.normal(0, 0.5, cout).astype(np.float32), f"{out}_b")]
    return helper.make_node("Conv", [x, f"{out}_w", f"{out}_b"], [out])


def _const(inits: list, name: str, values, dtype=np.int64) -> str:
    inits.append(numpy_helper.from_array(np.asarray(values, dtype), name))
    return name


def _build(tmp_path: Path, nodes, inits, outputs: list[str]):
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs], inits)
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)
    samples = [np.random.default_rng(i).uniform(-1, 1, (1, 3, 8, 8)).astype(np.float32) for i in range(3)]
    return quantized_build(path, samples), path, samples


def _float_ranges(path: Path, samples, names: list[str]) -> dict[str, tuple[float, float]]:
    """Each tensor's calibrated range (min ≤ 0 ≤ max) over the samples, from onnxruntime."""
    model = onnx.load(str(path))
    model.graph.output.extend([helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in names])
    session = reference_session(model)
    wanted = [o.name for o in model.graph.output]
    ranges = {n: (0.0, 0.0) for n in names}
    for sample in samples:
        for name, value in zip(wanted, session.run(wanted, {"x": sample})):
            if name in ranges:
                ranges[name] = (min(ranges[name][0], float(value.min())), max(ranges[name][1], float(value.max())))
    return ranges


def _scale(rknn, name: str) -> float:
    return rknn._model.quant_params[name]["scale"][0]


def _params(rknn, name: str) -> tuple:
    entry = rknn._model.quant_params[name]
    return tuple(entry["scale"]), tuple(entry["zero_point"])


def test_channel_pieces_have_their_own_range_and_spatial_slices_their_inputs(tmp_path):
    inits: list = []
    nodes = [_conv("x", "c", 3, 32, inits), helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("Split", ["r", _const(inits, "halves", [16, 16])], ["s0", "s1"], axis=1),
             _conv("s0", "a0", 16, 4, inits), _conv("s1", "a1", 16, 4, inits),
             helper.make_node("Slice", ["r", _const(inits, "b0", [0]), _const(inits, "e0", [8]),
                                        _const(inits, "ax", [1])], ["h0"]),
             _conv("h0", "a2", 8, 4, inits),
             helper.make_node("Slice", ["r", _const(inits, "b1", [0]), _const(inits, "e1", [8]),
                                        _const(inits, "ax2", [2]), _const(inits, "st", [2])], ["f0"]),
             _conv("f0", "a3", 32, 4, inits)]
    rknn, path, samples = _build(tmp_path, nodes, inits, ["a0", "a1", "a2", "a3"])
    ranges = _float_ranges(path, samples, ["r", "s0", "s1", "h0", "f0"])
    for piece in ("s0", "s1", "h0"):   # a channel piece: its own maximum
        assert np.isclose(_scale(rknn, piece), ranges[piece][1] / 255, rtol=1e-4), piece
    assert min(ranges[p][1] for p in ("s0", "s1", "h0")) < 0.98 * ranges["r"][1], "the probe needs a narrower piece"
    assert _params(rknn, "f0") == _params(rknn, "r")   # a strided spatial Slice keeps its input's parameters
    assert rknn.init_runtime() == 0
    got = rknn.inference(inputs=[samples[0]], data_format="nchw")
    expected = reference_session(path).run(None, {"x": samples[0]})
    assert min(cosine(g, e) for g, e in zip(got, expected)) > 0.999


def test_split_pieces_on_any_axis_have_their_own_range_and_width_slices_their_inputs(tmp_path):
    """rknn-toolkit2 2.5.0, a probe (rk3588, 4 random inputs, ``hybrid_quantization_step1``): a Split
    on axis 2 of a ConvRelu stores the piece's own range (0.008842, parent 0.009092), a Split on the
    last axis of yolov5's 5-D decode tensor too (0.003272 and 0.003349, parent 0.003480); a unit-step
    Slice along W keeps the parent's (0.007058; its own would be 0.006055)."""
    inits: list = []
    nodes = [_conv("x", "c", 3, 8, inits), helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("Split", ["r", _const(inits, "halves", [4, 4])], ["s0", "s1"], axis=2),
             _conv("s0", "a0", 8, 4, inits), _conv("s1", "a1", 8, 4, inits),
             helper.make_node("Slice", ["r", _const(inits, "b0", [0]), _const(inits, "e0", [3]),
                                        _const(inits, "ax", [3])], ["w0"]),
             _conv("w0", "a2", 8, 4, inits),
             _conv("x", "d", 3, 12, inits), helper.make_node("Sigmoid", ["d"], ["g"]),
             helper.make_node("Reshape", ["g", _const(inits, "five", [1, 3, 4, 8, 8])], ["g5"]),
             helper.make_node("Transpose", ["g5"], ["gt"], perm=[0, 1, 3, 4, 2]),
             helper.make_node("Split", ["gt", _const(inits, "parts", [2, 1, 1])], ["p0", "p1", "p2"], axis=4),
             helper.make_node("Mul", ["p0", _const(inits, "two", 2.0, np.float32)], ["m0"]),
             helper.make_node("Concat", ["m0", "p1", "p2"], ["cat"], axis=4)]
    rknn, path, samples = _build(tmp_path, nodes, inits, ["a0", "a1", "a2", "cat"])
    ranges = _float_ranges(path, samples, ["r", "s0", "s1", "w0", "gt", "p0", "p1"])
    for piece in ("s0", "s1"):
        assert np.isclose(_scale(rknn, piece), ranges[piece][1] / 255, rtol=1e-4), piece
    assert min(ranges["s0"][1], ranges["s1"][1]) < 0.99 * ranges["r"][1], "the probe needs a narrower piece"
    for piece in ("p0", "p1"):   # a Sigmoid's pieces: min > 0, so min ≤ 0 ≤ max makes the range [0, max]
        assert np.isclose(_scale(rknn, piece), ranges[piece][1] / 255, rtol=1e-4), piece
    assert min(ranges["p0"][1], ranges["p1"][1]) < 0.999 * ranges["gt"][1], "the probe needs a narrower piece"
    assert _params(rknn, "w0") == _params(rknn, "r")


def test_clip_after_mul_gives_the_mul_its_parameters(tmp_path):
    inits: list = []
    nodes = [_conv("x", "c1", 3, 8, inits), _conv("x", "c2", 3, 8, inits), helper.make_node("Sigmoid", ["c2"], ["g"]),
             helper.make_node("Mul", ["c1", "g"], ["m"]),
             helper.make_node("Clip", ["m", _const(inits, "lo", 0.0, np.float32), _const(inits, "hi", 6.0, np.float32)],
                              ["cl"]),
             _conv("cl", "y", 8, 4, inits)]
    rknn, path, samples = _build(tmp_path, nodes, inits, ["y"])
    ranges = _float_ranges(path, samples, ["m", "cl"])
    assert ranges["m"][0] < 0   # the Mul's own range would be wider
    assert _params(rknn, "m") == _params(rknn, "cl")
    assert np.isclose(_scale(rknn, "cl"), ranges["cl"][1] / 255, rtol=1e-4)


def test_resize_shares_its_inputs_parameters(tmp_path):
    inits: list = []
    scales = _const(inits, "twice", [1, 1, 2, 2], np.float32)
    nodes = [_conv("x", "c1", 3, 8, inits), helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Resize", ["r1", "", scales], ["rs"], mode="linear"), _conv("rs", "y1", 8, 4, inits),
             _conv("x", "c2", 3, 8, inits), helper.make_node("Relu", ["c2"], ["r2"]),
             helper.make_node("Resize", ["r2", "", scales], ["qs"], mode="linear"), _conv("qs", "y2", 8, 4, inits),
             _conv("r2", "y3", 8, 4, inits)]
    rknn, path, samples = _build(tmp_path, nodes, inits, ["y1", "y2", "y3"])
    ranges = _float_ranges(path, samples, ["r1", "rs", "r2", "qs"])
    # read only by the Resize: the ConvRelu stores the Resize's (narrower) range
    assert ranges["rs"][1] < 0.999 * ranges["r1"][1]
    assert _params(rknn, "r1") == _params(rknn, "rs")
    assert np.isclose(_scale(rknn, "rs"), ranges["rs"][1] / 255, rtol=1e-4)
    # read by a Conv too: the Resize's output takes the input's range
    assert _params(rknn, "qs") == _params(rknn, "r2")
    assert np.isclose(_scale(rknn, "r2"), ranges["r2"][1] / 255, rtol=1e-4)


def test_average_pool_shares_its_inputs_parameters_by_default(tmp_path):
    """rknn-toolkit2 2.5.0 gives every AveragePool's output its input's parameters, whatever the
    pool's attributes and whatever else reads the input. Its ``hybrid_quantization_step1`` config of
    a probe (Conv+Relu → AveragePool → Conv, rk3588, 4 random inputs) has input scale = output scale
    for kernel 2 stride 2 (0.022647, the pooled range [0, 2.689] of the input's [0, 5.775]); the same
    with ``ceil_mode=1, count_include_pad=0`` (resnet-d's shortcut, 0.023229); kernel 3 stride 1 pad 1
    with and without ``count_include_pad`` (0.022970, 0.021545; the latter a CPU layer); kernel 3×2
    stride 3×2 (PP-OCRv4 rec's pool, 0.024533); kernel 5 stride 5 (0.027760); after a Conv without
    activation (0.046338). The oracle corpus: resnet18d's three ``downsample`` pools (their input
    also read by a Conv) and PP-OCRv4 rec's pool (read by a Conv and a Concat) the same."""
    inits: list = []
    nodes = [_conv("x", "c1", 3, 8, inits), helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("AveragePool", ["r1"], ["ap1"], kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1,
                              count_include_pad=0),
             _conv("ap1", "y1", 8, 4, inits), _conv("r1", "y2", 8, 4, inits),   # the input read by a Conv too
             _conv("x", "c2", 3, 8, inits),
             helper.make_node("AveragePool", ["c2"], ["ap2"], kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1],
                              count_include_pad=1),
             _conv("ap2", "y3", 8, 4, inits)]
    rknn, path, samples = _build(tmp_path, nodes, inits, ["y1", "y2", "y3"])
    ranges = _float_ranges(path, samples, ["r1", "ap1", "c2", "ap2"])
    assert ranges["ap1"][1] < 0.99 * ranges["r1"][1], "the probe needs a narrower pooled range"
    assert _params(rknn, "ap1") == _params(rknn, "r1")
    assert np.isclose(_scale(rknn, "ap1"), ranges["r1"][1] / 255, rtol=1e-4)
    assert _params(rknn, "ap2") == _params(rknn, "c2")
    assert rknn.init_runtime() == 0
    got = rknn.inference(inputs=[samples[0]], data_format="nchw")
    expected = reference_session(path).run(None, {"x": samples[0]})
    assert min(cosine(g, e) for g, e in zip(got, expected)) > 0.999


def test_average_pool_keeps_its_own_range_on_request():
    inits: list = []
    nodes = [_conv("x", "c", 3, 8, inits),
             helper.make_node("AveragePool", ["c"], ["ap"], kernel_shape=[2, 2], strides=[2, 2]),
             _conv("ap", "y", 8, 4, inits)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 4, 4])], inits)
    model = onnx.shape_inference.infer_shapes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]))
    assert ("ap", "c") in annotate.mark(model, True).shared   # the default: the input's parameters
    assert ("ap", "c") not in annotate.mark(model, True, average_pool_shares_input=False).shared


def test_shared_parameters_resolve_chains_in_any_order():
    a = QuantParams("int8", np.array([0.1], np.float32), np.array([0]))
    b = QuantParams("int8", np.array([0.2], np.float32), np.array([1]))
    # conv ← relu recorded before relu ← resize: the conv still ends with the resize's parameters
    got = shared_params([("conv", "relu"), ("relu", "resize"), ("cut", "float")], {"conv": a, "relu": a, "resize": b,
                                                                                 "cut": a})
    assert got["conv"] is b and got["relu"] is b
    assert got["cut"] is a   # a source without parameters leaves the tensor its own
    assert shared_params([("p", "q"), ("q", "p")], {"p": a})["p"] is a   # a loop ends
