"""config options that rewrite the graph: model_pruning (checked lossless) and remove_reshape."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from rknn.api import RKNN


def _net(path, zero_channels=(1, 4), out_shape=(1, -1)):
    rng = np.random.default_rng(0)
    w1 = rng.normal(0, 0.5, (6, 3, 3, 3)).astype(np.float32)
    b1 = rng.normal(0, 0.1, 6).astype(np.float32)
    for k in zero_channels:
        w1[k] = 0
        b1[k] = 0
    w2 = rng.normal(0, 0.5, (4, 6, 1, 1)).astype(np.float32)
    inits = [numpy_helper.from_array(a, n) for a, n in ((w1, "w1"), (b1, "b1"), (w2, "w2"),
                                                         (np.array(out_shape, np.int64), "shape"))]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1] * 4),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("Conv", ["r1", "w2"], ["c2"], name="conv2"),
             helper.make_node("Reshape", ["c2", "shape"], ["y"], name="out_reshape")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 256])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)


def _run(path, **cfg):
    rknn = RKNN()
    rknn.config(float_dtype="float32", **cfg)
    rknn.load_onnx(model=str(path))
    assert rknn.build(do_quantization=False) == 0
    rknn.init_runtime()
    x = np.random.default_rng(2).normal(size=(1, 8, 8, 3)).astype(np.float32)
    return rknn, rknn.inference(inputs=[x])[0]


def test_model_pruning_is_lossless_and_reported(tmp_path, capsys):
    _net(tmp_path / "m.onnx")
    _, plain = _run(tmp_path / "m.onnx")
    capsys.readouterr()
    rknn, pruned = _run(tmp_path / "m.onnx", model_pruning=True)
    out = capsys.readouterr().out
    assert "I model_pruning results:" in out and "Weight: -" in out and "GFLOPs: -" in out
    np.testing.assert_allclose(pruned, plain, rtol=1e-6, atol=1e-6)
    weights = {i.name: i.dims for i in rknn._model.graph.graph.initializer}
    assert list(weights["w1"]) == [4, 3, 3, 3] and list(weights["w2"]) == [4, 4, 1, 1]


def test_model_pruning_prints_nothing_when_nothing_to_prune(tmp_path, capsys):
    _net(tmp_path / "m.onnx", zero_channels=())
    _run(tmp_path / "m.onnx", model_pruning=True)
    assert "model_pruning" not in capsys.readouterr().out


def test_remove_reshape_returns_the_unreshaped_output(tmp_path):
    _net(tmp_path / "m.onnx")
    _, plain = _run(tmp_path / "m.onnx")
    rknn, raw = _run(tmp_path / "m.onnx", remove_reshape=True)
    assert plain.shape == (1, 256) and raw.shape == (1, 4, 8, 8)
    np.testing.assert_allclose(raw.reshape(1, -1), plain, rtol=1e-6)
    assert rknn._model.outputs[0].shape == [1, 4, 8, 8]


def _dynamic_net(path):
    w = numpy_helper.from_array(np.random.default_rng(0).normal(size=(4, 3, 3, 3)).astype(np.float32), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1] * 4),
             helper.make_node("GlobalAveragePool", ["c"], ["p"], name="pool"),
             helper.make_node("Flatten", ["p"], ["y"], name="flat")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, "H", "W"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])], [w])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)


def test_dynamic_input_picks_the_shape_set(tmp_path, capsys):
    _dynamic_net(tmp_path / "d.onnx")
    sets = [[[1, 3, 16, 16]], [[1, 3, 32, 24]], [[1, 3, 8, 8]]]
    rknn = RKNN()
    assert rknn.config(dynamic_input=sets, float_dtype="float32") == 0
    assert "MaxShape" in capsys.readouterr().out
    assert rknn.load_onnx(model=str(tmp_path / "d.onnx")) == 0
    assert rknn.build(do_quantization=False) == 0
    assert rknn._model.inputs[0].shape == [1, 3, 32, 24]      # MaxShape set
    rknn.export_rknn(str(tmp_path / "d.rknn"))
    again = RKNN()
    again.load_rknn(str(tmp_path / "d.rknn"))
    again.init_runtime()
    for shape in ((16, 16), (32, 24), (8, 8)):
        x = np.random.default_rng(1).normal(size=(1, *shape, 3)).astype(np.float32)
        assert again.inference(inputs=[x])[0].shape == (1, 4)
    assert again.inference(inputs=[np.zeros((1, 20, 20, 3), np.float32)]) is None
    assert "match none of the dynamic_input shape sets" in capsys.readouterr().out


def test_dynamic_input_blocked_by_constant_shape(tmp_path, capsys):
    _net(tmp_path / "m.onnx", out_shape=(1, 256))    # its Reshape to [1, 256] fixes the spatial size
    rknn = RKNN()
    rknn.config(dynamic_input=[[[1, 3, 8, 8]], [[1, 3, 4, 4]]])
    rknn.load_onnx(model=str(tmp_path / "m.onnx"))
    assert rknn.build(do_quantization=False) == -1
    assert "shape set 1" in capsys.readouterr().out


def _rgb_to_yuv(rgb):
    r, g, b = [rgb[..., i].astype(np.float64) for i in range(3)]
    y = 0.299 * r + 0.587 * g + 0.114 * b
    u = -0.168736 * r - 0.331264 * g + 0.5 * b + 128
    v = 0.5 * r - 0.418688 * g - 0.081312 * b + 128
    return y, u, v


def test_inputs_yuv_fmt_nv12_nv21_yuv444_match_rgb(tmp_path):
    from tests.helpers import make_conv_model
    path = make_conv_model(tmp_path / "c.onnx", size=8)
    blocks = np.random.default_rng(5).integers(0, 256, (4, 4, 3))
    rgb = blocks.repeat(2, axis=0).repeat(2, axis=1)           # 2x2 constant blocks: 4:2:0 is exact
    y, u, v = _rgb_to_yuv(rgb)
    uv = np.stack([u[::2, ::2], v[::2, ::2]], axis=-1).reshape(4, 8)
    vu = np.stack([v[::2, ::2], u[::2, ::2]], axis=-1).reshape(4, 8)
    frames = {"nv12": np.concatenate([y, uv])[None], "nv21": np.concatenate([y, vu])[None],
              "yuv444": np.stack([y, u, v], axis=-1)[None]}
    cfg = dict(mean_values=[[120, 110, 100]], std_values=[[60, 60, 60]], float_dtype="float32")
    _, reference = _run_with(path, cfg, rgb[None].astype(np.float32))
    for fmt, frame in frames.items():
        rknn, out = _run_with(path, dict(cfg, inputs_yuv_fmt=[fmt]), frame.astype(np.float32))
        np.testing.assert_allclose(out, reference, rtol=2e-3, atol=1e-4)
    assert rknn._model.inputs[0].shape == [1, 8, 8, 3]


def _run_with(path, cfg, x):
    rknn = RKNN()
    assert rknn.config(**cfg) == 0
    rknn.load_onnx(model=str(path))
    assert rknn.build(do_quantization=False) == 0
    rknn.init_runtime()
    return rknn, rknn.inference(inputs=[x])[0]


def test_compress_weight_shrinks_file_losslessly(tmp_path):
    from tests.helpers import make_conv_model
    path = make_conv_model(tmp_path / "c.onnx", size=8)
    sizes, outputs = {}, {}
    for flag in (False, True):
        rknn = RKNN()
        rknn.config(compress_weight=flag)
        rknn.load_onnx(model=str(path))
        rknn.build(do_quantization=False)
        rknn.export_rknn(str(tmp_path / f"{flag}.rknn"))
        sizes[flag] = (tmp_path / f"{flag}.rknn").stat().st_size
        again = RKNN()
        again.load_rknn(str(tmp_path / f"{flag}.rknn"))
        again.init_runtime()
        outputs[flag] = again.inference(inputs=[np.full((1, 8, 8, 3), 7, np.uint8)])[0]
    assert sizes[True] < sizes[False]
    np.testing.assert_array_equal(outputs[True], outputs[False])


def test_sparse_infer_reports_2_4_layers(tmp_path, capsys):
    rng = np.random.default_rng(0)
    w = rng.normal(size=(8, 8, 1, 1)).astype(np.float32)
    w[:, 0::4] = 0
    w[:, 1::4] = 0          # two zeros in every group of four input channels
    dense = rng.normal(size=(8, 8, 1, 1)).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "ws"], ["a"], name="sparse_conv"),
             helper.make_node("Conv", ["a", "wd"], ["y"], name="dense_conv")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 4, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 4, 4])],
                              [numpy_helper.from_array(w, "ws"), numpy_helper.from_array(dense, "wd")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), tmp_path / "s.onnx")
    rknn = RKNN()
    assert rknn.config(target_platform="rk3576", sparse_infer=True) == 0
    rknn.load_onnx(model=str(tmp_path / "s.onnx"))
    assert rknn.build(do_quantization=False) == 0
    assert rknn._model.metadata["sparse_layers"] == ["sparse_conv"]
    assert "2:4 sparse weights" in capsys.readouterr().out


def test_remove_weight_slave_needs_its_master(tmp_path, capsys):
    from rknnlite.api import RKNNLite
    from tests.helpers import make_conv_model
    path = make_conv_model(tmp_path / "c.onnx", size=8)
    for name, flag in (("master", False), ("slave", True)):
        rknn = RKNN()
        rknn.config(remove_weight=flag)
        rknn.load_onnx(model=str(path))
        rknn.build(do_quantization=False)
        rknn.export_rknn(str(tmp_path / f"{name}.rknn"))
    assert (tmp_path / "slave.rknn").stat().st_size < (tmp_path / "master.rknn").stat().st_size
    lite = RKNNLite()
    assert lite.load_rknn(str(tmp_path / "slave.rknn")) == -1
    assert "master_model" in capsys.readouterr().out
    assert lite.load_rknn(str(tmp_path / "slave.rknn"), master_model=str(tmp_path / "master.rknn")) == 0
    lite.init_runtime()
    master = RKNNLite()
    master.load_rknn(str(tmp_path / "master.rknn"))
    master.init_runtime()
    x = np.full((1, 8, 8, 3), 9, np.uint8)
    np.testing.assert_array_equal(lite.inference(inputs=[x])[0], master.inference(inputs=[x])[0])
    other = make_conv_model(tmp_path / "other.onnx", size=8, seed=3)
    rknn = RKNN()
    rknn.load_onnx(model=str(other))
    rknn.build(do_quantization=False)
    rknn.export_rknn(str(tmp_path / "other.rknn"))
    assert lite.load_rknn(str(tmp_path / "slave.rknn"), master_model=str(tmp_path / "other.rknn")) == -1
    assert "does not match the master model" in capsys.readouterr().out


def test_op_target_runs_layer_in_fp32_and_checks_names(tmp_path, capsys):
    from tests.helpers import make_conv_model
    path = make_conv_model(tmp_path / "c.onnx", size=8)
    rknn = RKNN()
    rknn.config(op_target={"no_such_layer": "cpu"})
    rknn.load_onnx(model=str(path))
    assert rknn.build(do_quantization=False) == -1
    assert "op_target" in capsys.readouterr().out
    rknn = RKNN()
    rknn.config(op_target={"fc": "cpu"})
    rknn.load_onnx(model=str(path))
    assert rknn.build(do_quantization=False) == 0
    assert rknn._model.metadata["op_target"] == {"fc": "cpu"}
