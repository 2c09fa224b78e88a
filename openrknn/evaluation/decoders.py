"""Detection decoders: model outputs -> boxes.

The toolkit had no box decoders before this module (the Caffe SSD frontend builds its own
``DetectionOutput`` into the graph, which :func:`decode_ssd` reads). Every decoder, and any
user-given post-processing function, has the signature::

    decode(outputs: list[np.ndarray], input_size: tuple[int, int]) -> np.ndarray  # shape (N, 6)

with rows ``(x1, y1, x2, y2, score, class_index)``, corners normalised to ``[0, 1]`` of the model
input (``input_size`` is its ``(width, height)``). The images are stretched to the input, so the
engine scales the corners by the original image size.
"""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from openrknn.errors import ConfigError

Decoder = Callable[[Sequence[np.ndarray], tuple[int, int]], np.ndarray]

# COCO-evaluation settings (as the usual YOLO validation scripts use): keep low-score boxes, mAP
# integrates over the whole precision/recall curve.
SCORE_THRESHOLD = 0.001
NMS_IOU = 0.65
MAX_DETECTIONS = 300


def nms(boxes: np.ndarray, scores: np.ndarray, classes: np.ndarray, iou: float = NMS_IOU,
        limit: int = MAX_DETECTIONS) -> np.ndarray:
    """Indices kept by per-class non-maximum suppression, best score first."""
    # boxes of different classes never overlap after shifting each class to its own region
    shifted = boxes + (classes.astype(np.float64) * (float(np.abs(boxes).max(initial=0.0)) + 1.0))[:, None]
    order = np.argsort(-scores, kind="stable")
    keep: list[int] = []
    while order.size and len(keep) < limit:
        best, rest = order[0], order[1:]
        keep.append(int(best))
        x1 = np.maximum(shifted[best, 0], shifted[rest, 0])
        y1 = np.maximum(shifted[best, 1], shifted[rest, 1])
        x2 = np.minimum(shifted[best, 2], shifted[rest, 2])
        y2 = np.minimum(shifted[best, 3], shifted[rest, 3])
        inter = np.clip(x2 - x1, 0, None) * np.clip(y2 - y1, 0, None)
        area = lambda b: (b[..., 2] - b[..., 0]) * (b[..., 3] - b[..., 1])  # noqa: E731
        union = area(shifted[best]) + area(shifted[rest]) - inter
        order = rest[inter <= iou * np.maximum(union, 1e-12)]
    return np.asarray(keep, dtype=np.int64)


def _finish(xywh: np.ndarray, scores: np.ndarray, classes: np.ndarray, input_size: tuple[int, int]) -> np.ndarray:
    """Centre/size boxes in input pixels -> kept, normalised corner rows."""
    mask = scores >= SCORE_THRESHOLD
    xywh, scores, classes = xywh[mask].astype(np.float64), scores[mask], classes[mask]
    corners = np.concatenate([xywh[:, :2] - xywh[:, 2:] / 2, xywh[:, :2] + xywh[:, 2:] / 2], axis=1)
    keep = nms(corners, scores, classes)
    width, height = input_size
    corners = corners[keep] / np.array([width, height, width, height], dtype=np.float64)
    return np.column_stack([np.clip(corners, 0.0, 1.0), scores[keep], classes[keep]]).astype(np.float32)


def decode_yolov5(outputs: Sequence[np.ndarray], input_size: tuple[int, int]) -> np.ndarray:
    """Ultralytics YOLOv5 export: one output ``[1, N, 5 + classes]`` = (cx, cy, w, h, objectness, class
    scores), boxes in input pixels, scores after the sigmoid."""
    out = _single(outputs, "yolov5")
    pred = out.reshape(-1, out.shape[-1])
    class_scores = pred[:, 5:] * pred[:, 4:5]
    classes = class_scores.argmax(axis=1)
    return _finish(pred[:, :4], class_scores[np.arange(len(pred)), classes], classes, input_size)


