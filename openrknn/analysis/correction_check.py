"""Scores the candidates of the build's bias-correction decision on the network's outputs.

``quant.quantize_model`` decides whether the layers after the picture-reading ones keep their
bias correction (``quantizer._correct_every_layer``) by running two quantized candidates on
calibration samples; it does not run models itself, so the build hands it this scorer, which
runs them in the simulator and compares them with the float model.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from openrknn.analysis.mixed_precision import mean_output_cosine
from openrknn.graph.custom_ops import CustomOpRegistry
from openrknn.graph.rknn_model import RKNNModel
from openrknn.graph.runner import GraphRunner
from openrknn.quant.quantizer import CorrectionJudge
from openrknn.sim.session import lower


# Outputs with fewer values (a class score, a flag) are not judged: on the few calibration samples the
# check has, their cosine moves by noise. PP-OCR cls (2 values), calibrated on 10 resized photos: both
# tests say its later corrections lose (held-out 0.99852 vs 0.99974), yet on unseen text they win
# (0.99605 vs 0.99492). A model with only such outputs keeps every correction.
JUDGED_OUTPUT_SIZE = 16


def correction_judge(float_model: RKNNModel, custom_ops: CustomOpRegistry | None = None) -> CorrectionJudge:
    """A scorer for ``quant.quantize_model``: two quantized models and samples (graph layout) → each
    model's mean output cosine against their float graph (``golden``: the lowest over the outputs of
    at least ``JUDGED_OUTPUT_SIZE`` values, as ``auto_hybrid`` scores), or None when no output is
    that large. ``float_model`` names the inputs."""
    names = [spec.name for spec in float_model.inputs]

    def outputs(graph, samples: Sequence[Sequence[np.ndarray]]) -> list[list[np.ndarray]]:
        session = GraphRunner(graph, custom_ops)
        return [session.run(dict(zip(names, sample))) for sample in samples]

    def judge(first: RKNNModel, second: RKNNModel, samples: list) -> tuple[float, float] | None:
        golden = outputs(first.golden, samples)   # the float graph quantization calibrated (folded alike)
        wide = [k for k, value in enumerate(golden[0]) if np.asarray(value).size >= JUDGED_OUTPUT_SIZE]
        if not wide:
            return None

        def judged(results: list[list[np.ndarray]]) -> list[list[np.ndarray]]:
            return [[result[k] for k in wide] for result in results]

        return (mean_output_cosine(judged(golden), judged(outputs(lower(first), samples))),
                mean_output_cosine(judged(golden), judged(outputs(lower(second), samples))))

    return judge
