"""The command-line tools: rknn_convert yml, openrknn convert/info/run/demo."""
from __future__ import annotations

import numpy as np
from PIL import Image

from openrknn.cli.main import main as openrknn_main
from openrknn.cli.rknn_convert import main as rknn_convert_main


def test_rknn_convert_yml(conv_model, tmp_path, capsys):
    (tmp_path / "model_config.yml").write_text(f"""
models:
    name: conv_test.rknn
    platform: onnx
    model_file_path: ./{conv_model.name}
    subgraphs:
      input_size_list:
        - 3,16,16
      inputs:
        - x
      outputs:
        - prob
    quantize: false
    configs:
      mean_values: [127.5,127.5,127.5]
      std_values: [128.0,128.0,128.0]
      quant_img_RGB2BGR: 'false'
""")
    out_dir = tmp_path / "out"
    assert rknn_convert_main(["-t", "rk3588", "-i", str(tmp_path / "model_config.yml"), "-o", str(out_dir)]) == 0
    text = capsys.readouterr().out
    assert f"output rknn path: {out_dir / 'conv_test.rknn'}" in text
    assert "mean_values: [[127.5, 127.5, 127.5]]" in text
    assert (out_dir / "conv_test.rknn").exists()


def test_rknn_convert_bad_yml(tmp_path, capsys):
    (tmp_path / "bad.yml").write_text("something: else\n")
    assert rknn_convert_main(["-t", "rk3588", "-i", str(tmp_path / "bad.yml"), "-o", str(tmp_path / "o")]) == 1
    assert "E rknn_convert:" in capsys.readouterr().out


def test_convert_info_run(conv_model, tmp_path, capsys):
    rknn_path = tmp_path / "conv.rknn"
    assert openrknn_main(["convert", str(conv_model), "-t", "rk3566", "--mean", "127.5 127.5 127.5",
                          "--std", "127.5", "-o", str(rknn_path)]) == 0
    assert openrknn_main(["info", str(rknn_path)]) == 0
    info = capsys.readouterr().out
    for expected in ("target platforms: ['rk3566']", "x: float32 [1, 3, 16, 16] NCHW", "prob: float32 [1, 5]", "Conv"):
        assert expected in info
    img = tmp_path / "img.png"
    Image.fromarray(np.random.default_rng(1).integers(0, 256, (20, 24, 3), dtype=np.uint8)).save(img)
    assert openrknn_main(["run", str(rknn_path), "--input", str(img), "--resize"]) == 0
    out = capsys.readouterr().out
    assert "-----TOP 5-----" in out and "W run: image 'img.png' resized from 24×20" in out
    assert openrknn_main(["info", str(img)]) == 1


def test_demo(tmp_path, capsys):
    assert openrknn_main(["demo", "-o", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "-----TOP 5-----" in out and "top-1 agrees" in out