def decode_yolov8(outputs: Sequence[np.ndarray], input_size: tuple[int, int]) -> np.ndarray:
    """Ultralytics YOLOv8 export: one output ``[1, 4 + classes, N]`` = (cx, cy, w, h, class scores)."""
    out = _single(outputs, "yolov8")
    pred = out.reshape(out.shape[-2], out.shape[-1]).T
    classes = pred[:, 4:].argmax(axis=1)
    return _finish(pred[:, :4], pred[np.arange(len(pred)), 4 + classes], classes, input_size)


def decode_ssd(outputs: Sequence[np.ndarray], input_size: tuple[int, int]) -> np.ndarray:
    """Caffe SSD ``DetectionOutput`` ``[1, 1, N, 7]`` rows (image, label, score, x1, y1, x2, y2),
    corners already normalised, NMS done in the graph. Label 0 is the background: label ``k`` is class
    index ``k - 1``; rows with label -1 mean "nothing found"."""
    rows = _single(outputs, "ssd").reshape(-1, 7).astype(np.float64)
    rows = rows[(rows[:, 1] >= 1) & (rows[:, 2] >= SCORE_THRESHOLD)]
    return np.column_stack([np.clip(rows[:, 3:7], 0.0, 1.0), rows[:, 2], rows[:, 1] - 1]).astype(np.float32)


def decode_db(outputs: Sequence[np.ndarray], input_size: tuple[int, int], threshold: float = 0.3,
              box_threshold: float = 0.6, unclip_ratio: float = 1.5) -> np.ndarray:
    """DB (PaddleOCR-style) text detection: a probability map ``[1, 1, H, W]``; each connected region
    above ``threshold`` whose mean probability reaches ``box_threshold`` gives one box (class 0), grown
    by DB's unclip distance ``area * unclip_ratio / perimeter`` (regions are shrunk in training)."""
    try:
        from scipy import ndimage
    except ImportError as e:
        raise ConfigError("the DB decoder needs scipy: pip install 'openrknn[eval]'") from e
    prob = np.squeeze(_single(outputs, "db")).astype(np.float64)
    if prob.ndim != 2:
        raise ConfigError(f"the DB decoder expects a [1, 1, H, W] probability map, got {list(outputs[0].shape)}")
    regions, count = ndimage.label(prob > threshold)
    height, width = prob.shape
    rows = []
    for index, where in enumerate(ndimage.find_objects(regions), 1):
        y, x = where
        inside = regions[where] == index
        score = float(prob[where][inside].mean())
        h, w = y.stop - y.start, x.stop - x.start
        if score < box_threshold or min(h, w) < 2:
            continue
        grow = w * h * unclip_ratio / (2.0 * (w + h))
        rows.append([max(x.start - grow, 0) / width, max(y.start - grow, 0) / height,
                     min(x.stop + grow, width) / width, min(y.stop + grow, height) / height, score, 0.0])
    return np.asarray(rows, dtype=np.float32).reshape(-1, 6)


DECODERS: dict[str, Decoder] = {"yolov5": decode_yolov5, "yolov8": decode_yolov8, "ssd": decode_ssd,
                                "db": decode_db}


def get_decoder(decoder: str | Decoder) -> Decoder:
    """A decoder by name (``yolov5``, ``yolov8``, ``ssd``, ``db``) or a user function as it is."""
    if callable(decoder):
        return decoder
    if decoder not in DECODERS:
        raise ConfigError(f"decoder '{decoder}' is unknown: use one of {', '.join(DECODERS)} or give a "
                          "post-processing function")
    return DECODERS[decoder]


def _single(outputs: Sequence[np.ndarray], name: str) -> np.ndarray:
    if len(outputs) < 1:
        raise ConfigError(f"the {name} decoder needs the model's output; the model gave none")
    return np.asarray(outputs[0])
