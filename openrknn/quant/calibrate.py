"""Run the float graph over the calibration samples and stream per-tensor statistics.

One pass collects min/max/zero counts of every float tensor; a second pass fills histograms
only when the chosen algorithm needs them. Each sample's intermediate values are dropped as soon
as the observers have seen them.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import onnx
from onnx import helper
from tqdm import tqdm

from openrknn.errors import QuantizationError
from openrknn.graph.custom_ops import CustomOpRegistry
from openrknn.graph.runner import GraphRunner
from openrknn.quant.observer import TensorStats


@dataclass
class CalibrationCache:
    """What the trials of automatic mixed precision share (same model, samples and settings): the
    prepared float graph (constants folded, depthwise channels equalized) and the statistics of
    every tensor calibrated so far."""

    prepared: onnx.ModelProto | None = None
    stats: dict[str, TensorStats] = field(default_factory=dict)
    every_layer_corrected: bool | None = None   # the bias-correction decision (quantizer._correct_every_layer)


def _session(model: onnx.ModelProto, tensors: list[str], custom_ops: CustomOpRegistry | None):
    """A runner for ``model`` with ``tensors`` added to its outputs (custom ops run in Python)."""
    graph = onnx.ModelProto()
    graph.CopyFrom(model)
    known = {o.name for o in graph.graph.output}
    for name in tensors:
        if name not in known:
            graph.graph.output.append(helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, None))
    return GraphRunner(graph, custom_ops)


def channel_ranges(model: onnx.ModelProto, tensors: Sequence[str], samples: Sequence[Sequence[np.ndarray]],
                   custom_ops: CustomOpRegistry | None = None) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per-channel (axis 1) minimum and maximum of ``tensors`` over ``samples``.

    Only the layers those tensors depend on run (the graph is cut after them).

    Raises:
        QuantizationError: the float graph cannot run on a sample.
    """
    ranges: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for values in tensor_values(model, tensors, samples, custom_ops):
        for name, value in values.items():
            merge_channel_range(ranges, name, value)
    return ranges


def merge_channel_range(ranges: dict[str, tuple[np.ndarray, np.ndarray]], name: str, value: np.ndarray) -> None:
    """Widen ``ranges[name]`` (per-channel min, max along axis 1) by ``value``; skips non-finite values."""
    if value.ndim < 2 or not np.isfinite(value).all():
        return
    flat = np.moveaxis(value, 1, 0).reshape(value.shape[1], -1)
    lo, hi = flat.min(axis=1), flat.max(axis=1)
    if name in ranges and ranges[name][0].shape == lo.shape:
        lo, hi = np.minimum(ranges[name][0], lo), np.maximum(ranges[name][1], hi)
    ranges[name] = (lo, hi)


def _ancestors(model: onnx.ModelProto, tensors: Sequence[str]) -> onnx.ModelProto:
    """A copy of ``model`` keeping only the nodes ``tensors`` depend on, with them as outputs."""
    producer = {o: n for n in model.graph.node for o in n.output}
    needed, stack, keep = set(), list(tensors), set()
    while stack:
        name = stack.pop()
        if name in needed:
            continue
        needed.add(name)
        node = producer.get(name)
        if node is not None and id(node) not in keep:
            keep.add(id(node))
            stack.extend(i for i in node.input if i)
    graph = onnx.ModelProto()
    graph.CopyFrom(model)
    nodes = [n for n in model.graph.node if id(n) in keep]
    del graph.graph.node[:]
    graph.graph.node.extend(nodes)
    del graph.graph.output[:]
    return graph


def collect_stats(model: onnx.ModelProto, tensors: Sequence[str], samples: Sequence[Sequence[np.ndarray]],
                  histograms: bool, custom_ops: CustomOpRegistry | None = None) -> dict[str, TensorStats]:
    """Statistics of ``tensors`` over ``samples`` (each: one array per graph input, in order).

    Raises:
        QuantizationError: the float graph cannot run on a sample.
    """
    graph_inputs = [v.name for v in model.graph.input if v.name not in {i.name for i in model.graph.initializer}]
    tensors = [t for t in tensors if t]
    session = _session(model, tensors, custom_ops)
    names = session.output_names
    wanted = set(tensors)
    stats = {name: TensorStats() for name in tensors}
    passes = [("calibration", "update_range")] + ([("histograms", "update_histogram")] if histograms else [])
    for label, method in passes:
        for index, sample in enumerate(tqdm(samples, desc=f"I quantize: {label}", unit="sample", disable=None,
                                            leave=False)):
            feeds = dict(zip(graph_inputs, sample))
            try:
                values = session.run(feeds)
            except Exception as e:  # onnxruntime (or a custom op) raises its own exception types
                raise QuantizationError(f"calibration sample {index + 1} cannot run through the float model: {e}") from e
            for name, value in zip(names, values):
                if name in wanted:
                    getattr(stats[name], method)(value)
            for name, value in feeds.items():
                if name in wanted:
                    getattr(stats[name], method)(value)
    return stats


def tensor_values(model: onnx.ModelProto, tensors: Sequence[str], samples: Sequence[Sequence[np.ndarray]],
                  custom_ops: CustomOpRegistry | None = None, label: str = "tensors"):
    """Yield, per sample, ``{name: value}`` of ``tensors`` (graph inputs included) in the float graph.

    Raises:
        QuantizationError: the float graph cannot run on a sample.
    """
    graph_inputs = [v.name for v in model.graph.input if v.name not in {i.name for i in model.graph.initializer}]
    wanted = [t for t in tensors if t and t not in graph_inputs]
    session = _session(_ancestors(model, wanted), wanted, custom_ops) if wanted else None
    for index, sample in enumerate(tqdm(samples, desc=f"I quantize: {label}", unit="sample", disable=None,
                                        leave=False)):
        feeds = dict(zip(graph_inputs, sample))
        try:
            values = dict(zip(session.output_names, session.run(feeds))) if session else {}
        except Exception as e:  # onnxruntime (or a custom op) raises its own exception types
            raise QuantizationError(f"calibration sample {index + 1} cannot run through the float model: {e}") from e
        values.update(feeds)
        yield {name: values[name] for name in tensors if name in values}
