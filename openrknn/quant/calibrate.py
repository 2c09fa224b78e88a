"""Run the float graph over the calibration samples and stream per-tensor statistics.

One pass collects min/max/zero counts of every float tensor; a second pass fills histograms
only when the chosen algorithm needs them. Each sample's intermediate values are dropped as soon
as the observers have seen them.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
import onnx
from onnx import helper

from openrknn.errors import QuantizationError
from openrknn.quant.observer import TensorStats


def _session(model: onnx.ModelProto, tensors: list[str]):
    from openrknn.sim.session import make_session
    graph = onnx.ModelProto()
    graph.CopyFrom(model)
    known = {o.name for o in graph.graph.output}
    for name in tensors:
        if name not in known:
            graph.graph.output.append(helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, None))
    return make_session(graph)


def collect_stats(model: onnx.ModelProto, tensors: Sequence[str], samples: Sequence[Sequence[np.ndarray]],
                  histograms: bool) -> dict[str, TensorStats]:
    """Statistics of ``tensors`` over ``samples`` (each: one array per graph input, in order).

    Raises:
        QuantizationError: the float graph cannot run on a sample.
    """
    from tqdm import tqdm

    graph_inputs = [v.name for v in model.graph.input if v.name not in {i.name for i in model.graph.initializer}]
    tensors = [t for t in tensors if t]
    session = _session(model, tensors)
    names = [o.name for o in session.get_outputs()]
    wanted = set(tensors)
    stats = {name: TensorStats() for name in tensors}
    passes = [("calibration", "update_range")] + ([("histograms", "update_histogram")] if histograms else [])
    for label, method in passes:
        for index, sample in enumerate(tqdm(samples, desc=f"I quantize: {label}", unit="sample", disable=None,
                                            leave=False)):
            feeds = dict(zip(graph_inputs, sample))
            try:
                values = session.run(None, feeds)
            except Exception as e:  # onnxruntime raises its own exception types
                raise QuantizationError(f"calibration sample {index + 1} cannot run through the float model: {e}") from e
            for name, value in zip(names, values):
                if name in wanted:
                    getattr(stats[name], method)(value)
            for name, value in feeds.items():
                if name in wanted:
                    getattr(stats[name], method)(value)
    return stats
