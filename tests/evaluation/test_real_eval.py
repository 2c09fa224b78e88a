"""A real text detector (PP-OCRv3 det, DB head) evaluated on two photos of text.

The ground truth is what onnxruntime's run of the original model gives through the DB decoder, so
the float reference must score mAP 1.0 (boxes scaled back to the photo exactly), and the fp16 build
close to it.
"""
from __future__ import annotations

import json

import numpy as np
import pytest
from PIL import Image

from rknn.api import RKNN
from tests.helpers import reference_session

SIZE = (256, 320)   # height, width: multiples of 32 as the DB network needs


@pytest.mark.integration
def test_ppocr_det_db_map(shared_data, tmp_path):
    pytest.importorskip("pycocotools", reason="detection mAP needs pycocotools (openrknn[eval])")
    pytest.importorskip("scipy", reason="the DB decoder needs scipy (openrknn[eval])")
    from openrknn.evaluation.decoders import decode_db
    path = shared_data / "models" / "onnx" / "ch_PP-OCRv3_det_infer.onnx"
    session = reference_session(str(path))
    height, width = SIZE
    images, annotations = [], []
    for image_id, name in enumerate(("text.png", "page.png"), 1):
        with Image.open(shared_data / "images" / name) as img:
            photo = img.convert("RGB")
        photo.save(tmp_path / name)
        pixels = np.asarray(photo.resize((width, height), Image.BILINEAR), dtype=np.float32)
        x = ((pixels - 127.5) / 127.5).transpose(2, 0, 1)[None].astype(np.float32)
        boxes = decode_db(session.run(None, {"x": x}), (width, height))
        assert len(boxes), f"the detector finds no text in {name}"
        images.append({"id": image_id, "file_name": name, "width": photo.width, "height": photo.height})
        for x1, y1, x2, y2, _, _ in boxes:
            box = [x1 * photo.width, y1 * photo.height, (x2 - x1) * photo.width, (y2 - y1) * photo.height]
            annotations.append({"id": len(annotations) + 1, "image_id": image_id, "category_id": 1, "iscrowd": 0,
                                "bbox": [float(v) for v in box], "area": float(box[2] * box[3])})
    (tmp_path / "instances.json").write_text(json.dumps({"images": images, "annotations": annotations,
                                                         "categories": [{"id": 1, "name": "text"}]}))
    rknn = RKNN()
    rknn.config(mean_values=[[127.5] * 3], std_values=[[127.5] * 3], target_platform="rk3588")
    assert rknn.load_onnx(model=str(path), inputs=["x"], input_size_list=[[1, 3, height, width]]) == 0
    assert rknn.build(do_quantization=False) == 0
    result = rknn.evaluate(str(tmp_path / "instances.json"), decoder="db", workers=1, cache=None)
    reference, fp16 = result["models"]
    assert reference["map50"] == pytest.approx(1.0) and reference["map"] == pytest.approx(1.0)
    assert fp16["map50"] > 0.9 and fp16["cosine_min"] > 0.999
