"""Same inputs → same .rknn bytes: no wall-clock time or duration is recorded in the file."""
from __future__ import annotations

import numpy as np

from tests.helpers import make_conv_model, quantized_build


def _export(tmp_path, name: str) -> bytes:
    folder = tmp_path / name
    folder.mkdir()
    model = make_conv_model(folder / "conv.onnx")
    rng = np.random.default_rng(0)
    rknn = quantized_build(model, [rng.normal(0, 1, (1, 3, 16, 16)).astype(np.float32) for _ in range(3)])
    assert rknn.export_rknn(str(folder / "conv.rknn")) == 0
    return (folder / "conv.rknn").read_bytes()


def test_two_quantized_builds_give_identical_bytes(tmp_path, monkeypatch):
    monkeypatch.delenv("SOURCE_DATE_EPOCH", raising=False)
    first = _export(tmp_path, "a")
    import time
    time.sleep(1.1)   # a recorded wall-clock second would now differ
    assert _export(tmp_path, "b") == first


def test_build_date_comes_from_source_date_epoch(tmp_path, monkeypatch):
    from openrknn.model_file import load_model
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    _export(tmp_path, "a")
    model = load_model(str(tmp_path / "a" / "conv.rknn"))
    assert model.metadata["created"] == "2023-11-14T22:13:20+00:00"
