"""Int8 ranges for tensors the NPU model keeps in float32 inside a layer (a Conv's output before
its hard-swish or residual Add). TFLite's integer Conv needs an int8 output; its range is the
narrowest one outside which the layer's stored (int8) output no longer changes, found by running
the layer's remaining steps on a grid of values."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from openrknn.sim.sigmoid import exact_sigmoid_nodes

_GRID = 20001


def param_range(params) -> tuple[float, float]:
    scale, zero = float(params.scale.ravel()[0]), int(params.zero_point.ravel()[0])
    return scale * (params.qmin - zero), scale * (params.qmax - zero)


def intermediate_range(ex, group, tensor: str) -> tuple[float, float]:
    """The (low, high) real range for the int8 form of ``tensor``, an internal tensor of ``group``."""
    nodes = group.nodes[1:]
    # a MatMul's bias Add before the residual Add (MatMul → Add(b) → Add(other)): the residual reads
    # tensor + b, so tensor's range is that range shifted by the bias
    bias = next((n for n in nodes if n.op_type == "Add" and tensor in n.input and len(n.input) == 2
                 and all(i == tensor or i in ex.inits for i in n.input)), None)
    shift = (0.0, 0.0)
    read = tensor
    if bias is not None and any(n.op_type == "Add" and bias.output[0] in n.input for n in nodes):
        values = ex.inits[next(i for i in bias.input if i != tensor)].astype(np.float64)
        shift, read = (float(values.min()), float(values.max())), bias.output[0]
    residual = next((n for n in nodes if n.op_type == "Add" and read in n.input
                     and all(i == read or i in ex.params for i in n.input)), None)
    if residual is not None:
        other = next(i for i in residual.input if i != read)
        added = residual.output[0]
        lo, hi = param_range(ex.params[added]) if added in ex.params else \
            _inverse_range(ex, [n for n in nodes if n is not residual and n is not bias], added, group)
        o_lo, o_hi = param_range(ex.params[other])
        return min(lo - o_hi - shift[1], 0.0), max(hi - o_lo - shift[0], 0.0)
    return _inverse_range(ex, nodes, tensor, group)


def _inverse_range(ex, nodes: list[onnx.NodeProto], tensor: str, group) -> tuple[float, float]:
    exit_name = group.outputs[-1]
    params = ex.params[exit_name]
    out_lo, out_hi = param_range(params)
    first = reach = 4 * max(abs(out_lo), abs(out_hi)) + 8
    evaluator = ReferenceEvaluator(closure_model(ex, nodes, tensor, exit_name))
    for _ in range(_WIDENINGS):   # a small scale after the activation needs a wide positive range: widen until
        lo, hi = _edges(evaluator, tensor, reach, ex.rank(tensor), params)   # the output is constant above it
        if hi < 0.5 * reach:
            break
        reach *= 8
    # The negative side of these activations is compressed (PRelu, SiLU, hard-swish): its far tail, where
    # the output changes by a step over a long stretch, is clipped rather than coarsening every value.
    return max(lo, -max(first, hi)), hi

_WIDENINGS = 8


def closure_model(ex, nodes: list[onnx.NodeProto], tensor: str, exit_name: str) -> onnx.ModelProto:
    """``nodes`` alone as a model from ``tensor`` to ``exit_name`` (float), with the constants they read."""
    used = {i for n in nodes for i in n.input}
    inits = [numpy_helper.from_array(ex.inits[name], name) for name in used if name in ex.inits]
    plain = []
    for node in nodes:
        if node.op_type == "Sigmoid" and node.domain in ("", "ai.onnx"):
            # the simulator's Sigmoid, not onnxruntime's kernel (tens of steps apart on a tiny output grid)
            base = f"{node.output[0]}__sigmoid"
            inits.append(numpy_helper.from_array(np.array(1.0, np.float32), f"{base}_one"))
            plain += exact_sigmoid_nodes(node.input[0], node.output[0], base, f"{base}_one")
            continue
        copy = onnx.NodeProto()
        copy.CopyFrom(node)
        del copy.metadata_props[:]
        plain.append(copy)
    graph = helper.make_graph(plain, "closure", [helper.make_tensor_value_info(tensor, onnx.TensorProto.FLOAT, None)],
                              [helper.make_tensor_value_info(exit_name, onnx.TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=list(ex.model.graph.opset_import))


def _edges(evaluator, tensor: str, reach: float, rank: int, params) -> tuple[float, float]:
    """The smallest interval of ``[-reach, reach]`` outside which the quantized output is constant."""
    grid = np.linspace(-reach, reach, _GRID, dtype=np.float32).reshape((_GRID,) + (1,) * (rank - 1))
    with np.errstate(over="ignore", invalid="ignore"):   # exp overflows far out on the grid: saturated values
        values = np.asarray(evaluator.run(None, {tensor: grid})[0], np.float32).reshape(_GRID, -1)
    scale, zero = float(params.scale.ravel()[0]), int(params.zero_point.ravel()[0])
    q = np.clip(np.rint(values / np.float32(scale)) + zero, params.qmin, params.qmax)
    xs = grid.ravel()
    lo, hi = 0.0, 0.0
    for column in q.T:
        changes_high = np.nonzero(column != column[-1])[0]
        changes_low = np.nonzero(column != column[0])[0]
        hi = max(hi, float(xs[min(changes_high[-1] + 1, _GRID - 1)]) if changes_high.size else 0.0)
        lo = min(lo, float(xs[max(changes_low[0] - 1, 0)]) if changes_low.size else 0.0)
    return lo, hi
