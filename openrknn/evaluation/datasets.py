"""Evaluation datasets: an image folder (+ labels file), a COCO json, or the toolkit's dataset.txt.

Every format becomes a list of small :class:`Sample` records (paths and labels only: images are
read by the workers, one at a time). A sample's ``key`` is its path relative to the dataset root: it
names the image in the result cache, so a moved dataset still hits its cache.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any

from openrknn.errors import ConfigError
from openrknn.quant.dataset import IMAGE_EXTENSIONS

TASKS = ("classification", "detection", "cosine")
_SAMPLE_EXTENSIONS = IMAGE_EXTENSIONS + (".npy",)


@dataclass(frozen=True)
class Sample:
    """One evaluation sample: its input files, and its label (classification) or COCO image id."""

    key: str
    files: tuple[str, ...]
    label: int | None = None
    image_id: int | None = None
    size: tuple[int, int] | None = None   # (width, height) of the original image, for detection boxes


@dataclass
class EvalDataset:
    """The samples, the task they support and (detection) the COCO ground truth."""

    samples: list[Sample]
    task: str
    coco_json: str | None = None
    category_ids: list[int] = field(default_factory=list)   # class index i of a decoder -> category_ids[i]
    class_names: list[str] = field(default_factory=list)
    annotation_count: int = 0   # COCO: ground-truth objects in the json


def open_dataset(path: str, labels: str | None = None, images_dir: str | None = None,
                 task: str | None = None) -> EvalDataset:
    """Read an evaluation dataset.

    Args:
        path: a folder of images (class sub-folders give the labels when no ``labels`` file is
            given), a COCO ``instances_*.json``, or a dataset ``.txt`` (one sample per line, one file per
            model input, relative to the file's folder).
        labels: a labels file, one ``<image path relative to the dataset> <class index>`` per line.
        images_dir: COCO only: the folder of the images (default: the json's folder).
        task: ``classification``, ``detection`` or ``cosine`` (default: from what the dataset gives).

    Raises:
        ConfigError: naming the file and the problem.
    """
    if not os.path.exists(path):
        raise ConfigError(f"evaluation dataset '{path}' does not exist")
    if path.lower().endswith(".json"):
        dataset = _coco(path, images_dir)
    elif path.lower().endswith(".txt"):
        dataset = _listing(path)
    elif os.path.isdir(path):
        dataset = _folder(path)
    else:
        raise ConfigError(f"evaluation dataset '{path}': give an image folder, a COCO .json or a dataset .txt")
    if labels:
        dataset = _with_labels(dataset, labels)
    if task:
        if task not in TASKS:
            raise ConfigError(f"task '{task}' is not one of {', '.join(TASKS)}")
        if task == "classification" and any(s.label is None for s in dataset.samples):
            raise ConfigError(f"classification needs a label for every image of '{path}': give a labels file "
                              "(<image> <class index> per line) or class sub-folders")
        if task == "detection" and dataset.coco_json is None:
            raise ConfigError("detection needs COCO annotations: give an instances_*.json as the dataset")
        dataset.task = task
    if dataset.task == "detection" and dataset.coco_json is not None and dataset.annotation_count == 0:
        raise ConfigError(f"'{path}' has no annotations (ground-truth boxes), so every mAP would be 0: give the "
                          "instances_*.json that lists them, or --task cosine to compare the outputs only")
    if not dataset.samples:
        raise ConfigError(f"evaluation dataset '{path}' holds no samples")
    return dataset


def _folder(root: str) -> EvalDataset:
    found = []
    for folder, dirs, files in os.walk(root):
        dirs.sort()
        found += [os.path.join(folder, f) for f in files if f.lower().endswith(_SAMPLE_EXTENSIONS)]
    keys = sorted(os.path.relpath(f, root).replace(os.sep, "/") for f in found)
    classes = sorted({k.split("/")[0] for k in keys if "/" in k})
    by_class = bool(classes) and all("/" in k for k in keys)
    samples = [Sample(k, (os.path.join(root, k),), classes.index(k.split("/")[0]) if by_class else None)
               for k in keys]
    return EvalDataset(samples, "classification" if by_class else "cosine", class_names=classes if by_class else [])


def _listing(path: str) -> EvalDataset:
    base = os.path.dirname(os.path.abspath(path))
    samples = []
    try:
        with open(path, encoding="utf-8") as handle:
            for line in handle:
                files = line.split()
                if files and not files[0].startswith("#"):
                    samples.append(Sample(files[0], tuple(os.path.join(base, f) for f in files)))
    except OSError as e:
        raise ConfigError(f"dataset file '{path}' cannot be read: {e.strerror or e}") from e
    except UnicodeDecodeError as e:
        raise ConfigError(f"dataset file '{path}' is not UTF-8 text (byte {e.start}); it lists one sample per "
                          "line") from e
    return EvalDataset(samples, "cosine")


def _coco(path: str, images_dir: str | None) -> EvalDataset:
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except OSError as e:
        raise ConfigError(f"COCO annotation file '{path}' cannot be read: {e.strerror or e}") from e
    except ValueError as e:   # bad JSON or bad UTF-8
        raise ConfigError(f"'{path}' is not a COCO annotation file (not valid JSON: {e})") from e
    if not isinstance(data, dict) or not isinstance(data.get("images"), list) \
            or not isinstance(data.get("categories"), list):
        raise ConfigError(f"'{path}' is not a COCO annotation file: it needs the lists 'images' and 'categories'")
    images = [_entry(path, "images", i, img, {"id": int, "file_name": str, "width": int, "height": int})
              for i, img in enumerate(data["images"])]
    categories = [_entry(path, "categories", i, cat, {"id": int}) for i, cat in enumerate(data["categories"])]
    annotations = data.get("annotations", [])
    if not isinstance(annotations, list):
        raise ConfigError(f"COCO annotation file '{path}': 'annotations' must be a list")
    for i, annotation in enumerate(annotations):   # what pycocotools reads of each, checked here to be named
        _entry(path, "annotations", i, annotation, {"image_id": int, "category_id": int, "bbox": list,
                                                    "area": (int, float)})
        box = annotation["bbox"]
        if len(box) != 4 or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in box):
            raise ConfigError(f"COCO annotation file '{path}': annotations[{i}]: 'bbox' must be 4 numbers "
                              "[x, y, width, height]")
    base = images_dir or os.path.dirname(os.path.abspath(path))
    samples = [Sample(img["file_name"], (os.path.join(base, img["file_name"]),), image_id=img["id"],
                      size=(img["width"], img["height"]))
               for img in sorted(images, key=lambda i: i["id"])]
    cats = sorted(categories, key=lambda c: c["id"])
    return EvalDataset(samples, "detection", coco_json=os.path.abspath(path),
                       category_ids=[c["id"] for c in cats], class_names=[str(c.get("name", c["id"])) for c in cats],
                       annotation_count=len(annotations))


def _entry(path: str, table: str, index: int, entry: object, fields: dict[str, Any]) -> dict:
    """One COCO ``images``/``categories`` entry with its required fields checked (file, entry, field)."""
    where = f"COCO annotation file '{path}': {table}[{index}]"
    if not isinstance(entry, dict):
        raise ConfigError(f"{where} is a {type(entry).__name__}, expected an object")
    for name, kind in fields.items():
        value = entry.get(name)
        if value is None:
            raise ConfigError(f"{where} has no '{name}'")
        if not isinstance(value, kind) or isinstance(value, bool) or (kind is int and value < 0):
            expected = {int: "a non-negative integer", str: "a string", list: "a list"}.get(kind, "a number")
            raise ConfigError(f"{where}: '{name}' must be {expected}, got {str(value)[:40]!r}")
    return entry


def _with_labels(dataset: EvalDataset, labels: str) -> EvalDataset:
    table: dict[str, int] = {}
    try:
        with open(labels, encoding="utf-8") as handle:
            for number, line in enumerate(handle, 1):
                parts = line.rsplit(maxsplit=1)
                if not parts or line.lstrip().startswith("#"):
                    continue
                if len(parts) != 2 or not parts[1].lstrip("-").isdigit():
                    raise ConfigError(f"labels file '{labels}' line {number}: expected '<image> <class index>'")
                table[parts[0].strip().replace(os.sep, "/")] = int(parts[1])
    except OSError as e:
        raise ConfigError(f"labels file '{labels}' cannot be read: {e.strerror or e}") from e
    except UnicodeDecodeError as e:
        raise ConfigError(f"labels file '{labels}' is not UTF-8 text (byte {e.start}); it holds "
                          "'<image> <class index>' per line") from e
    samples = []
    for sample in dataset.samples:
        label = table.get(sample.key, table.get(os.path.basename(sample.key)))
        if label is None:
            raise ConfigError(f"labels file '{labels}' has no label for '{sample.key}'")
        samples.append(Sample(sample.key, sample.files, label, sample.image_id, sample.size))
    return EvalDataset(samples, "classification", dataset.coco_json, dataset.category_ids, dataset.class_names)
