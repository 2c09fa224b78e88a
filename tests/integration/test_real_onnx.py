"""Real models from the shared folder: fp32 path equals onnxruntime, fp16 path cosine >= 0.9999."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from rknn.api import RKNN
from tests.helpers import cosine, reference_session

OCR_MEAN, OCR_STD = [127.5] * 3, [127.5] * 3


def _ocr_image(images: Path, height: int, width: int) -> np.ndarray:
    with Image.open(images / "text.png") as img:
        return np.asarray(img.convert("RGB").resize((width, height)), dtype=np.uint8)[None]


def _vad_inputs():
    rng = np.random.default_rng(0)
    t = np.arange(512) / 16000.0
    audio = (0.3 * np.sin(2 * np.pi * 220 * t) + 0.05 * rng.normal(size=512)).astype(np.float32)[None]
    state = rng.normal(0, 0.1, (2, 1, 128)).astype(np.float32)
    return [audio, state, np.array(16000, dtype=np.int64)]


CASES = {
    "ch_ppocr_mobile_v2.0_cls_infer": dict(size=(48, 192)),
    "ch_PP-OCRv4_rec_infer": dict(size=(48, 320)),
    "silero_vad_16k_op15": dict(size=None),
}


def _build(path: Path, case: dict, float_dtype: str) -> RKNN:
    rknn = RKNN()
    if case["size"]:
        h, w = case["size"]
        assert rknn.config(mean_values=[OCR_MEAN], std_values=[OCR_STD], target_platform="rk3588",
                           float_dtype=float_dtype) == 0
        assert rknn.load_onnx(model=str(path), inputs=["x"], input_size_list=[[1, 3, h, w]]) == 0
    else:
        assert rknn.config(target_platform="rk3588", float_dtype=float_dtype) == 0
        assert rknn.load_onnx(model=str(path), inputs=["input", "state", "sr"],
                              input_size_list=[[1, 512], [2, 1, 128], []]) == 0
    assert rknn.build(do_quantization=False) == 0
    assert rknn.init_runtime() == 0
    return rknn


@pytest.mark.integration
@pytest.mark.parametrize("name", sorted(CASES))
def test_real_model_fp32_and_fp16(shared_data, name):
    path = shared_data / "models" / "onnx" / f"{name}.onnx"
    case = CASES[name]
    session = reference_session(str(path))
    if case["size"]:
        img = _ocr_image(shared_data / "images", *case["size"])
        x = ((img.astype(np.float32) - 127.5) / 127.5).transpose(0, 3, 1, 2).astype(np.float32)
        reference = session.run(None, {"x": x})
        inputs = [img]
    else:
        inputs = _vad_inputs()
        reference = session.run(None, dict(zip(["input", "state", "sr"], inputs)))
    fp32 = _build(path, case, "float32").inference(inputs=inputs)
    fp16 = _build(path, case, "float16").inference(inputs=inputs)
    assert len(fp32) == len(reference)
    for got, ref in zip(fp32, reference):
        scale = float(np.abs(ref).max()) or 1.0
        assert got.shape == ref.shape
        assert float(np.abs(got - ref).max()) <= 1e-4 * scale
    for got, ref in zip(fp16, reference):
        assert cosine(got, ref) >= 0.9999
