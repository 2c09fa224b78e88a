"""export_encrypted_rknn_model / export_rknn_sync_model / codegen through the RKNN facade."""
from __future__ import annotations

import numpy as np
import pytest

from rknn.api import RKNN
from rknnlite.api import RKNNLite
from tests.helpers import make_conv_model

pytest.importorskip("cryptography")


def test_encrypted_model_runs_in_rknnlite_and_needs_the_key(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("OPENRKNN_MODEL_KEY", "a long enough test key 123")
    rknn = RKNN()
    rknn.config(target_platform="rk3588")
    assert rknn.load_onnx(str(make_conv_model(tmp_path / "m.onnx"))) == 0
    assert rknn.build(do_quantization=False) == 0
    assert rknn.export_rknn(str(tmp_path / "m.rknn")) == 0
    assert rknn.export_encrypted_rknn_model(str(tmp_path / "m.rknn"), str(tmp_path / "m.crypt.rknn"), 2) == 0
    image = np.random.default_rng(0).integers(0, 255, (16, 16, 3), dtype=np.uint8)
    outputs = []
    for path in ("m.rknn", "m.crypt.rknn"):
        lite = RKNNLite()
        assert lite.load_rknn(str(tmp_path / path)) == 0
        assert lite.init_runtime() == 0
        outputs.append(lite.inference(inputs=[image])[0])
    np.testing.assert_array_equal(outputs[0], outputs[1])
    monkeypatch.setenv("OPENRKNN_MODEL_KEY", "the wrong key, also long enough")
    assert RKNNLite().load_rknn(str(tmp_path / "m.crypt.rknn")) == -1
    assert "key" in capsys.readouterr().out


def test_codegen_needs_an_exported_model(tmp_path, capsys):
    rknn = RKNN()
    rknn.config(target_platform="rk3588")
    assert rknn.load_onnx(str(make_conv_model(tmp_path / "m.onnx"))) == 0
    assert rknn.build(do_quantization=False) == 0
    assert rknn.codegen(str(tmp_path / "demo")) == -1
    assert "export_rknn" in capsys.readouterr().out
    assert rknn.export_rknn(str(tmp_path / "m.rknn")) == 0
    assert rknn.codegen(str(tmp_path / "demo")) == 0
    assert (tmp_path / "demo" / "CMakeLists.txt").is_file()


def test_sync_model_records_segments(tmp_path):
    rknn = RKNN()
    rknn.config(target_platform="rk1808")
    assert rknn.load_onnx(str(make_conv_model(tmp_path / "m.onnx"))) == 0
    assert rknn.build(do_quantization=False) == 0
    assert rknn.export_rknn(str(tmp_path / "m.rknn")) == 0
    assert rknn.export_rknn_sync_model(str(tmp_path / "m.rknn"), [1], str(tmp_path / "sync.rknn")) == 0
    from openrknn.model_file import load_model
    assert load_model(str(tmp_path / "sync.rknn")).metadata["sync_model"]["uids"] == [1]
