"""Output sensitivity of each quantization point, measured in ONE onnxruntime session.

The float graph gets, at every quantization point of a quantized model — each stored activation
tensor (the graph input included) and each integer weight — a gated fake quantization::

    x' = g ? dequantize(quantize(x)) : x        g: a boolean graph input (an ``If``)

so any set of points can be switched on with a feed, without rebuilding the session. The points of
one NPU layer (its stored outputs and its weights; the graph input belongs to its first reader)
are switched on together, alone, and the layer is scored by how far the model's outputs drop from
the float outputs (1 − cosine, averaged over outputs and samples). That ranks layers by what their
quantization costs at the output — which is what ``auto_hybrid`` must fix — rather than by the
layer's own error, which a following 1×1 conv can amplify or a Sigmoid can hide.
"""
from __future__ import annotations

from collections.abc import Collection, Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from openrknn.graph import npu_layers
from openrknn.graph.custom_ops import CustomOpRegistry
from openrknn.graph.rknn_model import RKNNModel
from openrknn.quant import numerics
from openrknn.quant.numerics import QuantParams
from openrknn.sim.session import GraphRunner

_GATE = "__gate__"


def gated_graph(quantized: RKNNModel) -> tuple[onnx.ModelProto, dict[str, str]]:
    """The float graph with a gated fake quantization at every quantization point of ``quantized``.

    Returns the graph and ``point → gate input name`` (a point is a tensor or weight name). A gate
    is a boolean scalar input (see :func:`gate_feeds`) driving an ``If``: a point switched off
    costs one branch choice, not a fake quantization, so a run is about as fast as the float model.
    """
    graph = onnx.ModelProto()
    graph.CopyFrom(quantized.golden)
    weights = {i.name: i for i in graph.graph.initializer}
    integer = {i.name: numpy_helper.to_array(i) for i in quantized.graph.graph.initializer}
    produced = {o for n in graph.graph.node for o in n.output} | {
        i.name for i in graph.graph.input if i.type.tensor_type.elem_type == TensorProto.FLOAT}
    gates: dict[str, str] = {}
    new_nodes: dict[str, list[onnx.NodeProto]] = {}   # gated tensor → the nodes that gate it
    rename: dict[str, str] = {}
    for index, (name, record) in enumerate(sorted(quantized.quant_params.items())):
        if record.get("dtype") not in numerics.RANGES:
            continue   # int32 biases: their rounding is far below the activations'
        params = QuantParams.from_dict(record)
        gate = f"{_GATE}{index}"
        if name in weights and name in integer and integer[name].dtype != np.float32:
            rounded = numerics.dequantize(integer[name], params).astype(np.float32)
            graph.graph.initializer.append(numpy_helper.from_array(rounded, f"{name}__dq"))
            then = [helper.make_node("Identity", [f"{name}__dq"], [f"{name}__then"])]
        elif name in produced and name not in weights and params.axis is None:
            then = _fake_quant(name, params, graph)
        else:
            continue
        new_nodes[name] = [_switch(name, gate, then)]
        rename[name] = f"{name}__fq"
        gates[name] = gate
        graph.graph.input.append(helper.make_tensor_value_info(gate, TensorProto.BOOL, []))
    for node in graph.graph.node:
        for k, value in enumerate(node.input):
            if value in rename:
                node.input[k] = rename[value]
    for output in graph.graph.output:   # the stored output tensor is quantized too
        if output.name in rename:
            new_nodes[""] = new_nodes.get("", []) + [
                helper.make_node("Identity", [rename[output.name]], [f"{output.name}__gated"])]
            output.name = f"{output.name}__gated"
    _insert_in_order(graph, new_nodes)
    del graph.graph.value_info[:]
    return graph, gates


def gate_feeds(gates: dict[str, str], on: Collection[str] = ()) -> dict[str, np.ndarray]:
    """Feeds for the gate inputs of :func:`gated_graph`: the points in ``on`` quantized, the rest float."""
    return {gate: np.array(point in on) for point, gate in gates.items()}


def _switch(name: str, gate: str, then: list[onnx.NodeProto]) -> onnx.NodeProto:
    """``name__fq = gate ? <then nodes' last output> : name`` (the branches read ``name`` from outside)."""
    keep = [helper.make_node("Identity", [name], [f"{name}__else"])]
    branches = {label: helper.make_graph(nodes, f"{name}_{label}", [], [
        helper.make_tensor_value_info(nodes[-1].output[0], TensorProto.FLOAT, None)])
        for label, nodes in (("on", then), ("off", keep))}
    return helper.make_node("If", [gate], [f"{name}__fq"], then_branch=branches["on"], else_branch=branches["off"])


