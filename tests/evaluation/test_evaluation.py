"""Dataset-scale evaluation: metrics, the mAP against hand-computed values, cache resume, workers, Ray."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from PIL import Image

from openrknn.evaluation import EvalModel, PostProcess, evaluate, evaluate_built, format_report, open_dataset

CLASSES = 4
WEIGHTS = np.array([[0.02, -0.01, 0.0], [-0.01, 0.02, 0.0], [0.0, -0.01, 0.02], [0.006, 0.006, 0.006]], np.float32)
BIAS = np.array([0.0, 0.0, 0.0, -0.4], np.float32)


def tiny_classifier(path: Path) -> Path:
    """GlobalAveragePool -> Flatten -> Gemm: class scores from the mean colour of an 8x8 image."""
    nodes = [helper.make_node("GlobalAveragePool", ["x"], ["p"]), helper.make_node("Flatten", ["p"], ["f"]),
             helper.make_node("Gemm", ["f", "w", "b"], ["scores"], transB=1)]
    graph = helper.make_graph(nodes, "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("scores", TensorProto.FLOAT, [1, CLASSES])],
                              [numpy_helper.from_array(WEIGHTS, "w"), numpy_helper.from_array(BIAS, "b")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)
    return path


def expected_class(color: np.ndarray) -> int:
    return int(np.argmax(WEIGHTS.astype(np.float64) @ color + BIAS))


@pytest.fixture(scope="module")
def classification(tmp_path_factory):
    """12 solid-colour images, labels: the true class for 8 of them, a wrong one for 4."""
    root = tmp_path_factory.mktemp("cls")
    rng = np.random.default_rng(3)
    lines, truth = [], []
    (root / "images").mkdir()
    for i in range(12):
        color = rng.integers(0, 256, 3).astype(np.float64)
        Image.fromarray(np.tile(color.astype(np.uint8), (8, 8, 1))).save(root / "images" / f"im{i:02d}.png")
        label = expected_class(color) if i % 3 else (expected_class(color) + 1) % CLASSES
        lines.append(f"im{i:02d}.png {label}")
        truth.append(expected_class(color))
    (root / "labels.txt").write_text("\n".join(lines) + "\n")
    (root / "calib.txt").write_text("\n".join(f"images/im{i:02d}.png" for i in range(4)) + "\n")
    model = tiny_classifier(root / "tiny.onnx")
    return root, model, truth


def built(model: Path, quantize: bool = False, calib: Path | None = None):
    from rknn.api import RKNN
    rknn = RKNN()
    rknn.config(target_platform="rk3588")
    assert rknn.load_onnx(str(model)) == 0
    assert rknn.build(do_quantization=quantize, dataset=str(calib) if calib else None) == 0
    return rknn


def test_classification_metrics(classification, tmp_path):
    root, model, truth = classification
    rknn = built(model)
    result = rknn.evaluate(str(root / "images"), labels=str(root / "labels.txt"), workers=1,
                           cache=str(tmp_path / "c.sqlite"), per_class=True)
    reference, build = result["models"]
    assert reference["name"] == "float" and reference["images"] == 12
    assert reference["top1"] == pytest.approx(8 / 12)     # the four wrong labels
    assert reference["top5"] == 1.0                       # four classes: always in the top 5
    assert build["agreement"] == 1.0 and build["cosine_min"] > 0.999
    assert reference["agreement"] is None and reference["cosine_mean"] is None
    assert sum(reference["per_class"].values()) > 0
    assert len(build["worst"]) == 5


def test_folder_classes_and_bad_inputs(classification, tmp_path):
    from openrknn.errors import ConfigError
    root, _, _ = classification
    (tmp_path / "cat").mkdir()
    (tmp_path / "dog").mkdir()
    Image.new("RGB", (8, 8)).save(tmp_path / "cat" / "a.png")
    Image.new("RGB", (8, 8)).save(tmp_path / "dog" / "b.png")
    data = open_dataset(str(tmp_path))
    assert data.task == "classification" and [s.label for s in data.samples] == [0, 1]
    listing = open_dataset(str(root / "calib.txt"), labels=str(root / "labels.txt"))   # matched by basename
    assert listing.task == "classification" and [s.key for s in listing.samples][:2] == ["images/im00.png",
                                                                                        "images/im01.png"]
    assert open_dataset(str(root / "calib.txt")).task == "cosine"
    with pytest.raises(ConfigError, match="does not exist"):
        open_dataset(str(tmp_path / "missing"))
    with pytest.raises(ConfigError, match="needs COCO"):
        open_dataset(str(root / "images"), task="detection")


# ------------------------------------------------------------------ detection
def toy_detector(path: Path) -> Path:
    """Passes its input through: a [1, 1, 3, 7] array *is* the SSD DetectionOutput of the image."""
    nodes = [helper.make_node("Mul", ["x", "one"], ["detections"])]
    graph = helper.make_graph(nodes, "toy_det", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 3, 7])],
                              [helper.make_tensor_value_info("detections", TensorProto.FLOAT, [1, 1, 3, 7])],
                              [numpy_helper.from_array(np.ones(1, np.float32), "one")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)
    return path


def detection_set(root: Path) -> Path:
    """Two 100x100 images, one ground-truth box each; predictions in normalised SSD rows
    (image, label 1 = first category, score, x1, y1, x2, y2)."""
    boxes = {1: [10, 10, 60, 60], 2: [20, 20, 70, 70]}
    predictions = {
        1: [[0, 1, 0.9, 0.10, 0.10, 0.60, 0.60],     # exact: IoU 1
            [0, 1, 0.8, 0.80, 0.80, 0.95, 0.95],     # false positive
            [0, -1, -1, -1, -1, -1, -1]],            # padding row
        2: [[0, 1, 0.7, 0.20, 0.20, 0.70, 0.56],     # IoU 50x36 / 50x50 = 0.72
            [0, -1, -1, -1, -1, -1, -1], [0, -1, -1, -1, -1, -1, -1]],
    }
    images, annotations = [], []
    for image_id, box in boxes.items():
        np.save(root / f"img{image_id}.npy", np.array(predictions[image_id], np.float32).reshape(1, 1, 3, 7))
        images.append({"id": image_id, "file_name": f"img{image_id}.npy", "width": 100, "height": 100})
        x1, y1, x2, y2 = box
        annotations.append({"id": image_id, "image_id": image_id, "category_id": 7, "iscrowd": 0,
                            "bbox": [x1, y1, x2 - x1, y2 - y1], "area": (x2 - x1) * (y2 - y1)})
    (root / "instances.json").write_text(json.dumps({"images": images, "annotations": annotations,
                                                     "categories": [{"id": 7, "name": "thing"}]}))
    return root / "instances.json"


def ssd_rows(outputs, input_size):
    """A user post-processing function: the SSD rows as (x1, y1, x2, y2, score, class)."""
    rows = outputs[0].reshape(-1, 7)
    rows = rows[rows[:, 1] >= 1]
    return np.column_stack([rows[:, 3:7], rows[:, 2], rows[:, 1] - 1])


def test_detection_map_matches_hand_computation(tmp_path):
    pytest.importorskip("pycocotools", reason="detection mAP needs pycocotools (openrknn[eval])")
    instances = detection_set(tmp_path)
    rknn = built(toy_detector(tmp_path / "det.onnx"))
    result = rknn.evaluate(str(instances), decoder="ssd", workers=1, cache=None, is_print=False)
    # Ranked by score: TP (0.9), FP (0.8), then the IoU-0.72 box: a TP for IoU thresholds 0.50..0.70.
    # COCO's 101-point interpolated precision is 1 up to recall 0.5, then 2/3 (2 TP in 3) when the
    # last box matches, else 0.
    ap_match = (51 + 50 * 2 / 3) / 101
    ap_miss = 51 / 101
    by_function = rknn.evaluate(str(instances), decoder=ssd_rows, workers=1, cache=None, is_print=False)
    assert by_function["models"] == result["models"]
    for row in result["models"]:
        assert row["map50"] == pytest.approx(ap_match, abs=1e-9)
        assert row["map"] == pytest.approx((5 * ap_match + 5 * ap_miss) / 10, abs=1e-9)
        assert row["per_class"]["thing"] == pytest.approx(row["map"], abs=1e-9)


def test_decoders_on_known_boxes():
    from openrknn.evaluation.decoders import decode_db, decode_yolov5, decode_yolov8
    # one YOLOv8 candidate per class column, two overlapping candidates of class 1: NMS keeps one
    v8 = np.zeros((1, 4 + 2, 3), np.float32)
    v8[0, :, 0] = [32, 32, 20, 20, 0.9, 0.0]
    v8[0, :, 1] = [33, 32, 20, 20, 0.0, 0.8]
    v8[0, :, 2] = [34, 32, 20, 20, 0.0, 0.7]
    rows = decode_yolov8([v8], (64, 64))
    assert rows.shape == (2, 6)
    np.testing.assert_allclose(rows[0], [22 / 64, 22 / 64, 42 / 64, 42 / 64, 0.9, 0], rtol=1e-6)
    assert rows[1, 4] == pytest.approx(0.8) and rows[1, 5] == 1
    v5 = np.array([[[16, 16, 8, 8, 0.5, 0.2, 0.8]]], np.float32)
    np.testing.assert_allclose(decode_yolov5([v5], (32, 32)), [[0.375, 0.375, 0.625, 0.625, 0.4, 1]], rtol=1e-6)
    pytest.importorskip("scipy", reason="the DB decoder needs scipy (openrknn[eval])")
    prob = np.zeros((1, 1, 20, 20), np.float32)
    prob[0, 0, 5:9, 4:14] = 0.9
    (box,) = decode_db([prob], (20, 20))
    assert box[4] == pytest.approx(0.9) and box[0] < 4 / 20 < 14 / 20 < box[2]


# ------------------------------------------------------------------ cache, workers, Ray
def _models(root: Path, model: Path):
    float_build = built(model)._model
    quantized = built(model, True, root / "calib.txt")._model
    return EvalModel.float_reference(float_build), [EvalModel.from_rknn("fp16", float_build),
                                                    EvalModel.from_rknn("int8", quantized)]


def _numbers(report):
    return [(r.top1, r.topk, r.agreement, r.cosine_mean, r.cosine_min, r.worst) for r in report.rows]


def test_cache_resume_and_workers(classification, tmp_path):
    root, model, _ = classification
    data = open_dataset(str(root / "images"), str(root / "labels.txt"))
    reference, builds = _models(root, model)
    fresh = evaluate(builds, data, reference, workers=1, cache_path=None, shard_size=4)
    assert fresh.computed == 36 and fresh.cached == 0

    cache = str(tmp_path / "eval.sqlite")

    def stop(done: int) -> None:
        if done >= 4:
            raise KeyboardInterrupt
    with pytest.raises(KeyboardInterrupt):
        evaluate(builds, data, reference, workers=1, cache_path=cache, shard_size=4, on_shard=stop)
    resumed = evaluate(builds, data, reference, workers=1, cache_path=cache, shard_size=4)
    assert resumed.cached == 12 and resumed.computed == 24       # the first shard is not recomputed
    assert _numbers(resumed) == _numbers(fresh)
    # a new build of the same model re-uses the float reference's records and outputs
    only_int8 = evaluate(builds[1:], data, reference, workers=1, cache_path=cache, shard_size=4)
    assert only_int8.computed == 0 and _numbers(only_int8) == [_numbers(fresh)[0], _numbers(fresh)[2]]

    parallel = evaluate(builds, data, reference, workers=2, cache_path=None, shard_size=3)
    assert parallel.computed == 36 and _numbers(parallel) == _numbers(fresh)
    assert "agree_top1" in format_report(parallel)


def test_ray_gives_the_local_numbers(classification):
    ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'openrknn[ray]')")
    root, model, _ = classification
    data = open_dataset(str(root / "images"), str(root / "labels.txt"))
    reference, builds = _models(root, model)
    local = evaluate(builds, data, reference, workers=1, cache_path=None, shard_size=4)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        distributed = evaluate(builds, data, reference, ray_address="local", cache_path=None, shard_size=4)
    finally:
        ray.shutdown()
    assert distributed.backend.startswith("ray") and _numbers(distributed) == _numbers(local)


def test_cli_compare(classification, tmp_path, capsys):
    from openrknn.cli.main import main
    root, model, _ = classification
    code = main(["eval", str(model), "--dataset", str(root / "images"), "--labels", str(root / "labels.txt"),
                 "--compare", "fp16,normal,mmse,w8a16,auto_hybrid", "-t", "rk3562", "--calibration",
                 str(root / "calib.txt"), "--workers", "1", "--cache", str(tmp_path / "c.sqlite")])
    out = capsys.readouterr().out
    assert code == 0
    assert all(name in out for name in ("float ", "fp16 ", "normal ", "mmse ", "w8a16 ", "auto_hybrid ", "top1"))
    # the same builds made again hash the same: everything comes from the cache
    assert main(["eval", str(model), "--dataset", str(root / "images"), "--labels", str(root / "labels.txt"),
                 "--compare", "fp16,w8a16", "-t", "rk3562", "--calibration", str(root / "calib.txt"),
                 "--workers", "1", "--cache", str(tmp_path / "c.sqlite"), "--json", str(tmp_path / "r.json")]) == 0
    assert "0 result(s) computed, 36 from the cache" in capsys.readouterr().out
    assert json.loads((tmp_path / "r.json").read_text())["models"][2]["name"] == "w8a16"
    assert main(["eval", str(model), "--dataset", str(root / "images"), "--compare", "int3"]) == 1
    assert "'int3' is not a build setting" in capsys.readouterr().out


def test_evaluate_bad_input_returns_none(classification, tmp_path, capsys):
    root, model, _ = classification
    rknn = built(model)
    assert rknn.evaluate(str(tmp_path / "missing"), cache=None) is None
    assert "E evaluate: evaluation dataset" in capsys.readouterr().out
    (tmp_path / "broken.txt").write_text("images/im00.png\nnot_there.png\n")
    (tmp_path / "images").symlink_to(root / "images")
    assert rknn.evaluate(str(tmp_path / "broken.txt"), workers=1, cache=None) is None
    assert "not_there.png" in capsys.readouterr().out


def test_coco_without_annotations_is_refused(tmp_path):
    """mAP over a COCO file with no ground truth would print 0.0000 as if the model found nothing."""
    from openrknn.errors import ConfigError
    detection_set(tmp_path)
    data = json.loads((tmp_path / "instances.json").read_text())
    data["annotations"] = []
    (tmp_path / "empty.json").write_text(json.dumps(data))
    with pytest.raises(ConfigError, match="no annotations"):
        open_dataset(str(tmp_path / "empty.json"))
    assert open_dataset(str(tmp_path / "empty.json"), task="cosine").task == "cosine"   # outputs only: fine


def test_cli_eval_shows_progress(classification, capsys):
    from openrknn.cli.main import main
    root, model, _ = classification
    assert main(["eval", str(model), "--dataset", str(root / "images"), "--no-cache", "--workers", "1"]) == 0
    err = capsys.readouterr().err
    assert "I evaluate" in err and "100%" in err and "img" in err
