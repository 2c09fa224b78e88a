"""Task metrics from the per-image records, accumulated image by image.

* classification: top-1 / top-k accuracy, per-class top-1, agreement of the top-1 with the float
  reference's top-1;
* detection: COCO mAP@0.5 and mAP@0.5:0.95 and per-category AP, computed by pycocotools
  (``pip install 'openrknn[eval]'``);
* every model: output cosine to the float reference (mean, lowest) and the worst images.
"""
from __future__ import annotations

import contextlib
import heapq
import io
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from openrknn.errors import ConfigError
from openrknn.evaluation.datasets import EvalDataset, Sample

WORST_COUNT = 5


@dataclass
class ModelMetrics:
    """One column of the report."""

    name: str
    images: int = 0
    top1: float | None = None
    topk: float | None = None
    top_k: int = 5
    agreement: float | None = None
    map50: float | None = None
    map: float | None = None
    cosine_mean: float | None = None
    cosine_min: float | None = None
    per_class: dict[str, float] = field(default_factory=dict)
    worst: list[tuple[str, float]] = field(default_factory=list)   # (image, cosine), lowest first

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "images": self.images, "top1": self.top1, f"top{self.top_k}": self.topk,
                "agreement": self.agreement, "map50": self.map50, "map": self.map, "cosine_mean": self.cosine_mean,
                "cosine_min": self.cosine_min, "per_class": dict(self.per_class),
                "worst": [{"image": k, "cosine": c} for k, c in self.worst]}


class Accumulator:
    """Feeds one model's records in dataset order; ``finish`` gives its :class:`ModelMetrics`."""

    def __init__(self, name: str, dataset: EvalDataset, top_k: int, has_reference: bool) -> None:
        self.metrics = ModelMetrics(name, top_k=top_k)
        self.dataset = dataset
        self.has_reference = has_reference
        self._correct1 = self._correctk = self._agree = 0
        self._per_class: dict[int, list[int]] = {}        # label -> [images, correct top-1]
        self._cosines = 0.0
        self._cosine_count = 0
        self._worst: list[tuple[float, int, str]] = []     # max-heap of the lowest cosines (negated)
        self._detections: list[dict[str, Any]] = []

    def add(self, sample: Sample, record: dict[str, np.ndarray], reference_top1: int | None) -> None:
        m = self.metrics
        m.images += 1
        value = float(record["cosine"])
        if self.has_reference:
            self._cosine_count += 1
            self._cosines += value
            rank = -math.inf if math.isnan(value) else value   # a NaN (e.g. fp16 overflow) is the worst
            heapq.heappush(self._worst, (-rank, -m.images, sample.key))
            if len(self._worst) > WORST_COUNT:
                heapq.heappop(self._worst)
            if m.cosine_min is None or math.isnan(value) or (not math.isnan(m.cosine_min) and value < m.cosine_min):
                m.cosine_min = value
        if "top" in record and sample.label is not None:
            top = [int(v) for v in record["top"]]
            counts = self._per_class.setdefault(sample.label, [0, 0])
            counts[0] += 1
            if top and top[0] == sample.label:
                self._correct1 += 1
                counts[1] += 1
            self._correctk += int(sample.label in top)
            self._agree += int(reference_top1 is not None and bool(top) and top[0] == reference_top1)
        if "boxes" in record and sample.image_id is not None:
            for x1, y1, x2, y2, score, cls in record["boxes"]:
                index = int(cls)
                if 0 <= index < len(self.dataset.category_ids):
                    self._detections.append({"image_id": sample.image_id, "category_id": self.dataset.category_ids[index],
                                             "bbox": [float(x1), float(y1), float(x2 - x1), float(y2 - y1)],
                                             "score": float(score)})

    def finish(self) -> ModelMetrics:
        m = self.metrics
        if self._cosine_count:
            m.cosine_mean = self._cosines / self._cosine_count
            m.worst = [(key, -neg if neg != math.inf else float("nan")) for neg, _, key in sorted(self._worst,
                                                                                                 reverse=True)]
        if self.dataset.task == "classification" and m.images:
            m.top1, m.topk = self._correct1 / m.images, self._correctk / m.images
            m.agreement = self._agree / m.images if self.has_reference else None
            names = self.dataset.class_names
            m.per_class = {(names[c] if c < len(names) else str(c)): hits / total
                           for c, (total, hits) in sorted(self._per_class.items())}
        if self.dataset.task == "detection":
            m.map50, m.map, m.per_class = coco_map(self.dataset, self._detections)
        return m


def coco_map(dataset: EvalDataset, detections: list[dict[str, Any]]) -> tuple[float, float, dict[str, float]]:
    """mAP@0.5, mAP@0.5:0.95 and per-category AP@0.5:0.95 by pycocotools' COCOeval."""
    try:
        from pycocotools.coco import COCO
        from pycocotools.cocoeval import COCOeval
    except ImportError as e:
        raise ConfigError("detection mAP needs pycocotools: pip install 'openrknn[eval]'") from e
    if not detections:
        return 0.0, 0.0, {name: 0.0 for name in dataset.class_names}
    try:
        with contextlib.redirect_stdout(io.StringIO()):   # pycocotools prints its progress
            truth = COCO(dataset.coco_json)
            evaluator = COCOeval(truth, truth.loadRes(detections), "bbox")
            evaluator.params.imgIds = [s.image_id for s in dataset.samples]
            evaluator.evaluate()
            evaluator.accumulate()
            evaluator.summarize()
    except Exception as e:  # noqa: BLE001 - pycocotools raises bare KeyError/IndexError on odd annotations
        raise ConfigError(f"COCO annotation file '{dataset.coco_json}' cannot be evaluated by pycocotools "
                          f"({type(e).__name__}: {str(e)[:80]}); check its 'annotations' (image_id, category_id, "
                          "bbox, area)") from e
    precision = evaluator.eval["precision"]          # [iou, recall, category, area, max detections]
    per_class = {}
    for k, category in enumerate(evaluator.params.catIds):
        values = precision[:, :, k, 0, -1]
        name = dataset.class_names[dataset.category_ids.index(category)]
        per_class[name] = float(values[values > -1].mean()) if (values > -1).any() else float("nan")
    return max(float(evaluator.stats[1]), 0.0), max(float(evaluator.stats[0]), 0.0), per_class