def _fake_quant(name: str, params: QuantParams, graph: onnx.ModelProto) -> list[onnx.NodeProto]:
    """``dequantize(quantize(name))`` per tensor, with the quantizer's float32 division and
    round-half-even (any integer dtype, 16-bit included)."""
    scale = np.float32(params.scale.ravel()[0])
    zero = np.float32(params.zero_point.ravel()[0])
    constants = {"s": scale, "z": zero, "lo": np.float32(params.qmin), "hi": np.float32(params.qmax)}
    for key, value in constants.items():
        graph.graph.initializer.append(numpy_helper.from_array(np.array(value, np.float32), f"{name}__{key}"))
    t = lambda suffix: f"{name}__{suffix}"   # noqa: E731 - short local naming helper
    return [helper.make_node("Div", [name, t("s")], [t("d")]),
            helper.make_node("Round", [t("d")], [t("r")]),
            helper.make_node("Add", [t("r"), t("z")], [t("rz")]),
            helper.make_node("Clip", [t("rz"), t("lo"), t("hi")], [t("q")]),
            helper.make_node("Sub", [t("q"), t("z")], [t("qz")]),
            helper.make_node("Mul", [t("qz"), t("s")], [t("then")])]


def _insert_in_order(graph: onnx.ModelProto, by_source: dict[str, list[onnx.NodeProto]]) -> None:
    """Place the nodes gating each tensor right after its producer (topological order); those under
    the key "" (graph-output copies) go last."""
    ordered: list[onnx.NodeProto] = []
    emitted: set[str] = set()

    def emit(tensor: str) -> None:
        if tensor in by_source and tensor not in emitted:
            emitted.add(tensor)
            ordered.extend(by_source[tensor])

    for tensor in [i.name for i in graph.graph.input] + [i.name for i in graph.graph.initializer]:
        emit(tensor)
    for node in list(graph.graph.node):
        ordered.append(node)
        for out in node.output:
            emit(out)
    ordered.extend(by_source.get("", []))
    del graph.graph.node[:]
    graph.graph.node.extend(ordered)


def layer_points(quantized: RKNNModel, points: Sequence[str]) -> dict[str, list[str]]:
    """NPU layer name → its quantization points, in graph order (a weight belongs to the layer of the
    node reading it, a graph input to its first reader's layer)."""
    graph = quantized.golden.graph
    layer_of: dict[str, str] = {}
    for group in npu_layers.layer_groups(graph):
        for node in group.nodes:
            for tensor in list(node.output):
                layer_of.setdefault(tensor, group.name)
            for tensor in node.input:
                if tensor not in layer_of and tensor not in {o for n in group.nodes for o in n.output}:
                    layer_of.setdefault(f"read:{tensor}", group.name)
    groups: dict[str, list[str]] = {}
    for point in points:
        layer = layer_of.get(point) or layer_of.get(f"read:{point}")
        if layer:
            groups.setdefault(layer, []).append(point)
    return groups


def output_sensitivity(quantized: RKNNModel, samples: Sequence[Sequence[np.ndarray]],
                       custom_ops: CustomOpRegistry | None = None,
                       crop_side: int | None = None) -> list[tuple[str, float]]:
    """(layer name, output cosine drop with only that layer's points quantized), largest drop first;
    ties keep graph order. Samples are in graph layout (as the calibration samples are).

    ``crop_side``: score on a crop of each image input no wider than this (a multiple of 32, the
    busiest window of the picture) — a run per layer costs a quarter at half the side, and a
    quantization step does the same damage per pixel. A graph that cannot run on the crop (fixed
    reshapes, a fully connected head) is scored on the full samples."""
    runner, gates, names, samples = _gated_runner(quantized, samples, custom_ops, crop_side)
    off = gate_feeds(gates)
    feeds = [dict(zip(names, sample)) for sample in samples]
    golden = _stacked([runner.run({**f, **off}) for f in feeds])
    drops = []
    for order, (layer, points) in enumerate(layer_points(quantized, list(gates)).items()):
        on = gate_feeds(gates, points)
        outputs = _stacked([runner.run({**f, **on}) for f in feeds])
        drops.append((layer, float(np.mean([1.0 - _cosine(g, o) for g, o in zip(golden, outputs)])), order))
    drops.sort(key=lambda item: (-item[1], item[2]))
    return [(layer, drop) for layer, drop, _ in drops]


