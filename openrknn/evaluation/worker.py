"""What a worker does with one shard of images: read them, run the models, reduce each output to a
small per-image record (top-k classes, decoded boxes, cosine to the float reference).

The same function runs in the main process (``workers=1``), in local worker processes and in Ray
tasks, so every path gives the same numbers.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from openrknn.analysis.accuracy import cosine
from openrknn.evaluation.cache import pack
from openrknn.evaluation.datasets import Sample
from openrknn.evaluation.decoders import get_decoder
from openrknn.evaluation.models import EvalModel, ModelRunner
from openrknn.graph.rknn_model import LAYOUT_NCHW, LAYOUT_NHWC, TensorSpec
from openrknn.quant.dataset import load_files


@dataclass(frozen=True)
class PostProcess:
    """How outputs become a record: the task, top-k, the output read, the box decoder."""

    task: str = "cosine"
    top_k: int = 5
    output_index: int = 0
    decoder: str | Callable | None = None

    def key(self) -> str:
        """Names what decides a record (a user function by its qualified name)."""
        decoder = self.decoder if isinstance(self.decoder, str) or self.decoder is None else \
            f"{getattr(self.decoder, '__module__', '')}.{getattr(self.decoder, '__qualname__', repr(self.decoder))}"
        return f"{self.task}|{self.top_k}|{self.output_index}|{decoder}"


@dataclass
class ShardTask:
    """One unit of work: the samples, which models each still needs, cached reference outputs."""

    samples: list[Sample]
    todo: dict[str, list[int]]                       # image key -> indices of the models to run
    reference: int | None                            # index of the float reference, if any
    post: PostProcess
    rgb2bgr: bool = False
    ref_outputs: dict[str, list[np.ndarray]] = field(default_factory=dict)


@dataclass
class ShardResult:
    records: list[tuple[int, str, bytes]]            # (model index, image key, packed record)
    ref_outputs: list[tuple[str, bytes]]             # newly computed reference outputs (image key, packed)


_RUNNERS: dict[str, ModelRunner] = {}                # per process: sessions built once, kept across shards


def runner_for(model: EvalModel) -> ModelRunner:
    if model.digest not in _RUNNERS:
        _RUNNERS[model.digest] = ModelRunner(model)
    return _RUNNERS[model.digest]


def run_shard(models: Sequence[EvalModel], task: ShardTask) -> ShardResult:
    """Compute the missing records of one shard."""
    decoder = get_decoder(task.post.decoder) if task.post.task == "detection" else None
    records, new_ref = [], []
    for sample in task.samples:
        todo = task.todo.get(sample.key)
        if not todo:
            continue
        inputs: dict[tuple, list[np.ndarray]] = {}

        def outputs_of(model: EvalModel) -> list[np.ndarray]:
            signature = tuple((tuple(s.shape), s.layout, str(s.dtype)) for s in model.inputs)
            if signature not in inputs:
                inputs[signature] = load_files(sample.files, model.inputs, task.rgb2bgr, where=sample.key,
                                               warn_resize=False)   # stretching to the input is the contract
            return runner_for(model).run(inputs[signature])

        reference = None
        if task.reference is not None:
            reference = task.ref_outputs.get(sample.key)
            if reference is None:
                reference = outputs_of(models[task.reference])
                new_ref.append((sample.key, pack({f"o{i}": o for i, o in enumerate(reference)})))
        for index in todo:
            is_reference = index == task.reference
            outputs = reference if is_reference else outputs_of(models[index])
            record = summarize(outputs, None if is_reference else reference, task.post, sample, models[index].inputs,
                               decoder)
            records.append((index, sample.key, pack(record)))
    return ShardResult(records, new_ref)


def summarize(outputs: list[np.ndarray], reference: list[np.ndarray] | None, post: PostProcess, sample: Sample,
              inputs: Sequence[TensorSpec], decoder: Callable | None) -> dict[str, np.ndarray]:
    """The record of one image: ``cosine`` (lowest over the outputs; NaN without a reference), ``top``
    (classification), ``boxes`` (detection: x1, y1, x2, y2 in original-image pixels, score, class)."""
    record = {"cosine": np.float64(np.nan)}
    if reference is not None:
        record["cosine"] = np.float64(min(cosine(r, o) for r, o in zip(reference, outputs)))
    if post.task == "classification":
        scores = np.asarray(outputs[post.output_index], dtype=np.float64).ravel()
        record["top"] = np.argsort(-scores, kind="stable")[:post.top_k].astype(np.int64)
    elif post.task == "detection":
        boxes = np.asarray(decoder(outputs, input_size(inputs)), dtype=np.float64).reshape(-1, 6)
        width, height = sample.size or input_size(inputs)
        boxes[:, :4] *= np.array([width, height, width, height], dtype=np.float64)
        record["boxes"] = boxes
    return record


def input_size(inputs: Sequence[TensorSpec]) -> tuple[int, int]:
    """(width, height) of the first input image; (1, 1) for a non-image input."""
    shape = list(inputs[0].shape)
    if len(shape) != 4:
        return 1, 1
    if inputs[0].layout == LAYOUT_NHWC:
        return shape[2], shape[1]
    return (shape[3], shape[2]) if inputs[0].layout == LAYOUT_NCHW or shape[1] <= 4 else (shape[2], shape[1])


def run_key(model: EvalModel, reference: EvalModel | None, post: PostProcess) -> str:
    """The cache key of a model's records: the model, the reference it is compared with, the post-processing."""
    parts = [model.digest, reference.digest if reference is not None and reference is not model else "-", post.key()]
    return hashlib.sha256("|".join(parts).encode()).hexdigest()
