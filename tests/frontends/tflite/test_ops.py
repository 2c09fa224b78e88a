"""Each TFLite builtin op family, in small generated models, against the TFLite interpreter."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("tflite")
litert = pytest.importorskip("ai_edge_litert.interpreter")

from openrknn.frontends.tflite import load_tflite  # noqa: E402
from tflite_writer import ModelWriter, options  # noqa: E402
from tests.helpers import reference_session

RNG = np.random.default_rng(0)
F32 = np.float32


def run_both(path, feeds: list[np.ndarray], input_is_nchw: bool = False):
    """(interpreter outputs, ONNX outputs, SourceModel) for the model at ``path``."""
    interp = litert.Interpreter(model_path=str(path))
    interp.allocate_tensors()
    for detail, x in zip(interp.get_input_details(), feeds):
        interp.set_tensor(detail["index"], x)
    interp.invoke()
    refs = [interp.get_tensor(d["index"]) for d in interp.get_output_details()]
    source = load_tflite(str(path), input_is_nchw=input_is_nchw)
    session = reference_session(source.model.SerializeToString())
    onnx_feeds = [x.transpose(0, 3, 1, 2) if input_is_nchw and x.ndim == 4 else x for x in feeds]
    names = [i.name for i in session.get_inputs()]
    outs = session.run(None, {n: x.astype(F32) for n, x in zip(names, onnx_feeds)})
    return refs, outs, source


def check(tmp_path, w: ModelWriter, inputs: list[int], outputs: list[int], atol: float = 1e-5):
    feeds = [RNG.uniform(-2, 2, w.tensors[i].shape).astype(F32) for i in inputs]
    refs, outs, source = run_both(w.save(tmp_path / "m.tflite", inputs, outputs), feeds)
    for ref, out in zip(refs, outs):
        assert ref.shape == out.shape
        np.testing.assert_allclose(out, ref, rtol=1e-5, atol=atol)
    return source


def act(w: ModelWriter, name: str, shape: list[int]) -> int:
    return w.tensor(name, shape)


def weights(name: str, shape: list[int], w: ModelWriter) -> int:
    return w.const(name, RNG.normal(0, 0.5, shape).astype(F32))


@pytest.mark.parametrize("padding,stride,dilation,fused", [(0, 1, 1, 3), (1, 2, 1, 1), (0, 2, 1, 0), (0, 1, 2, 2)])
def test_conv_2d(tmp_path, padding, stride, dilation, fused):
    w = ModelWriter()
    x = act(w, "x", [1, 9, 9, 3])
    out = (9 - (2 * dilation + 1)) // stride + 1 if padding == 1 else -(-9 // stride)
    y = act(w, "y", [1, out, out, 4])
    w.op("CONV_2D", [x, weights("w", [4, 3, 3, 3], w), weights("b", [4], w)], [y],
         options("Conv2DOptions", padding=padding, strideW=stride, strideH=stride, dilationWFactor=dilation,
                 dilationHFactor=dilation, fusedActivationFunction=fused))
    source = check(tmp_path, w, [x], [y])
    assert source.input_layouts == {"x": "NHWC"}
    assert [n.op_type for n in source.model.graph.node].count("Transpose") == 2


def test_depthwise_then_add_relu6_stays_nchw(tmp_path):
    w = ModelWriter()
    x, d, y = act(w, "x", [1, 8, 8, 3]), act(w, "dw", [1, 8, 8, 6]), act(w, "y", [1, 8, 8, 6])
    w.op("DEPTHWISE_CONV_2D", [x, weights("w", [1, 3, 3, 6], w), weights("b", [6], w)], [d],
         options("DepthwiseConv2DOptions", padding=0, strideW=1, strideH=1, depthMultiplier=2,
                 dilationWFactor=1, dilationHFactor=1))
    w.op("ADD", [d, weights("c", [6], w)], [y], options("AddOptions", fusedActivationFunction=3))
    source = check(tmp_path, w, [x], [y])
    assert [n.op_type for n in source.model.graph.node].count("Transpose") == 2
    assert [n.name for n in source.model.graph.node if n.op_type == "Conv"] == ["dw"]


def test_transpose_conv_with_bias(tmp_path):
    w = ModelWriter()
    x, y = act(w, "x", [1, 5, 5, 4]), act(w, "y", [1, 10, 10, 2])
    shape = w.const("shape", np.array([1, 10, 10, 2], np.int32))
    w.op("TRANSPOSE_CONV", [shape, weights("w", [2, 3, 3, 4], w), x, weights("b", [2], w)], [y],
         options("TransposeConvOptions", padding=0, strideW=2, strideH=2), version=3)
    check(tmp_path, w, [x], [y])


def test_fully_connected_flattens_nhwc(tmp_path):
    w = ModelWriter()
    x, c, y = act(w, "x", [1, 4, 4, 2]), act(w, "c", [1, 4, 4, 2]), act(w, "y", [1, 5])
    w.op("CONV_2D", [x, weights("cw", [2, 1, 1, 2], w), weights("cb", [2], w)], [c],
         options("Conv2DOptions", padding=1, strideW=1, strideH=1, dilationWFactor=1, dilationHFactor=1))
    w.op("FULLY_CONNECTED", [c, weights("w", [5, 32], w), weights("b", [5], w)], [y],
         options("FullyConnectedOptions", fusedActivationFunction=1))
    check(tmp_path, w, [x], [y])


@pytest.mark.parametrize("op", ["ADD", "SUB", "MUL", "DIV", "MAXIMUM", "MINIMUM", "SQUARED_DIFFERENCE"])
def test_binary_broadcast(tmp_path, op):
    w = ModelWriter()
    a, b, y = act(w, "a", [1, 4, 5, 3]), act(w, "b", [1, 4, 5, 3]), act(w, "y", [1, 4, 5, 3])
    kind = {"ADD": "AddOptions", "SUB": "SubOptions", "MUL": "MulOptions", "DIV": "DivOptions"}.get(op)
    opts = options(kind) if kind else None
    w.op(op, [a, b], [y], opts)
    z = act(w, "z", [1, 4, 5, 3])
    w.op("MUL", [y, w.const("k", np.array([[1.5], [2.0], [0.5], [1.0], [3.0]], F32))], [z], options("MulOptions"))
    check(tmp_path, w, [a, b], [z])


@pytest.mark.parametrize("op", ["RELU", "RELU6", "RELU_N1_TO_1", "LOGISTIC", "TANH", "HARD_SWISH", "LEAKY_RELU",
                                "ABS", "EXP", "NEG", "SQUARE"])
def test_unary_after_conv(tmp_path, op):
    w = ModelWriter()
    x, c, y = act(w, "x", [1, 5, 5, 2]), act(w, "c", [1, 5, 5, 3]), act(w, "y", [1, 5, 5, 3])
    w.op("CONV_2D", [x, weights("w", [3, 1, 1, 2], w), weights("b", [3], w)], [c],
         options("Conv2DOptions", padding=0, strideW=1, strideH=1, dilationWFactor=1, dilationHFactor=1))
    w.op(op, [c], [y], options("LeakyReluOptions", alpha=0.2) if op == "LEAKY_RELU" else None)
    check(tmp_path, w, [x], [y])


def test_prelu_and_softmax(tmp_path):
    w = ModelWriter()
    x, c, p, y = (act(w, "x", [1, 4, 4, 2]), act(w, "c", [1, 4, 4, 3]), act(w, "p", [1, 4, 4, 3]),
                  act(w, "y", [1, 4, 4, 3]))
    w.op("CONV_2D", [x, weights("w", [3, 1, 1, 2], w), weights("b", [3], w)], [c],
         options("Conv2DOptions", padding=0, strideW=1, strideH=1, dilationWFactor=1, dilationHFactor=1))
    w.op("PRELU", [c, w.const("alpha", RNG.uniform(0, 0.5, [1, 1, 3]).astype(F32))], [p])
    w.op("SOFTMAX", [p], [y], options("SoftmaxOptions", beta=0.7))
    check(tmp_path, w, [x], [y])


@pytest.mark.parametrize("op,padding", [("AVERAGE_POOL_2D", 0), ("AVERAGE_POOL_2D", 1), ("MAX_POOL_2D", 0)])
def test_pools(tmp_path, op, padding):
    w = ModelWriter()
    x = act(w, "x", [1, 7, 7, 3])
    out = 3 if padding == 1 else 4
    y = act(w, "y", [1, out, out, 3])
    w.op(op, [x], [y], options("Pool2DOptions", padding=padding, strideW=2, strideH=2, filterWidth=3,
                               filterHeight=3))
    check(tmp_path, w, [x], [y])


@pytest.mark.parametrize("axes,keep,out", [([1, 2], True, [1, 1, 1, 3]), ([1, 2], False, [1, 3]),
                                           ([2], False, [1, 6, 3]), ([3], False, [1, 6, 6])])
def test_mean_after_conv(tmp_path, axes, keep, out):
    w = ModelWriter()
    x, c, y = act(w, "x", [1, 6, 6, 3]), act(w, "c", [1, 6, 6, 3]), act(w, "y", out)
    w.op("CONV_2D", [x, weights("w", [3, 1, 1, 3], w), weights("b", [3], w)], [c],
         options("Conv2DOptions", padding=0, strideW=1, strideH=1, dilationWFactor=1, dilationHFactor=1))
    w.op("MEAN", [c, w.const("axes", np.array(axes, np.int32))], [y], options("ReducerOptions", keepDims=keep))
    check(tmp_path, w, [x], [y])


def test_pad_concat_split_on_nchw_tensors(tmp_path):
    w = ModelWriter()
    x, c, p, q, cat = (act(w, "x", [1, 4, 4, 2]), act(w, "c", [1, 4, 4, 2]), act(w, "p", [1, 6, 5, 2]),
                       act(w, "q", [1, 6, 5, 2]), act(w, "cat", [1, 6, 5, 4]))
    s1, s2 = act(w, "s1", [1, 6, 5, 1]), act(w, "s2", [1, 6, 5, 3])
    w.op("CONV_2D", [x, weights("w", [2, 1, 1, 2], w), weights("b", [2], w)], [c],
         options("Conv2DOptions", padding=0, strideW=1, strideH=1, dilationWFactor=1, dilationHFactor=1))
    w.op("PAD", [c, w.const("pads", np.array([[0, 0], [1, 1], [0, 1], [0, 0]], np.int32))], [p])
    w.op("PADV2", [c, w.const("pads2", np.array([[0, 0], [2, 0], [1, 0], [0, 0]], np.int32)),
                   w.const("value", np.array(0.5, F32))], [q])
    w.op("CONCATENATION", [p, q], [cat], options("ConcatenationOptions", axis=3))
    w.op("SPLIT_V", [cat, w.const("sizes", np.array([1, 3], np.int32)), w.const("axis", np.array(-1, np.int32))],
         [s1, s2], options("SplitVOptions", numSplits=2))
    source = check(tmp_path, w, [x], [s1, s2])
    assert "Concat" in {n.op_type for n in source.model.graph.node}


def test_reshape_squeeze_transpose_slices(tmp_path):
    w = ModelWriter()
    x, r, s, t, sl, ss, sp1, sp2 = (act(w, "x", [1, 4, 6, 2]), act(w, "r", [1, 1, 8, 6]), act(w, "s", [8, 6]),
                                    act(w, "t", [6, 8]), act(w, "sl", [4, 6]), act(w, "ss", [3]),
                                    act(w, "sp1", [3, 8]), act(w, "sp2", [3, 8]))
    w.op("RESHAPE", [x, w.const("shape", np.array([1, 1, 8, 6], np.int32))], [r],
         options("ReshapeOptions", newShape=[1, 1, 8, 6]))
    w.op("SQUEEZE", [r], [s], options("SqueezeOptions", squeezeDims=[0, 1]))
    w.op("TRANSPOSE", [s, w.const("perm", np.array([1, 0], np.int32))], [t])
    w.op("SLICE", [t, w.const("begin", np.array([1, 2], np.int32)), w.const("size", np.array([4, -1], np.int32))],
         [sl])
    w.op("STRIDED_SLICE", [sl, w.const("b", np.array([1, 0], np.int32)), w.const("e", np.array([2, 5], np.int32)),
                           w.const("st", np.array([1, 2], np.int32))], [ss],
         options("StridedSliceOptions", shrinkAxisMask=1, beginMask=2))
    w.op("SPLIT", [w.const("axis", np.array(0, np.int32)), t], [sp1, sp2], options("SplitOptions", numSplits=2))
    check(tmp_path, w, [x], [ss, sp1, sp2])


@pytest.mark.parametrize("op,align,half", [("RESIZE_BILINEAR", False, False), ("RESIZE_BILINEAR", True, False),
                                           ("RESIZE_BILINEAR", False, True), ("RESIZE_NEAREST_NEIGHBOR", False, False),
                                           ("RESIZE_NEAREST_NEIGHBOR", True, False),
                                           ("RESIZE_NEAREST_NEIGHBOR", False, True)])
def test_resize(tmp_path, op, align, half):
    w = ModelWriter()
    x, y = act(w, "x", [1, 5, 4, 2]), act(w, "y", [1, 9, 11, 2])
    kind = "ResizeBilinearOptions" if op == "RESIZE_BILINEAR" else "ResizeNearestNeighborOptions"
    w.op(op, [x, w.const("size", np.array([9, 11], np.int32))], [y],
         options(kind, alignCorners=align, halfPixelCenters=half), version=3 if half else 1)
    check(tmp_path, w, [x], [y])


def test_depth_space_round_trip_shapes(tmp_path):
    w = ModelWriter()
    x, d, s = act(w, "x", [1, 4, 4, 8]), act(w, "d", [1, 8, 8, 2]), act(w, "s", [1, 2, 2, 32])
    w.op("DEPTH_TO_SPACE", [x], [d], options("DepthToSpaceOptions", blockSize=2))
    w.op("SPACE_TO_DEPTH", [x], [s], options("SpaceToDepthOptions", blockSize=2))
    check(tmp_path, w, [x], [d, s])


def test_fp16_weights_are_folded_and_input_is_nchw(tmp_path):
    w = ModelWriter()
    x, wd, y = act(w, "x", [1, 6, 6, 3]), act(w, "w_dq", [4, 3, 3, 3]), act(w, "y", [1, 6, 6, 4])
    w16 = w.const("w16", RNG.normal(0, 0.5, [4, 3, 3, 3]).astype(np.float16))
    w.op("DEQUANTIZE", [w16], [wd])
    w.op("CONV_2D", [x, wd, weights("b", [4], w)], [y],
         options("Conv2DOptions", padding=0, strideW=1, strideH=1, dilationWFactor=1, dilationHFactor=1))
    path = w.save(tmp_path / "m.tflite", [x], [y])
    feed = RNG.uniform(-1, 1, [1, 6, 6, 3]).astype(F32)
    refs, outs, source = run_both(path, [feed], input_is_nchw=True)
    np.testing.assert_allclose(outs[0], refs[0], rtol=1e-5, atol=1e-5)
    assert source.input_layouts == {"x": "NCHW"}
    assert [d.dim_value for d in source.model.graph.input[0].type.tensor_type.shape.dim] == [1, 3, 6, 6]
    assert "DequantizeLinear" not in {n.op_type for n in source.model.graph.node}
    assert not source.quant_params


def test_densify_sparse_weights(tmp_path):
    schema = __import__("ai_edge_litert.schema_py_generated", fromlist=["x"])
    dense = np.zeros([4, 6], F32)
    dense[0, 1], dense[0, 4], dense[2, 0], dense[3, 5], dense[3, 2] = 1.5, -2.0, 0.5, 3.0, -1.0
    rows, cols = np.nonzero(dense)
    segments = np.concatenate([[0], np.cumsum(np.bincount(rows, minlength=4))])
    dims = [schema.DimensionMetadataT(), schema.DimensionMetadataT()]
    dims[0].format, dims[0].denseSize = 0, 4
    dims[1].format = 1
    dims[1].arraySegmentsType, dims[1].arrayIndicesType = 1, 1
    dims[1].arraySegments, dims[1].arrayIndices = schema.Int32VectorT(), schema.Int32VectorT()
    dims[1].arraySegments.values, dims[1].arrayIndices.values = list(map(int, segments)), list(map(int, cols))
    sparsity = schema.SparsityParametersT()
    sparsity.traversalOrder, sparsity.dimMetadata = [0, 1], dims
    w = ModelWriter()
    x, wd, y = act(w, "x", [2, 6]), act(w, "w_dense", [4, 6]), act(w, "y", [2, 4])
    sparse = w.tensor("w_sparse", [4, 6], F32, raw=dense[rows, cols], sparsity=sparsity)
    w.op("DENSIFY", [sparse], [wd])
    w.op("FULLY_CONNECTED", [x, wd, -1], [y], options("FullyConnectedOptions"))
    check(tmp_path, w, [x], [y])


def test_unsupported_builtin_is_named(tmp_path):
    from openrknn.errors import UnsupportedOpError

    w = ModelWriter()
    x, y = act(w, "x", [4]), act(w, "y", [4])
    w.op("CUMSUM", [x, w.const("axis", np.array(0, np.int32))], [y])
    w.op("L2_NORMALIZATION", [y], [act(w, "z", [4])])
    with pytest.raises(UnsupportedOpError, match="CUMSUM.*L2_NORMALIZATION"):
        load_tflite(str(w.save(tmp_path / "m.tflite", [x], [y])))


def test_less_common_ops(tmp_path):
    w = ModelWriter()
    x, c, m, s, r, e, lsm, q = (act(w, "x", [1, 4, 4, 2]), act(w, "c", [1, 4, 4, 2]), act(w, "m", [1, 6, 6, 2]),
                              act(w, "s", [1, 6, 2]), act(w, "r", [1, 1, 1, 2]), act(w, "e", [1, 6, 1, 2]),
                              act(w, "l", [1, 6, 1, 2]), act(w, "q", [1, 1, 1, 2]))
    w.op("CONV_2D", [x, weights("w", [2, 1, 1, 2], w), weights("b", [2], w)], [c],
         options("Conv2DOptions", padding=0, strideW=1, strideH=1, dilationWFactor=1, dilationHFactor=1))
    w.op("MIRROR_PAD", [c, w.const("pads", np.array([[0, 0], [1, 1], [1, 1], [0, 0]], np.int32))], [m],
         options("MirrorPadOptions", mode=0))
    w.op("SUM", [m, w.const("ax", np.array([2], np.int32))], [s], options("ReducerOptions", keepDims=False))
    w.op("REDUCE_MAX", [m, w.const("ax2", np.array([1, 2], np.int32))], [r], options("ReducerOptions", keepDims=True))
    w.op("EXPAND_DIMS", [s, w.const("dim", np.array(2, np.int32))], [e])
    w.op("LOG_SOFTMAX", [e], [lsm], options("LogSoftmaxOptions"))
    r_abs = act(w, "r_abs", [1, 1, 1, 2])
    w.op("ABS", [r], [r_abs])
    w.op("RSQRT", [r_abs], [q])
    check(tmp_path, w, [x], [lsm, q])
