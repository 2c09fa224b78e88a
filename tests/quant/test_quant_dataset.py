"""dataset.txt parsing: layouts, resizing, channel order and every documented error."""
from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from openrknn.errors import QuantizationError
from openrknn.graph.rknn_model import TensorSpec
from openrknn.quant.dataset import load_dataset
from rknn.api import RKNN

IMAGE = TensorSpec("x", [1, 3, 8, 8], "float32", "NCHW")


def _png(path, size=(8, 8), color=(10, 20, 30)):
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", size, color).save(path)
    return path


def test_images_relative_to_dataset_folder(tmp_path):
    _png(tmp_path / "data" / "a.png")
    (tmp_path / "data" / "ds.txt").write_text("a.png\n\n# comment\na.png\n")
    samples = load_dataset(str(tmp_path / "data" / "ds.txt"), [IMAGE])
    assert len(samples) == 2 and samples[0][0].shape == (1, 3, 8, 8)
    assert samples[0][0].dtype == np.float32
    assert samples[0][0][0, :, 0, 0].tolist() == [10, 20, 30]   # raw pixels: the graph applies mean/std


def test_rgb2bgr_and_nhwc(tmp_path):
    _png(tmp_path / "a.png")
    (tmp_path / "ds.txt").write_text("a.png\n")
    nhwc = TensorSpec("x", [1, 8, 8, 3], "float32", "NHWC")
    sample = load_dataset(str(tmp_path / "ds.txt"), [nhwc], rgb2bgr=True)[0][0]
    assert sample.shape == (1, 8, 8, 3) and sample[0, 0, 0].tolist() == [30, 20, 10]


def test_resize_warns_naming_file(tmp_path, capsys):
    _png(tmp_path / "big.png", size=(20, 12))
    (tmp_path / "ds.txt").write_text("big.png\n")
    sample = load_dataset(str(tmp_path / "ds.txt"), [IMAGE])[0][0]
    assert sample.shape == (1, 3, 8, 8)
    out = capsys.readouterr().out
    assert "big.png" in out and "resized" in out


def test_npy_layouts_and_multi_input(tmp_path):
    np.save(tmp_path / "nchw.npy", np.ones((1, 3, 8, 8), np.float32))
    np.save(tmp_path / "nhwc.npy", np.arange(8 * 8 * 3, dtype=np.float32).reshape(8, 8, 3))
    np.save(tmp_path / "vec.npy", np.zeros((1, 5), np.float32))
    vec = TensorSpec("v", [1, 5], "float32", "UNDEFINED")
    (tmp_path / "ds.txt").write_text("nchw.npy vec.npy\nnhwc.npy vec.npy\n")
    samples = load_dataset(str(tmp_path / "ds.txt"), [IMAGE, vec])
    assert [a.shape for a in samples[1]] == [(1, 3, 8, 8), (1, 5)]
    assert samples[1][0][0, :, 0, 1].tolist() == [3, 4, 5]   # NHWC transposed to the model's NCHW


@pytest.mark.parametrize("content,files,match", [
    ("", {}, "is empty"),
    ("missing.png\n", {}, "line 1: file .*missing.png' does not exist"),
    ("a.png a.png\n", {"a.png": "png"}, "line 1: 2 file\\(s\\) for a model with 1 input"),
    ("bad.png\n", {"bad.png": "text"}, "line 1: image .*bad.png' cannot be read"),
    ("a.txt\n", {"a.txt": "text"}, "unsupported type '.txt'"),
    ("nan.npy\n", {"nan.npy": "nan"}, "nan.npy' contains NaN or inf"),
    ("shape.npy\n", {"shape.npy": "shape"}, r"shape.npy' has shape \(1, 3, 4, 4\) but input 'x' expects \(1, 3, 8, 8\)"),
])
def test_bad_dataset(tmp_path, content, files, match):
    for name, kind in files.items():
        if kind == "png":
            _png(tmp_path / name)
        elif kind == "text":
            (tmp_path / name).write_text("not an image")
        elif kind == "nan":
            np.save(tmp_path / name, np.full((1, 3, 8, 8), np.nan, np.float32))
        elif kind == "shape":
            np.save(tmp_path / name, np.zeros((1, 3, 4, 4), np.float32))
    (tmp_path / "ds.txt").write_text(content)
    with pytest.raises(QuantizationError, match=match):
        load_dataset(str(tmp_path / "ds.txt"), [IMAGE])


def test_missing_dataset_file(tmp_path):
    with pytest.raises(QuantizationError, match="does not exist"):
        load_dataset(str(tmp_path / "nope.txt"), [IMAGE])


def test_facade_bad_dataset_returns_minus_one(quant_setup, tmp_path, capsys):
    (tmp_path / "empty.txt").write_text("\n")
    rknn = RKNN()
    assert rknn.config(target_platform="rk3588") == 0
    assert rknn.load_onnx(model=str(quant_setup["model"])) == 0
    assert rknn.build(do_quantization=True, dataset=str(tmp_path / "empty.txt")) == -1
    assert "E build:" in capsys.readouterr().out and "empty.txt" in capsys.readouterr().out + "empty.txt"
    assert rknn.export_rknn(str(tmp_path / "out.rknn")) == -1
    assert not (tmp_path / "out.rknn").exists()


def test_resized_images_give_one_summary_line(tmp_path, capsys):
    for i in range(5):
        _png(tmp_path / f"big{i}.png", size=(20, 12))
    (tmp_path / "ds.txt").write_text("".join(f"big{i}.png\n" for i in range(5)))
    assert len(load_dataset(str(tmp_path / "ds.txt"), [IMAGE])) == 5
    warnings = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("W ")]
    assert len(warnings) == 1
    assert "5 of 5 image(s) resized" in warnings[0] and "big0.png" in warnings[0] and "20x12 to 8x8" in warnings[0]
