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


def correction_judge(float_model: RKNNModel, custom_ops: CustomOpRegistry | None = None) -> CorrectionJudge:
    """A scorer for ``quant.quantize_model``: two quantized models and samples (graph layout) → each
    model's mean output cosine against their float graph (``golden``: the lowest over the outputs,
    as ``auto_hybrid`` scores). ``float_model`` names the inputs."""
    names = [spec.name for spec in float_model.inputs]

    def outputs(graph, samples: Sequence[Sequence[np.ndarray]]) -> list[list[np.ndarray]]:
        session = GraphRunner(graph, custom_ops)
        return [session.run(dict(zip(names, sample))) for sample in samples]

    def judge(first: RKNNModel, second: RKNNModel, samples: list) -> tuple[float, float]:
        golden = outputs(first.golden, samples)   # the float graph quantization calibrated (folded alike)
        return (mean_output_cosine(golden, outputs(lower(first), samples)),
                mean_output_cosine(golden, outputs(lower(second), samples)))

    return judge
