"""Accuracy analysis: per-layer error of the simulator against the float model (seed 002 §3.2.2)."""
from __future__ import annotations

import os
import tempfile
from typing import Any

import numpy as np

from openrknn import log
from openrknn.analysis.accuracy import LOPSIDED_DROP, LOPSIDED_INPUTS, AnalysisResult, analyse
from openrknn.analysis.report import write_report
from openrknn.errors import InferenceInputError
from openrknn.graph.custom_ops import CustomOpRegistry
from openrknn.graph.rknn_model import RKNNModel, TensorSpec
from openrknn.quant.dataset import load_dataset


DEFAULT_SNAPSHOT_DIR = "./snapshot"   # where output_dir=None writes its two text files


def run_accuracy_analysis(model: RKNNModel, inputs: Any, output_dir: str | None, cfg: Any,
                          custom_ops: CustomOpRegistry | None = None) -> AnalysisResult:
    """Read ``inputs`` like calibration data, analyse, write the report, print the table.

    Args:
        model: a model built from its source (it carries the float "golden" graph).
        inputs: list of input files (jpg/png/bmp/npy, one per model input), list of arrays (graph
            layout, or NHWC for an NCHW image input) — or, Toolkit 1 form, a dataset .txt file whose
            first line is used.
        output_dir: where the dumps, ``error_analysis.txt/.csv/.json/.png`` are written; None: only
            ``error_analysis.txt`` and ``map_name_to_file.txt``, in ``./snapshot`` (rknn-toolkit2's behaviour).
        cfg: the model config (``quant_img_RGB2BGR`` is honoured when images are read).
        custom_ops: the registered custom ops the model uses.

    Returns:
        The per-layer errors; ``result.worst(n)`` lists the layers with the lowest ``single`` cosine.

    Example:
        >>> # rknn.build(do_quantization=True, dataset='dataset.txt')
        >>> # run_accuracy_analysis(rknn._model, ['dog.jpg'], './snapshot', rknn._cfg()).worst(1)
    """
    feeds = _read_inputs(model, inputs, cfg)
    result = analyse(model, feeds, custom_ops)
    dumps = output_dir is not None
    output_dir = output_dir if output_dir is not None else DEFAULT_SNAPSHOT_DIR
    path = write_report(result, output_dir, dumps=dumps)
    with open(path, encoding="utf-8") as handle:
        print(handle.read())
    log.info(f"The error analysis results save to: {path}")
    log.info(f"The mapping of layer_name & file_name save to: {os.path.join(output_dir, 'map_name_to_file.txt')}")
    worst = result.worst(3)
    if worst:
        log.info("worst layers (single): " + ", ".join(f"{r.tensor} cos={r.single_cos:.5f}" for r in worst))
    _summarise_lopsided(result)
    return result


def _summarise_lopsided(result: AnalysisResult) -> None:
    """One line on the first layer that is right alone and fed right inputs, yet wrong in the whole model."""
    found = result.first_lopsided()
    if found is None:
        log.info("accuracy_analysis: no layer loses accuracy only in the whole model (entire cos within "
                 f"{LOPSIDED_DROP} of single wherever the inputs are ≥ {LOPSIDED_INPUTS})")
        return
    row, inputs = found
    log.warning(f"accuracy_analysis: layer '{row.tensor}' ({row.op_type}) is right alone (single cos "
                f"{row.single_cos:.5f}) and its input(s) are right (entire cos ≥ "
                f"{min(r.entire_cos for r in inputs):.5f}), yet in the whole model it drops to entire cos "
                f"{row.entire_cos:.5f}: its integer parameters do not match what it is fed (e.g. a bias or scale "
                "shared with another layer). Compare its quantization parameters with its producer's, or move it "
                "to float16 with hybrid quantization to confirm")


def _read_inputs(model: RKNNModel, inputs: Any, cfg: Any) -> dict[str, np.ndarray]:
    """One sample: arrays are taken as they are; files (or a Toolkit 1 dataset .txt, first line) are
    read like calibration data."""
    specs = _batch1(model)
    if isinstance(inputs, np.ndarray):
        inputs = [inputs]
    if isinstance(inputs, (list, tuple)) and inputs and all(isinstance(v, np.ndarray) for v in inputs):
        if len(inputs) != len(specs):
            raise InferenceInputError(f"accuracy_analysis: the model has {len(specs)} input(s) but {len(inputs)} "
                                      "array(s) were given")
        return {spec.name: _as_graph_array(value, spec) for spec, value in zip(specs, inputs)}

    rgb2bgr = getattr(cfg, "quant_img_RGB2BGR", False)
    if isinstance(inputs, str) and inputs.endswith(".txt"):
        return {spec.name: np.asarray(v) for spec, v in zip(specs, load_dataset(inputs, specs, rgb2bgr=rgb2bgr)[0])}
    paths = [inputs] if isinstance(inputs, str) else list(inputs)
    paths = [p for entry in paths for p in str(entry).split()]
    if len(paths) != len(specs):
        raise InferenceInputError(f"accuracy_analysis: the model has {len(specs)} input(s) but {len(paths)} "
                                  "file(s) were given")
    with tempfile.TemporaryDirectory() as tmp:
        listing = os.path.join(tmp, "inputs.txt")
        with open(listing, "w", encoding="utf-8") as handle:
            handle.write(" ".join(os.path.abspath(p) for p in paths) + "\n")
        first = load_dataset(listing, specs, rgb2bgr=rgb2bgr)[0]
    return {spec.name: np.asarray(value) for spec, value in zip(specs, first)}


def _as_graph_array(value: np.ndarray, spec: Any) -> np.ndarray:
    """An input array in the graph's shape; a 4-D NHWC array of an NCHW input is transposed."""
    shape = tuple(spec.shape)
    if value.shape != shape and value.ndim == 4 and value.transpose(0, 3, 1, 2).shape == shape:
        value = value.transpose(0, 3, 1, 2)
    if value.shape != shape:
        raise InferenceInputError(f"accuracy_analysis: input '{spec.name}' has shape {list(value.shape)}, the "
                                  f"model expects {list(shape)}")
    return np.ascontiguousarray(value, dtype=np.dtype(spec.dtype or "float32"))


def _batch1(model: RKNNModel):
    batch = model.rknn_batch_size
    return [TensorSpec(s.name, [s.shape[0] // batch] + s.shape[1:] if batch > 1 else s.shape, s.dtype, s.layout)
            for s in model.inputs]


__all__ = ["run_accuracy_analysis", "analyse", "AnalysisResult"]
