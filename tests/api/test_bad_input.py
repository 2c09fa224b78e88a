"""Every documented bad input gives a clear E line naming the problem and returns -1 (or None)."""
from __future__ import annotations

import os

import numpy as np
import pytest

from rknn.api import RKNN
from rknnlite.api import RKNNLite


def _err(capsys) -> str:
    lines = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("E ")]
    assert lines, "expected an E log line"
    return "\n".join(lines)


@pytest.mark.parametrize("kwargs, words", [
    ({"target_platform": "rk9999"}, ["rk9999", "not supported"]),
    ({"target_platform": ["rk1808", "rk3588"]}, ["mixes Toolkit 1 and Toolkit 2"]),
    ({"target_platform": ["rk1808", "rv1109"]}, ["incompatible"]),
    ({"mean_values": [[1, 2, 3]], "std_values": [[1, 2]]}, ["mean_values has 3", "std_values has 2"]),
    ({"mean_values": [[1, 2, 3]], "std_values": [[1, 2, 3], [4, 5, 6]]}, ["std_values has 2"]),
    ({"reorder_channel": "0 0 2"}, ["reorder_channel", "repeats"]),
    ({"quantized_algorithm": "best"}, ["quantized_algorithm", "normal"]),
    ({"optimization_level": 7}, ["optimization_level"]),
    ({"quantized_dtype": "w4a16", "target_platform": "rk3588"}, ["w4a16", "rk3588"]),
    ({"std_values": [[0, 1, 1]]}, ["division by zero"]),
    ({"sparse_infer": True, "target_platform": "rk3588"}, ["sparse_infer", "rk3576"]),
    ({"no_such_option": 1}, ["unknown option", "no_such_option"]),
])
def test_config_rejects(kwargs, words, capsys):
    assert RKNN().config(**kwargs) == -1
    message = _err(capsys)
    for word in words:
        assert word in message


def test_missing_and_malformed_onnx(tmp_path, capsys):
    rknn = RKNN()
    assert rknn.load_onnx(model=str(tmp_path / "nope.onnx")) == -1
    assert "does not exist" in _err(capsys)
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x00garbage" * 10)
    assert rknn.load_onnx(model=str(bad)) == -1
    assert "not a valid ONNX model" in _err(capsys)


def test_bad_cut_names(conv_model, capsys):
    assert RKNN().load_onnx(model=str(conv_model), outputs=["378"]) == -1
    assert "'378' in outputs=['378'] is invalid" in _err(capsys)


def test_call_order(conv_model, capsys):
    rknn = RKNN()
    assert rknn.build(do_quantization=False) == -1
    assert "load" in _err(capsys)
    assert rknn.inference(inputs=[np.zeros((1, 16, 16, 3))]) is None
    assert "init_runtime" in _err(capsys)
    rknn.load_onnx(model=str(conv_model))
    assert rknn.build(do_quantization=True) == -1
    assert "dataset" in _err(capsys)


@pytest.fixture
def runtime(conv_model):
    rknn = RKNN()
    rknn.config(mean_values=[[0, 0, 0]], std_values=[[1, 1, 1]])
    rknn.load_onnx(model=str(conv_model))
    rknn.build(do_quantization=False)
    rknn.init_runtime()
    return rknn


def test_wrong_input_count_shape_dtype(runtime, capsys):
    good = np.zeros((1, 16, 16, 3), np.uint8)
    assert runtime.inference(inputs=[good, good]) is None
    assert "1 input(s)" in _err(capsys)
    assert runtime.inference(inputs=[np.zeros((1, 15, 16, 3), np.uint8)]) is None
    assert "(1, 16, 16, 3)" in _err(capsys)
    assert runtime.inference(inputs=[np.array([["a"]])]) is None
    assert "dtype" in _err(capsys)
    assert runtime.inference(inputs=[good], data_format=["nhwc", "nchw"]) is None
    assert "data_format" in _err(capsys)


def test_export_to_missing_folder_writes_nothing(runtime, tmp_path, capsys):
    target = tmp_path / "missing" / "m.rknn"
    assert runtime.export_rknn(str(target)) == -1
    assert "does not exist" in _err(capsys)
    assert not target.parent.exists()
    assert runtime.export_rknn(str(tmp_path / "ok.rknn")) == 0
    assert sorted(os.listdir(tmp_path)) == ["conv.onnx", "ok.rknn"]   # no temporary left behind


def test_corrupt_and_foreign_rknn(runtime, tmp_path, capsys):
    path = tmp_path / "m.rknn"
    runtime.export_rknn(str(path))
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    corrupt = tmp_path / "corrupt.rknn"
    corrupt.write_bytes(bytes(data))
    assert RKNN().load_rknn(str(corrupt)) == -1
    assert "checksum" in _err(capsys)
    truncated = tmp_path / "truncated.rknn"
    truncated.write_bytes(bytes(data[:100]))
    assert RKNNLite().load_rknn(str(truncated)) == -1
    assert "corrupt" in _err(capsys)
    rockchip = tmp_path / "rockchip.rknn"
    rockchip.write_bytes(b"RKNN\x00\x00\x00\x00" + b"\x01" * 200)
    assert RKNN().load_rknn(str(rockchip)) == -1
    assert "Rockchip RKNN-Toolkit model" in _err(capsys)
    assert RKNN().load_rknn(str(tmp_path / "none.rknn")) == -1
    assert "does not exist" in _err(capsys)


def test_dynamic_input_needs_size(tmp_path, capsys):
    import onnx
    from onnx import TensorProto, helper
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, "H", "W"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3, "H", "W"])])
    path = tmp_path / "dyn.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)
    rknn = RKNN()
    assert rknn.load_onnx(model=str(path)) == -1
    assert "input_size_list" in _err(capsys)
    assert rknn.load_onnx(model=str(path), inputs=["x"], input_size_list=[[1, 3, 8, 8]]) == 0
    rknn.build(do_quantization=False)
    rknn.init_runtime()
    out = rknn.inference(inputs=[np.full((1, 8, 8, 3), -1.0, np.float32)])[0]
    assert out.shape == (1, 3, 8, 8) and out.max() == 0


def test_unsupported_op_and_io_type_refused_at_load(tmp_path, capsys):
    import onnx
    from onnx import TensorProto, helper
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("Hardmax", ["r"], ["y"], name="the_hardmax")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), tmp_path / "hardmax.onnx")
    assert RKNN().load_onnx(str(tmp_path / "hardmax.onnx")) == -1
    message = _err(capsys)
    assert "Hardmax" in message and "the_hardmax" in message and "not supported" in message

    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.BFLOAT16, [1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.BFLOAT16, [1, 4])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), tmp_path / "bf16.onnx")
    assert RKNN().load_onnx(str(tmp_path / "bf16.onnx")) == -1
    assert "BFLOAT16" in _err(capsys)


def test_misspelt_vendor_option_names_the_closest(capsys):
    assert RKNN().config(dissable_rules=["fuse_x"]) == -1
    message = _err(capsys)
    assert "'dissable_rules'" in message and "did you mean 'disable_rules'" in message
