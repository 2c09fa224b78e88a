"""The command line a new user meets: dynamic-shape ONNX models, image sizes, info, eval."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from PIL import Image

from openrknn.cli.common import parse_input_size_list
from openrknn.cli.main import main
from openrknn.errors import ConfigError


def make_dynamic_model(path: Path) -> Path:
    """Conv + Relu whose input is [N, 3, H, W] (batch, height and width dynamic); the output says -1 for them."""
    weight = numpy_helper.from_array(np.random.default_rng(0).normal(0, 0.3, (4, 3, 3, 3)).astype(np.float32), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["y"])]
    graph = helper.make_graph(nodes, "dynamic", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, "H", "W"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [-1, 4, -1, -1])],   # as Paddle2ONNX
                              [weight])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)
    return path


def _image(path: Path, width: int, height: int) -> Path:
    Image.fromarray(np.random.default_rng(width).integers(0, 256, (height, width, 3), dtype=np.uint8)).save(path)
    return path


def _lines(capsys, prefix: str) -> str:
    return "\n".join(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith(prefix))


@pytest.mark.parametrize("text, shapes", [("1,3,640,640", [[1, 3, 640, 640]]), ("1 3 48 320", [[1, 3, 48, 320]]),
                                          ("1,3,224,224#1,10", [[1, 3, 224, 224], [1, 10]]), ("", None), (None, None)])
def test_parse_input_size_list(text, shapes):
    assert parse_input_size_list(text) == shapes


@pytest.mark.parametrize("text", ["1,3,a,4", "1,3,0,4", "#"])
def test_parse_input_size_list_refuses(text):
    with pytest.raises(ConfigError, match="--input-size-list"):
        parse_input_size_list(text)


def test_convert_dynamic_onnx_needs_and_takes_input_size_list(tmp_path, capsys):
    model = make_dynamic_model(tmp_path / "dyn.onnx")
    assert main(["convert", str(model), "-o", str(tmp_path / "no.rknn")]) == 1
    assert "--input-size-list 1,3,?,? with each ? replaced" in _lines(capsys, "E ")   # how to do it here
    out = tmp_path / "dyn.rknn"
    assert main(["convert", str(model), "--input-size-list", "1,3,48,320", "-o", str(out)]) == 0
    assert main(["info", str(out)]) == 0
    info = capsys.readouterr().out
    assert "x: float32 [1, 3, 48, 320] NCHW" in info
    assert "y: float32 [1, 4, 48, 320]" in info            # the output's named dims are resolved too
    image = _image(tmp_path / "ok.png", 320, 48)
    assert main(["run", str(out), "--input", str(image), "--input-size-list", "1,3,48,320"]) == 0
    assert main(["run", str(out), "--input", str(image), "--input-size-list", "1,3,64,64"]) == 1
    assert "1, 3, 64, 64" in _lines(capsys, "E ")


def test_convert_bad_input_size_list_is_an_e_line(tmp_path, capsys):
    model = make_dynamic_model(tmp_path / "dyn.onnx")
    assert main(["convert", str(model), "--input-size-list", "1,3,4x", "-o", str(tmp_path / "d.rknn")]) == 1
    assert "E convert: --input-size-list" in _lines(capsys, "E ")
    assert not (tmp_path / "d.rknn").exists()


def test_eval_dynamic_onnx_with_input_size_list(tmp_path, capsys):
    model = make_dynamic_model(tmp_path / "dyn.onnx")
    images = tmp_path / "images"
    images.mkdir()
    for i in range(2):
        _image(images / f"{i}.png", 40 + i, 30)
    assert main(["eval", str(model), "--dataset", str(images), "--input-size-list", "1,3,32,32", "--no-cache",
                 "--workers", "1"]) == 0
    assert "fp16   2" in capsys.readouterr().out


def test_run_refuses_another_image_size_unless_resize(tmp_path, capsys):
    """One rule with the API: an input has the model's size; resizing is asked for and reported."""
    model = make_dynamic_model(tmp_path / "dyn.onnx")
    out = tmp_path / "dyn.rknn"
    assert main(["convert", str(model), "--input-size-list", "1,3,48,320", "-o", str(out)]) == 0
    big = _image(tmp_path / "big.png", 480, 480)
    capsys.readouterr()
    assert main(["run", str(out), "--input", str(big)]) == 1
    error = _lines(capsys, "E ")
    assert "480×480" in error and "320×48" in error and "--resize" in error
    assert main(["run", str(out), "--input", str(big), "--resize"]) == 0
    assert "resized from 480×480 to the input's 320×48" in _lines(capsys, "W ")
    from rknn.api import RKNN   # the API refuses the same picture as an array
    rknn = RKNN()
    assert rknn.load_rknn(str(out)) == 0 and rknn.init_runtime() == 0
    assert rknn.inference(inputs=[np.asarray(Image.open(big))[None]]) is None


