"""`openrknn check`, RKNN.check_limits() and build's W lines on a model with the three classic board
surprises: an NCHW→NHWC Transpose, a 1×40 convolution and a Resize by 2.5 (issue 32)."""
from __future__ import annotations

import json

import onnx
import pytest
from onnx import TensorProto, helper

from openrknn import chips, profile
from openrknn.api.rknn import RKNN
from openrknn.cli.common import parse_input_size_list
from openrknn.errors import ConfigError
from openrknn.cli.main import main as openrknn_main
from tests.helpers import three_limit_surprises


@pytest.fixture
def surprises(tmp_path):
    return three_limit_surprises(tmp_path / "surprises.onnx")


def _report_lines(text):
    return [line for line in text.splitlines() if line.startswith(("W ", "E "))]


def test_check_rk3566_reports_all_three(surprises, capsys):
    assert openrknn_main(["check", str(surprises), "-t", "rk3566"]) == 0   # nothing that cannot run
    lines = _report_lines(capsys.readouterr().out)
    assert len(lines) == 3, lines
    conv, resize, transpose = lines
    assert conv.startswith("W long_conv (Conv [Convolution]): kernel w 40 outside 1-31 (§3.1.5)")
    assert "rewritten: rknn-toolkit2 2.5.0 splits the kernel into convolutions of at most 16 taps" in conv
    assert resize.startswith("W resize_by_2_5 (Resize): scale (H × W) 2.5 × 2.5") and "(§3.1.53)" in resize
    assert "runs on the CPU (§4.50 Resize, est." in resize
    assert transpose.startswith("W to_nhwc (Transpose): perm [0, 2, 3, 1]") and "(§3.1.58)" in transpose


def test_check_rk3588_reports_the_convolution_and_the_resize_only(surprises, capsys):
    assert openrknn_main(["check", str(surprises), "-t", "rk3588"]) == 0
    text = capsys.readouterr().out
    lines = _report_lines(text)
    assert [line.split(" ")[1] for line in lines] == ["long_conv", "resize_by_2_5"]
    assert "(§3.2.5)" in lines[0] and "(§3.2.54)" in lines[1]
    assert "to_nhwc" not in text
    assert "advice: split the 1×40 kernel into 2 convolutions of 1×20 + 1×20" in text
    assert "×5 on the NPU then a stride-2 1×1 pooling" in text


def test_build_log_carries_the_same_lines(surprises, capsys, tmp_path):
    assert openrknn_main(["check", str(surprises), "-t", "rk3566", "--json", str(tmp_path / "f.json")]) == 0
    report = [line.split(" ", 1)[1] for line in _report_lines(capsys.readouterr().out)]
    rknn = RKNN()
    rknn.config(target_platform="rk3566")
    assert rknn.load_onnx(str(surprises)) == 0
    assert rknn.build(do_quantization=False) == 0
    log_lines = [line.split("NPU limit: ", 1)[1] for line in capsys.readouterr().out.splitlines()
                 if line.startswith("W build: NPU limit: ")]
    assert log_lines == report
    saved = json.loads((tmp_path / "f.json").read_text())
    assert [f["node"] for f in saved] == ["long_conv", "resize_by_2_5", "to_nhwc"]
    assert saved[2]["consequence"] == "cpu" and saved[0]["consequence"] == "rewrite" and saved[0]["severity"] == "W"


def test_check_limits_api_and_eval_perf_placement(surprises, capsys):
    rknn = RKNN()
    assert rknn.check_limits() == -1   # nothing built yet: an E line, -1
    assert "E check_limits: no RKNN model" in capsys.readouterr().out
    rknn.config(target_platform="rk3566")
    rknn.load_onnx(str(surprises))
    rknn.build(do_quantization=False)
    assert rknn.check_limits(is_print=False) == 0
    assert {f.node for f in rknn.limit_findings} == {"long_conv", "resize_by_2_5", "to_nhwc"}
    assert rknn.check_limits(target_platform="rk3588", is_print=False) == 0
    assert {f.node for f in rknn.limit_findings} == {"long_conv", "resize_by_2_5"}
    assert rknn.check_limits(data_type="int4", is_print=False) == -1
    assert "E check_limits: data type 'int4' is not one the NPU runs" in capsys.readouterr().out
    targets = {layer.name: layer.target for layer in profile.estimate_perf(rknn._model, chips.get_chip("rk3566")).layers}
    assert targets["to_nhwc"] == "CPU" and targets["resize_by_2_5"] == "CPU" and targets["long_conv"] == "NPU"
    rknn.config(target_platform="rk3588")
    rknn.load_onnx(str(surprises))
    rknn.build(do_quantization=False)
    targets = {layer.name: layer.target for layer in profile.estimate_perf(rknn._model, chips.get_chip("rk3588")).layers}
    assert targets["to_nhwc"] == "NPU" and targets["resize_by_2_5"] == "CPU"


def test_rk2118_reports_an_unsupported_op_as_an_error(tmp_path, capsys):
    model = tmp_path / "argmax.onnx"
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 4, 4])
    y = helper.make_tensor_value_info("y", TensorProto.INT64, [1, 1, 4, 4])
    graph = helper.make_graph([helper.make_node("ArgMax", ["x"], ["y"], name="pick", axis=1)], "g", [x], [y])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(model))
    assert openrknn_main(["check", str(model), "-t", "rk2118"]) == 1
    lines = _report_lines(capsys.readouterr().out)
    assert len(lines) == 1 and lines[0].startswith("E pick (ArgMax)") and "unsupported on RK2118" in lines[0]
    assert openrknn_main(["check", str(model), "-t", "rk3588"]) == 0    # a CPU fallback there: a warning
    lines = _report_lines(capsys.readouterr().out)
    assert lines[0].startswith("W pick (ArgMax)") and "runs on the CPU (§4.5 ArgMax" in lines[0]


def test_check_with_input_size_list(tmp_path, capsys):
    model = three_limit_surprises(tmp_path / "dynamic.onnx", dynamic=True)
    assert openrknn_main(["check", str(model), "-t", "rk3588", "--input-size-list", "1,8,16,64"]) == 0
    assert "(16×25 -> 40×62)" in capsys.readouterr().out   # 64 - 40 + 1 = 25 columns after the conv
    assert openrknn_main(["check", str(model), "-t", "rk3588", "--input-size-list", "1,8,x"]) == 1
    assert "E check: --input-size-list: '1,8,x' is not a list of integers" in capsys.readouterr().out


def test_parse_input_size_list():
    assert parse_input_size_list("1,3,224,224#1 10") == [[1, 3, 224, 224], [1, 10]]
    assert parse_input_size_list("  ") is None
    with pytest.raises(ConfigError):
        parse_input_size_list("1,3#")


def test_toolkit1_chip_is_not_covered(surprises, capsys):
    assert openrknn_main(["check", str(surprises), "-t", "rk1808"]) == 0
    assert "not covered by Rockchip's operator list" in capsys.readouterr().out


def test_check_an_exported_rknn_file(surprises, tmp_path, capsys):
    rknn = RKNN()
    rknn.config(target_platform="rk3588")
    rknn.load_onnx(str(surprises))
    rknn.build(do_quantization=False)
    assert rknn.export_rknn(str(tmp_path / "s.rknn")) == 0
    capsys.readouterr()
    assert openrknn_main(["check", str(tmp_path / "s.rknn"), "-t", "rk3566"]) == 0
    nodes = [line.split(" ")[1] for line in _report_lines(capsys.readouterr().out) if not line.startswith("W load")]
    assert nodes == ["long_conv", "resize_by_2_5", "to_nhwc"]
