"""load_tensorflow: frozen GraphDefs written here (no TensorFlow) against a numpy NHWC reference."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from openrknn.errors import ModelLoadError, UnsupportedOpError
from openrknn.frontends.tensorflow import load_tensorflow
from rknn.api import RKNN
from tests.helpers import cosine, reference_session
from tests.frontends.tensorflow import tf_helpers as ref
from tests.frontends.tensorflow.tf_helpers import GraphWriter

OUTPUTS = ["prob", "flat", "feat", "up", "up2", "upn2", "dil"]


def _errors(capsys) -> str:
    return "\n".join(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("E "))


def _vision_graph(path: Path) -> tuple[Path, dict[str, np.ndarray]]:
    """A MobileNet-like frozen graph using every supported op family; returns the file and weights."""
    g = GraphWriter(seed=0)
    g.placeholder("input", [1, 16, 16, 3])
    g.node("prep/sub", "Sub", ["input", g.const("prep/mean", 0.5)])
    g.node("pad", "Pad", ["prep/sub", g.const("pad/p", [[0, 0], [1, 1], [1, 1], [0, 0]], np.int32)])
    g.node("conv1", "Conv2D", ["pad", g.weight("w1", (3, 3, 3, 8))], strides=[1, 1, 1, 1], padding="VALID")
    g.node("conv1/bias", "BiasAdd", ["conv1", g.weight("b1", (8,), 0.1)])
    bn1 = [g.weight("bn1/s", (8,), low=0.5), g.weight("bn1/o", (8,), 0.1), g.weight("bn1/m", (8,), 0.1),
           g.weight("bn1/v", (8,), low=0.5)]
    g.node("bn1", "FusedBatchNormV3", ["conv1/bias", *bn1], epsilon=1e-3, is_training=False)
    g.node("relu6", "Relu6", ["bn1"])
    g.node("dw", "DepthwiseConv2dNative", ["relu6", g.weight("wd", (3, 3, 8, 2))], strides=[1, 2, 2, 1],
           padding="SAME")
    g.node("dw/bias", "BiasAdd", ["dw", g.weight("bd", (16,), 0.1)])
    g.node("dw/relu", "Relu", ["dw/bias"])
    g.node("pw", "Conv2D", ["dw/relu", g.weight("w2", (1, 1, 16, 8))], strides=[1, 1, 1, 1], padding="SAME")
    bn2 = [g.weight("bn2/s", (8,), low=0.5), g.weight("bn2/o", (8,), 0.1), g.weight("bn2/m", (8,), 0.1),
           g.weight("bn2/v", (8,), low=0.5)]
    g.node("bn2", "FusedBatchNorm", ["pw", *bn2], epsilon=1e-4)
    g.node("pw/relu", "Relu", ["bn2", "^relu6"])
    g.node("mp", "MaxPool", ["pw/relu"], ksize=[1, 3, 3, 1], strides=[1, 2, 2, 1], padding="SAME")
    g.node("up", "ResizeBilinear", ["mp", g.const("up/size", [8, 8], np.int32)], half_pixel_centers=True)
    g.node("ap", "AvgPool", ["pw/relu"], ksize=[1, 3, 3, 1], strides=[1, 2, 2, 1], padding="SAME")
    g.node("upn", "ResizeNearestNeighbor", ["ap", g.const("upn/size", [8, 8], np.int32)])
    g.node("up2", "ResizeBilinear", ["ap", g.const("up2/size", [7, 7], np.int32)], align_corners=True)
    g.node("upn2", "ResizeNearestNeighbor", ["mp", g.const("upn2/size", [9, 9], np.int32)], half_pixel_centers=True)
    g.node("cat", "ConcatV2", ["pw/relu", "up", "upn", g.const("cat/axis", -1, np.int32)])
    g.node("scale", "Mul", ["cat", g.weight("k1", (24,))])
    g.node("shift", "AddV2", ["scale", g.weight("k2", (1, 1, 1, 24), 0.1)])
    g.node("div", "RealDiv", ["shift", g.const("two", 2.0)])
    g.node("sub2", "Sub", ["div", g.weight("k3", (24,), 0.1)])
    g.node("sig", "Sigmoid", ["sub2"])
    g.node("tanh", "Tanh", ["shift"])
    g.node("mix", "Add", ["sig", "tanh"])
    g.node("mix/id", "Identity", ["mix"])
    g.node("gap", "Mean", ["mix/id", g.const("gap/axes", [1, 2], np.int32)], keep_dims=False)
    g.node("fc", "MatMul", ["gap", g.weight("wf", (24, 5))])
    g.node("fc/bias", "Add", ["fc", g.weight("bf", (5,), 0.1)])
    g.node("prob", "Softmax", ["fc/bias"])
    g.node("flat", "Reshape", ["mix", g.const("flat/shape", [1, -1], np.int32)])
    g.node("gap2", "Mean", ["pw/relu", g.const("gap2/axes", [1, 2], np.int32)], keep_dims=True)
    g.node("feat", "Squeeze", ["gap2"], squeeze_dims=[1, 2])
    g.node("dil", "Conv2D", ["relu6", g.weight("wdil", (3, 3, 8, 4))], strides=[1, 1, 1, 1], padding="SAME",
           dilations=[1, 2, 2, 1])
    return g.save(path), g.consts


def _vision_reference(x: np.ndarray, w: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    x = x.astype(np.float64) - 0.5
    x = np.pad(x, [(0, 0), (1, 1), (1, 1), (0, 0)])
    r6 = np.clip(ref.batch_norm(ref.conv2d(x, w["w1"]) + w["b1"], *(w[f"bn1/{k}"] for k in "somv"), 1e-3), 0, 6)
    d = np.maximum(ref.depthwise(r6, w["wd"], 2, "SAME") + w["bd"], 0)
    p = np.maximum(ref.batch_norm(ref.conv2d(d, w["w2"], 1, "SAME"), *(w[f"bn2/{k}"] for k in "somv"), 1e-4), 0)
    mp, ap = ref.max_pool(p, 3, 2, "SAME"), ref.avg_pool(p, 3, 2, "SAME")
    up = ref.resize_bilinear(mp, 8, 8, half_pixel=True)
    cat = np.concatenate([p, up, ref.resize_nearest(ap, 8, 8)], axis=-1)
    shift = cat * w["k1"] + w["k2"]
    sig = 1 / (1 + np.exp(-(shift / 2.0 - w["k3"])))
    mix = sig + np.tanh(shift)
    prob = ref.softmax(mix.mean(axis=(1, 2)) @ w["wf"] + w["bf"])
    return {"prob": prob, "flat": mix.reshape(1, -1), "feat": p.mean(axis=(1, 2)), "up": up,
            "up2": ref.resize_bilinear(ap, 7, 7, align=True), "upn2": ref.resize_nearest(mp, 9, 9, half_pixel=True),
            "dil": ref.conv2d(r6, w["wdil"], 1, "SAME", 2)}


@pytest.fixture(scope="module")
def vision(tmp_path_factory) -> tuple[Path, np.ndarray, dict[str, np.ndarray]]:
    path, weights = _vision_graph(tmp_path_factory.mktemp("tf") / "vision.pb")
    x = np.random.default_rng(1).uniform(0, 1, (1, 16, 16, 3)).astype(np.float32)
    return path, x, _vision_reference(x, weights)


def _run(path: Path, x: np.ndarray, float_dtype: str, **load: object) -> list[np.ndarray]:
    rknn = RKNN()
    assert rknn.config(target_platform="rk3588", float_dtype=float_dtype) == 0
    assert rknn.load_tensorflow(tf_pb=str(path), **load) == 0
    assert rknn.build(do_quantization=False) == 0
    assert rknn.init_runtime() == 0
    outs = rknn.inference(inputs=[x])
    rknn.release()
    return outs


def test_fp32_path_matches_numpy_reference(vision):
    path, x, want = vision
    outs = _run(path, x, "float32", inputs=["input"], outputs=OUTPUTS, input_size_list=[[1, 16, 16, 3]])
    for name, got in zip(OUTPUTS, outs):
        assert got.shape == want[name].shape, name
        rel = np.max(np.abs(got - want[name])) / np.max(np.abs(want[name]))
        assert rel <= 1e-4, f"{name}: relative error {rel:.2e}"


def test_fp16_path_cosine(vision):
    path, x, want = vision
    outs = _run(path, x, "float16", inputs=["input"], outputs=["prob", "flat"], input_size_list=[[1, 16, 16, 3]])
    assert cosine(outs[0], want["prob"]) >= 0.999 and cosine(outs[1], want["flat"]) >= 0.999


def test_layouts_names_and_few_transposes(vision):
    path, _, _ = vision
    src = load_tensorflow(str(path), ["input"], [[16, 16, 3]], OUTPUTS)  # Toolkit 1 size without batch
    graph = src.model.graph
    assert src.framework == "tensorflow" and src.input_layouts == {"input": "NHWC"}
    assert [i.name for i in graph.input] == ["input"]
    assert [d.dim_value for d in graph.input[0].type.tensor_type.shape.dim] == [1, 16, 16, 3]
    assert [o.name for o in graph.output] == OUTPUTS
    ops = [n.op_type for n in graph.node]
    # one Transpose into NCHW, one per 4-D output and one before the NHWC-order Reshape
    assert ops.count("Transpose") == 6
    assert ops.count("Conv") == 4 and "BiasAdd" not in ops
    conv1 = next(n for n in graph.node if n.name == "conv1")
    assert len(conv1.input) == 3  # BiasAdd folded into the Conv bias


def test_cut_at_inner_node_and_nchw_flag(tmp_path):
    g = GraphWriter()
    g.placeholder("image", [1, 4, 4, 2])
    g.node("prep", "Mul", ["image", g.const("k", 1 / 255)])
    g.node("body", "PadV2", ["prep", g.const("p", [[0, 0], [1, 0], [0, 1], [0, 0]], np.int32),
                             g.const("v", 1.5)])
    g.node("out", "ExpandDims", ["body", g.const("axis", 0, np.int32)])
    path = g.save(tmp_path / "cut.pb")
    src = load_tensorflow(str(path), ["prep"], [[1, 4, 4, 2]], ["out"], input_is_nchw=True)
    assert [i.name for i in src.model.graph.input] == ["prep"] and src.input_layouts == {"prep": "NCHW"}
    assert "image" not in {n.name for n in src.model.graph.node}
    x = np.random.default_rng(0).normal(size=(1, 4, 4, 2)).astype(np.float32)
    got = reference_session(src.model.SerializeToString()).run(None, {"prep": x})[0]
    want = np.pad(x, [(0, 0), (1, 0), (0, 1), (0, 0)], constant_values=1.5)[None]
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_predef_file_sets_placeholders(tmp_path):
    g = GraphWriter()
    g.placeholder("x", [1, 3])
    g.placeholder("ctl/gain", [])
    g.node("y", "Mul", ["x", "ctl/gain"])
    path = g.save(tmp_path / "predef.pb")
    with pytest.raises(ModelLoadError, match="Placeholder 'ctl/gain'.*predef_file"):
        load_tensorflow(str(path), ["x"], [[1, 3]], ["y"])
    np.savez(tmp_path / "prd.npz", **{"ctl#gain": np.float32(3.0)})
    src = load_tensorflow(str(path), ["x"], [[1, 3]], ["y"], predef_file=str(tmp_path / "prd.npz"))
    x = np.array([[1, 2, 3]], np.float32)
    np.testing.assert_allclose(reference_session(src.model.SerializeToString()).run(None, {"x": x})[0], 3 * x)


def test_mean_std_values_are_validated(vision):
    path = str(vision[0])
    load_tensorflow(path, ["input"], [[1, 16, 16, 3]], ["prob"], mean_values=[[127.5]], std_values=[[127.5]])
    with pytest.raises(ModelLoadError, match="division by zero"):
        load_tensorflow(path, ["input"], [[1, 16, 16, 3]], ["prob"], std_values=[0])
    with pytest.raises(ModelLoadError, match="one value per input"):
        load_tensorflow(path, ["input"], [[1, 16, 16, 3]], ["prob"], mean_values=[[1, 2, 3]])


def test_unsupported_op_and_variables(tmp_path):
    g = GraphWriter()
    g.placeholder("x", [1, 3])
    g.node("odd", "Erf", ["x"])
    g.node("var", "VariableV2", [])
    g.node("w", "MatMul", ["x", "var"])
    path = g.save(tmp_path / "ops.pb")
    with pytest.raises(UnsupportedOpError, match=r"TensorFlow operator 'Erf' \(node 'odd'\).*Conv2D"):
        load_tensorflow(str(path), ["x"], [[1, 3]], ["odd"])
    with pytest.raises(UnsupportedOpError, match="VariableV2.*freeze"):
        load_tensorflow(str(path), ["x"], [[1, 3]], ["w"])


def test_bad_files_and_names_give_minus_one(vision, tmp_path, capsys):
    path, _, _ = vision
    rknn = RKNN()
    args = dict(inputs=["input"], input_size_list=[[1, 16, 16, 3]], outputs=["prob"])
    assert rknn.load_tensorflow(tf_pb=str(tmp_path / "none.pb"), **args) == -1
    assert "does not exist" in _errors(capsys)
    cut = tmp_path / "cut.pb"
    cut.write_bytes(path.read_bytes()[:-37])
    assert rknn.load_tensorflow(tf_pb=str(cut), **args) == -1
    assert "not a frozen TensorFlow GraphDef" in _errors(capsys)
    junk = tmp_path / "junk.pb"
    junk.write_bytes(bytes(range(256)) * 4)
    assert rknn.load_tensorflow(tf_pb=str(junk), **args) == -1
    assert "not a frozen TensorFlow GraphDef" in _errors(capsys)
    assert rknn.load_tensorflow(tf_pb=str(path), inputs=["inputs"], input_size_list=[[1, 16, 16, 3]],
                                outputs=["prob"]) == -1
    message = _errors(capsys)
    assert "'inputs' in inputs is not a node" in message and "similar names: input" in message
    assert rknn.load_tensorflow(tf_pb=str(path), inputs=["input"], input_size_list=[[1, 16, 16, 3]],
                                outputs=["probs"]) == -1
    assert "'probs' in outputs is not a node" in _errors(capsys)
    assert rknn.load_tensorflow(tf_pb=str(path), inputs=["input"], input_size_list=[], outputs=["prob"]) == -1
    assert "input_size_list has 0 shape(s) for 1 input(s)" in _errors(capsys)


def test_nchw_data_format_ops_and_text_graphdef(tmp_path):
    from google.protobuf import text_format

    g = GraphWriter(seed=2)
    g.placeholder("x", [1, 3, 9, 9])
    g.node("conv", "Conv2D", ["x", g.weight("w", (3, 3, 3, 4))], strides=[1, 1, 2, 2], padding="SAME",
           data_format="NCHW")
    g.node("bias", "BiasAdd", ["conv", g.weight("b", (4,), 0.1)], data_format="NCHW")
    g.node("pool", "MaxPool", ["bias"], ksize=[1, 1, 2, 2], strides=[1, 1, 2, 2], padding="VALID",
           data_format="NCHW")
    path = tmp_path / "nchw.pbtxt"
    path.write_text(text_format.MessageToString(g.graph))
    src = load_tensorflow(str(path), ["x"], [[1, 3, 9, 9]], ["pool"], input_is_nchw=True)
    assert src.input_layouts == {"x": "NCHW"}
    assert [n.op_type for n in src.model.graph.node].count("Transpose") == 0
    x = np.random.default_rng(0).normal(size=(1, 3, 9, 9)).astype(np.float32)
    got = reference_session(src.model.SerializeToString()).run(None, {"x": x})[0]
    nhwc = ref.conv2d(x.transpose(0, 2, 3, 1).astype(np.float64), g.consts["w"], 2, "SAME") + g.consts["b"]
    want = ref.max_pool(nhwc, 2, 2, "VALID").transpose(0, 3, 1, 2)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_static_shape_arithmetic_folds(tmp_path):
    """TF-slim style heads: Reshape(x, Shape(y)), tf.shape(x)[0] packed into a shape, run-time slices."""
    g = GraphWriter(seed=3)
    g.placeholder("x", [1, 4, 4, 6])
    g.node("gap", "Mean", ["x", g.const("axes", [1, 2], np.int32)], keep_dims=True)
    g.node("squeezed", "Squeeze", ["gap"], squeeze_dims=[1, 2])
    g.node("flat2d", "Reshape", ["squeezed", g.const("shape2d", [-1, 6], np.int32)])
    g.node("soft", "Softmax", ["flat2d"])
    g.node("shape", "Shape", ["squeezed"], out_type=3)
    g.node("pred", "Reshape", ["soft", "shape"])
    g.node("xs", "Shape", ["x"], out_type=3)
    g.node("n", "StridedSlice", ["xs", g.const("b0", [0], np.int32), g.const("e0", [1], np.int32),
                                 g.const("s0", [1], np.int32)], shrink_axis_mask=1, Index=3)
    g.node("target", "Pack", ["n", g.const("minus1", -1, np.int32)], axis=0, N=2)
    g.node("flat", "Reshape", ["x", "target"])
    g.node("cut", "StridedSlice", ["x", g.const("b1", [0, 1, 0, 2], np.int32), g.const("e1", [0, 3, 0, 5], np.int32),
                                   g.const("s1", [1, 1, 2, 1], np.int32)], begin_mask=5, end_mask=5,
           shrink_axis_mask=0)
    g.node("row", "StridedSlice", ["x", g.const("b2", [0, -1], np.int32), g.const("e2", [0, 0], np.int32),
                                   g.const("s2", [1, 1], np.int32)], begin_mask=1, end_mask=3, shrink_axis_mask=2)
    path = g.save(tmp_path / "static.pb")
    src = load_tensorflow(str(path), ["x"], [[1, 4, 4, 6]], ["pred", "flat", "cut", "row"])
    assert "Shape" not in {n.op_type for n in src.model.graph.node}
    x = np.random.default_rng(0).normal(size=(1, 4, 4, 6)).astype(np.float32)
    pred, flat, cut, row = reference_session(src.model.SerializeToString()).run(None, {"x": x})
    np.testing.assert_allclose(pred, ref.softmax(x.mean(axis=(1, 2)).astype(np.float64)), rtol=1e-5)
    np.testing.assert_array_equal(flat, x.reshape(1, -1))
    np.testing.assert_array_equal(cut, x[:, 1:3, ::2, 2:5])
    np.testing.assert_array_equal(row, x[:, -1])
