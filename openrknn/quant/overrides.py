"""Hybrid-quantization decisions handed to the quantizer: layers kept in float16, fixed parameters."""
from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import onnx

from openrknn.errors import QuantizationError
from openrknn.quant.numerics import QuantParams
from openrknn.quant.weights import params_from_range

MODE_RANGE = "range"   # the user edited min/max: scale and zero point follow from them
MODE_SCALE = "scale"   # the user edited scale/zero_point: used as given


@dataclass(frozen=True)
class QuantOverrides:
    """Frozen record of what the hybrid config (or automatic mixed precision) changes.

    Attributes:
        float_layers: node names that run in float16 (weights not quantized).
        int16_layers: node names whose weights and output tensors are 16-bit in an 8-bit model.
        params: tensor name -> ``{"mode": MODE_RANGE|MODE_SCALE, "min", "max", "scale", "zero_point"}``.
        float_subgraphs: ``custom_hybrid`` pairs ``(input tensor, output tensor)``: every layer on a path
            from the input to the output runs in float16 (resolved on the graph being quantized).
    """

    float_layers: frozenset[str] = frozenset()
    int16_layers: frozenset[str] = frozenset()
    params: Mapping[str, dict[str, Any]] = field(default_factory=dict)
    float_subgraphs: tuple[tuple[str, str], ...] = ()

    def resolved(self, graph: onnx.ModelProto) -> "QuantOverrides":
        """These overrides with the layers of ``float_subgraphs`` added to ``float_layers``."""
        layers = set(self.float_layers)
        for start, end in self.float_subgraphs:
            layers |= subgraph_layers(graph, start, end)
        return replace(self, float_layers=frozenset(layers), float_subgraphs=())

    def check_layers(self, graph: onnx.ModelProto) -> None:
        """Every named layer must exist in the graph being quantized."""
        names = [n.name for n in graph.graph.node]
        both = self.float_layers & self.int16_layers
        if both:
            raise QuantizationError(f"hybrid quantization puts layer(s) {sorted(both)} in both float16 and int16")
        for layer in sorted((self.float_layers | self.int16_layers) - set(names)):
            close = difflib.get_close_matches(layer, names, n=3)
            raise QuantizationError(f"hybrid quantization names layer '{layer}', which is not in the model"
                                    + (f" (did you mean {close}?)" if close else ""))

    def activation_params(self, computed: dict[str, QuantParams]) -> dict[str, QuantParams]:
        """The fixed parameters of activation tensors, in the dtype the quantizer chose for them."""
        out = {}
        for name, entry in self.params.items():
            if name in computed:
                out[name] = _resolve(name, entry, computed[name])
        return out

    def weight_params(self, name: str, computed: QuantParams) -> QuantParams:
        return _resolve(name, self.params[name], computed)


def _resolve(name: str, entry: dict[str, Any], computed: QuantParams) -> QuantParams:
    size = computed.scale.size
    if entry["mode"] == MODE_SCALE:
        scale = np.asarray(entry["scale"], np.float32)
        zero = np.asarray(entry["zero_point"], np.int64)
        if scale.size != size or zero.size != size:
            raise QuantizationError(f"hybrid config: tensor '{name}' needs {size} scale/zero_point value(s), "
                                    f"got {scale.size}/{zero.size}")
        if np.any(zero < computed.qmin) or np.any(zero > computed.qmax):
            raise QuantizationError(f"hybrid config: zero_point of '{name}' must lie in "
                                    f"[{computed.qmin}, {computed.qmax}] for {computed.dtype}")
        return replace(computed, scale=scale.reshape(computed.scale.shape),
                       zero_point=zero.reshape(computed.zero_point.shape))
    lo, hi = np.asarray(entry["min"], np.float32), np.asarray(entry["max"], np.float32)
    if lo.size != size or hi.size != size or np.any(lo > hi):
        raise QuantizationError(f"hybrid config: tensor '{name}' needs {size} min/max value(s) with min <= max")
    fresh = params_from_range(lo, hi, computed.dtype, computed.qtype)
    return replace(computed, scale=fresh.scale.reshape(computed.scale.shape),
                   zero_point=fresh.zero_point.reshape(computed.zero_point.shape),
                   range_min=lo, range_max=hi)


def subgraph_layers(graph: onnx.ModelProto, start: str, end: str) -> set[str]:
    """Names of the nodes on a path from tensor ``start`` to tensor ``end`` (both included).

    Raises:
        QuantizationError: a name that is no tensor of the graph, or no path between them.
    """
    tensors = {v.name for v in graph.graph.input} | {o for n in graph.graph.node for o in n.output}
    for name in (start, end):
        if name not in tensors:
            close = difflib.get_close_matches(name, sorted(tensors), n=3)
            raise QuantizationError(f"custom_hybrid names tensor '{name}', which is not in the model"
                                    + (f" (did you mean {close}?)" if close else ""))
    after: set[str] = {start}
    downstream: set[str] = set()
    for node in graph.graph.node:            # nodes are topologically sorted
        if any(i in after for i in node.input):
            downstream.add(node.name)
            after.update(node.output)
    needed: set[str] = {end}
    upstream: set[str] = set()
    for node in reversed(graph.graph.node):
        if any(o in needed for o in node.output):
            upstream.add(node.name)
            needed.update(node.input)
    layers = downstream & upstream
    if not layers:
        raise QuantizationError(f"custom_hybrid: no path from '{start}' to '{end}'")
    return layers