def context_gains(quantized: RKNNModel, samples: Sequence[Sequence[np.ndarray]], raised: Collection[str],
                  custom_ops: CustomOpRegistry | None = None, crop_side: int | None = None) -> dict[str, float]:
    """Layer → output cosine regained by raising it too, with every layer quantized except those
    in ``raised``: what a layer is worth once the big errors are gone, which its drop alone (from
    float) misjudges — small errors compound. Layers in ``raised`` are not scored."""
    runner, gates, names, samples = _gated_runner(quantized, samples, custom_ops, crop_side)
    feeds = [dict(zip(names, sample)) for sample in samples]
    golden = _stacked([runner.run({**f, **gate_feeds(gates)}) for f in feeds])
    points = layer_points(quantized, list(gates))
    kept_float = {p for layer in raised for p in points.get(layer, [])}

    def score(floats: Collection[str]) -> float:
        on = gate_feeds(gates, set(gates) - set(floats))
        outputs = _stacked([runner.run({**f, **on}) for f in feeds])
        return float(np.mean([_cosine(g, o) for g, o in zip(golden, outputs)]))

    base = score(kept_float)
    return {layer: score(kept_float | set(layer_pts)) - base for layer, layer_pts in points.items()
            if layer not in raised}


def _gated_runner(quantized: RKNNModel, samples: Sequence[Sequence[np.ndarray]],
                  custom_ops: CustomOpRegistry | None, crop_side: int | None):
    """The gated graph's session, its gates, the input names and the samples it runs on (cropped
    when ``crop_side`` allows, see :func:`output_sensitivity`)."""
    graph, gates = gated_graph(quantized)
    names = [spec.name for spec in quantized.inputs]
    if crop_side:
        cropped = [[_busiest_crop(x, crop_side) for x in sample] for sample in samples]
        if any(c.shape != x.shape for sample, crops in zip(samples, cropped) for x, c in zip(sample, crops)):
            try:
                small = _resized(graph, names, cropped[0])
                runner = GraphRunner(small, custom_ops)
                runner.run({**dict(zip(names, cropped[0])), **gate_feeds(gates)})
                return runner, gates, names, cropped
            except Exception:   # noqa: BLE001 - any failure: the graph needs its full shape
                pass
    return GraphRunner(graph, custom_ops), gates, names, samples


def _spatial_axes(x: np.ndarray) -> tuple[int, int] | None:
    """(height, width) axes of an image batch in NCHW or NHWC (channels: at most 4), else None."""
    if x.ndim != 4:
        return None
    if x.shape[1] <= 4 < min(x.shape[2], x.shape[3]):
        return 2, 3
    if x.shape[3] <= 4 < min(x.shape[1], x.shape[2]):
        return 1, 2
    return None


def _busiest_crop(x: np.ndarray, side: int) -> np.ndarray:
    """The window of at most ``side``² (multiples of 32) with the largest spread of values among
    the corners and the centre; ``x`` itself when it is not an image or already small."""
    axes = _spatial_axes(x)
    if axes is None:
        return x
    h_axis, w_axis = axes
    height, width = x.shape[h_axis], x.shape[w_axis]
    window_side = side // 32 * 32 if side >= 32 else side
    ch, cw = (size if size <= side else window_side for size in (height, width))
    if (ch, cw) == (height, width):
        return x
    corners = {(0, 0), (0, width - cw), (height - ch, 0), (height - ch, width - cw),
               ((height - ch) // 2, (width - cw) // 2)}

    def window(top: int, left: int) -> np.ndarray:
        index = [slice(None)] * 4
        index[h_axis], index[w_axis] = slice(top, top + ch), slice(left, left + cw)
        return x[tuple(index)]

    top, left = max(sorted(corners), key=lambda c: float(np.std(window(*c))))
    return np.ascontiguousarray(window(top, left))


def _resized(graph: onnx.ModelProto, names: Sequence[str], sample: Sequence[np.ndarray]) -> onnx.ModelProto:
    """``graph`` with its inputs declared at the shapes of ``sample`` and free output shapes."""
    small = onnx.ModelProto()
    small.CopyFrom(graph)
    shapes = dict(zip(names, (x.shape for x in sample)))
    for value in small.graph.input:
        if value.name in shapes:
            dims = value.type.tensor_type.shape.dim
            for dim, size in zip(dims, shapes[value.name]):
                dim.ClearField("dim_param")
                dim.dim_value = int(size)
    for value in small.graph.output:
        value.type.tensor_type.ClearField("shape")
    del small.graph.value_info[:]
    return small


def _stacked(results: list[list[np.ndarray]]) -> list[np.ndarray]:
    """Each output's values over all samples as one vector (a one-value output has no per-sample cosine)."""
    return [np.concatenate([np.ravel(r[k]) for r in results]) for k in range(len(results[0]))]


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    # elementwise sums, not BLAS dot/norm: on a loaded machine the BLAS threads of a 100k-value
    # dot cost as much as the network run they score
    a, b = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
    norm = np.sqrt(np.sum(a * a) * np.sum(b * b))
    return float(np.sum(a * b) / norm) if norm > 0 else float(np.array_equal(a, b))
