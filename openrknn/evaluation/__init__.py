"""Dataset-scale evaluation: what a build costs in task metric over a whole validation set.

``evaluate_built`` is what ``RKNN.evaluate`` and ``openrknn eval`` call: the float reference and
each build run over the dataset (local worker processes or a Ray cluster), results cached per
(model, image), metrics side by side. See docs/evaluation.md.
"""
from __future__ import annotations

from typing import Callable, Sequence

from openrknn.evaluation.datasets import EvalDataset, Sample, open_dataset
from openrknn.evaluation.engine import EvalReport, evaluate
from openrknn.evaluation.models import EvalModel
from openrknn.evaluation.report import format_report
from openrknn.evaluation.worker import PostProcess
from openrknn.graph.rknn_model import RKNNModel


def evaluate_built(builds: Sequence[tuple[str, RKNNModel]], dataset: str, labels: str | None = None,
                   images_dir: str | None = None, task: str | None = None,
                   decoder: str | Callable | None = None, top_k: int = 5, output_index: int = 0,
                   workers: int | None = None, ray_address: str | None = None, cache: str | None = None,
                   rgb2bgr: bool = False, per_class: bool = False, reference: RKNNModel | None = None,
                   is_print: bool = True) -> EvalReport:
    """Evaluate named models on a dataset; the float reference is taken from ``reference`` or from
    the first build that carries its float model (a model built from source, not a loaded .rknn)."""
    data = open_dataset(dataset, labels, images_dir, task)
    source = reference or next((m for _, m in builds if m.golden is not None), None)
    float_model = EvalModel.float_reference(source) if source is not None else None
    models = [EvalModel.from_rknn(name, model) for name, model in builds]
    post = PostProcess(data.task, top_k, output_index, decoder)
    report = evaluate(models, data, float_model, post, workers, ray_address, cache, rgb2bgr=rgb2bgr)
    if is_print:
        print(format_report(report, per_class))
    return report


__all__ = ["EvalDataset", "EvalModel", "EvalReport", "PostProcess", "Sample", "evaluate", "evaluate_built",
           "format_report", "open_dataset"]