def test_info_summarises_quantization_unless_params(conv_model, tmp_path, capsys):
    images = tmp_path / "calib"
    images.mkdir()
    lines = [str(_image(images / f"{i}.png", 16, 16)) for i in range(3)]
    (tmp_path / "dataset.txt").write_text("\n".join(lines) + "\n")
    out = tmp_path / "q.rknn"
    assert main(["convert", str(conv_model), "--dataset", str(tmp_path / "dataset.txt"), "-o", str(out)]) == 0
    build_line = next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("I build: done"))
    assert main(["info", str(out)]) == 0
    summary = capsys.readouterr().out
    assert main(["info", str(out), "--params"]) == 0
    full = capsys.readouterr().out
    assert "quantization parameters:" in summary and "--params lists them all" in summary
    assert "zero_point=" not in summary and "zero_point=" in full
    assert len(full.splitlines()) > len(summary.splitlines()) + 5
    layers = int(summary.split("layers: ")[1].split()[0])
    assert f"({layers} layers," in build_line      # build and info count the same layers


def test_run_warns_when_outputs_overflow(tmp_path, capsys):
    """A model fed raw pixels where it expects normalised ones overflows float16: say so, not just 'nan'."""
    weight = numpy_helper.from_array(np.full((1, 3, 1, 1), 3000.0, np.float32), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"]), helper.make_node("Mul", ["c", "c"], ["y"])]
    graph = helper.make_graph(nodes, "big", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1, 4, 4])], [weight])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), tmp_path / "big.onnx")
    assert main(["convert", str(tmp_path / "big.onnx"), "-o", str(tmp_path / "big.rknn")]) == 0
    assert main(["run", str(tmp_path / "big.rknn"), "--input", str(_image(tmp_path / "x.png", 4, 4))]) == 0
    assert "float16 overflowed" in _lines(capsys, "W ")


def test_run_picks_a_dynamic_input_size(tmp_path, capsys):
    from rknn.api import RKNN
    rknn = RKNN()
    assert rknn.config(target_platform="rk3588", dynamic_input=[[[1, 3, 16, 16]], [[1, 3, 32, 48]]]) == 0
    assert rknn.load_onnx(model=str(make_dynamic_model(tmp_path / "dyn.onnx"))) == 0
    assert rknn.build(do_quantization=False) == 0 and rknn.export_rknn(str(tmp_path / "d.rknn")) == 0
    image = _image(tmp_path / "wide.png", 48, 32)
    assert main(["run", str(tmp_path / "d.rknn"), "--input", str(image), "--input-size-list", "1,3,32,48"]) == 0
    assert "y: shape [1, 4, 32, 48]" in capsys.readouterr().out
    assert main(["run", str(tmp_path / "d.rknn"), "--input", str(image), "--input-size-list", "1,3,20,20"]) == 1
    assert "dynamic_input sets" in _lines(capsys, "E ")
