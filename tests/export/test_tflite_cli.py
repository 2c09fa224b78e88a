"""`openrknn convert --format tflite`: per-tensor weights by default (Teflon), --quantized-method,
the report's summary line, and a yml config honouring the format."""
from __future__ import annotations

import re

import numpy as np
import pytest

from openrknn.cli.main import main as openrknn_main

pytest.importorskip("tflite", reason="the export writes with the 'tflite' schema package")


def _dataset(folder, shape=(1, 3, 16, 16)):
    rng = np.random.default_rng(0)
    for i in range(2):
        np.save(folder / f"s{i}.npy", rng.uniform(0, 255, shape).astype(np.float32))
    (folder / "ds.txt").write_text("s0.npy\ns1.npy\n")
    return folder / "ds.txt"


def _npu_layers(printed: str) -> tuple[int, int]:
    found = re.search(r"(\d+) of (\d+) layers on the NPU", printed)
    assert found, printed
    return int(found.group(1)), int(found.group(2))


@pytest.mark.parametrize("method, on_npu", [(None, True), ("layer", True), ("channel", False)])
def test_convert_tflite_quantized_method(conv_model, tmp_path, capsys, method, on_npu):
    out = tmp_path / "m.tflite"
    argv = ["convert", str(conv_model), "--dataset", str(_dataset(tmp_path)), "--format", "tflite", "-o", str(out)]
    assert openrknn_main(argv + (["--quantized-method", method] if method else [])) == 0
    assert out.read_bytes()[4:8] == b"TFL3"
    npu, total = _npu_layers(capsys.readouterr().out)
    assert total >= 1 and (npu >= 1) == on_npu


def test_convert_yml_honours_format_tflite(conv_model, tmp_path, capsys):
    _dataset(tmp_path)
    (tmp_path / "model_config.yml").write_text(f"""
models:
    name: conv_test
    platform: onnx
    model_file_path: ./{conv_model.name}
    quantize: true
    dataset: ./ds.txt
    configs:
      mean_values: [127.5,127.5,127.5]
      std_values: [128.0,128.0,128.0]
""")
    out_dir = tmp_path / "out"
    assert openrknn_main(["convert", str(tmp_path / "model_config.yml"), "--format", "tflite", "-o", str(out_dir)]) == 0
    printed = capsys.readouterr().out
    assert (out_dir / "conv_test_int8.tflite").exists() and not (out_dir / "conv_test.rknn").exists()
    assert "quantized_method: layer" in printed and _npu_layers(printed)[0] >= 1
