"""Accuracy analysis: per-layer error of the simulator against the float model (seed 002 §3.2.2)."""
from __future__ import annotations

import os
import tempfile
from typing import Any, Sequence

import numpy as np

from openrknn import log
from openrknn.analysis.accuracy import AnalysisResult, analyse
from openrknn.analysis.report import write_report
from openrknn.errors import InferenceInputError
from openrknn.graph.rknn_model import RKNNModel


def run_accuracy_analysis(model: RKNNModel, inputs: Any, output_dir: str, cfg: Any) -> AnalysisResult:
    """Read ``inputs`` like calibration data, analyse, write the report, print the table.

    Args:
        inputs: list of input files (jpg/png/bmp/npy, one per model input) — or, Toolkit 1 form,
            a dataset .txt file whose first line is used.
    """
    feeds = _read_inputs(model, inputs, cfg)
    result = analyse(model, feeds)
    path = write_report(result, output_dir)
    with open(path, encoding="utf-8") as handle:
        print(handle.read())
    log.info(f"The error analysis results save to: {path}")
    log.info(f"The mapping of layer_name & file_name save to: {os.path.join(output_dir, 'map_name_to_file.txt')}")
    worst = result.worst(3)
    if worst:
        log.info("worst layers (single): " + ", ".join(f"{r.tensor} cos={r.single_cos:.5f}" for r in worst))
    return result


def _read_inputs(model: RKNNModel, inputs: Any, cfg: Any) -> dict[str, np.ndarray]:
    from openrknn.quant.dataset import load_dataset

    specs = _batch1(model)
    rgb2bgr = getattr(cfg, "quant_img_RGB2BGR", False)
    if isinstance(inputs, str) and inputs.endswith(".txt"):
        samples = load_dataset(inputs, specs, rgb2bgr=rgb2bgr)
    else:
        paths = [inputs] if isinstance(inputs, str) else list(inputs)
        paths = [p for entry in paths for p in str(entry).split()]
        if len(paths) != len(specs):
            raise InferenceInputError(f"accuracy_analysis: the model has {len(specs)} input(s) but {len(paths)} "
                                      "file(s) were given")
        with tempfile.TemporaryDirectory() as tmp:
            listing = os.path.join(tmp, "inputs.txt")
            with open(listing, "w", encoding="utf-8") as handle:
                handle.write(" ".join(os.path.abspath(p) for p in paths) + "\n")
            samples = load_dataset(listing, specs, rgb2bgr=rgb2bgr)
            first = list(samples[0])
    if isinstance(inputs, str) and inputs.endswith(".txt"):
        first = list(samples[0])
    return {spec.name: np.asarray(value) for spec, value in zip(specs, first)}


def _batch1(model: RKNNModel):
    from openrknn.graph.rknn_model import TensorSpec
    batch = model.rknn_batch_size
    return [TensorSpec(s.name, [s.shape[0] // batch] + s.shape[1:] if batch > 1 else s.shape, s.dtype, s.layout)
            for s in model.inputs]


__all__ = ["run_accuracy_analysis", "analyse", "AnalysisResult"]
