"""Per-layer accuracy of the simulator against the float ("golden") model.

For every layer output *t* (in graph order):

* ``entire``: the golden model and the simulator both run from the same inputs; errors of earlier
  layers accumulate into *t*.
* ``single``: the layer alone runs on the simulator with the **golden** values of its inputs, so
  only its own error shows.

Metrics, on the flattened float64 tensors ``g`` (golden) and ``s`` (simulator)::

    cos = Σ g·s / (‖g‖·‖s‖)        (1.0 = identical; two all-zero tensors count as 1.0)
    euc = ‖g − s‖₂
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import helper
from tqdm import tqdm

from openrknn import log
from openrknn.errors import RuntimeStateError
from openrknn.graph import npu_layers
from openrknn.graph.custom_ops import CustomOpRegistry
from openrknn.graph.rknn_model import RKNNModel
from openrknn.graph.rknn_model import RKNNModel as Record
from openrknn.graph.runner import GraphRunner
from openrknn.sim.quantized import (INT_SUFFIX, SCALE_SUFFIX, ZERO_POINT_SUFFIX, dequantized_form, float16_form,
                                     int_form, lower_quantized, tensor_of_form)
from openrknn.sim.session import lower


@dataclass
class LayerError:
    """One row of the analysis: a layer's output tensor and its errors."""

    op_type: str
    tensor: str
    entire_cos: float | None = None
    entire_euc: float | None = None
    single_cos: float | None = None
    single_euc: float | None = None

    def to_dict(self) -> dict[str, object]:
        return {"op_type": self.op_type, "tensor": self.tensor, "entire_cos": self.entire_cos,
                "entire_euc": self.entire_euc, "single_cos": self.single_cos, "single_euc": self.single_euc}


# A layer is lopsided when its ``entire`` cosine is this far below its ``single`` one while every
# input it reads is still this accurate (``entire``): the layer alone is right, and so is what it
# is given, yet together they are wrong — the pattern of quantization parameters made for another
# consumer (a shared bias, a requantization meant for a different input scale).
LOPSIDED_DROP = 0.01
LOPSIDED_INPUTS = 0.999


@dataclass
class AnalysisResult:
    rows: list[LayerError] = field(default_factory=list)
    golden: dict[str, np.ndarray] = field(default_factory=dict)
    simulator: dict[str, np.ndarray] = field(default_factory=dict)
    layer_inputs: dict[str, list[str]] = field(default_factory=dict)   # tensor -> tensors its node reads

    def first_lopsided(self) -> tuple[LayerError, list[LayerError]] | None:
        """The first row (graph order) whose ``entire`` cosine is > LOPSIDED_DROP below its ``single``
        one while its inputs' ``entire`` cosines are ≥ LOPSIDED_INPUTS, with those input rows.

        Inputs fused into their consumer (no row value) are looked through to what they read.
        """
        by_tensor = {r.tensor: r for r in self.rows}
        for row in self.rows:
            if row.op_type == "Input" or row.entire_cos is None or row.single_cos is None:
                continue
            if not (np.isfinite(row.entire_cos) and np.isfinite(row.single_cos)):
                continue
            if row.entire_cos >= row.single_cos - LOPSIDED_DROP:
                continue
            inputs = self._measured_inputs(row.tensor, by_tensor)
            if inputs and all(r.entire_cos is not None and r.entire_cos >= LOPSIDED_INPUTS for r in inputs):
                return row, inputs
        return None

    def _measured_inputs(self, tensor: str, by_tensor: dict[str, LayerError]) -> list[LayerError]:
        found, stack, seen = [], list(self.layer_inputs.get(tensor, [])), set()
        while stack:
            name = stack.pop()
            if name in seen:
                continue
            seen.add(name)
            row = by_tensor.get(name)
            if row is not None and row.entire_cos is not None:
                found.append(row)
            elif row is not None or name in self.layer_inputs:   # fused / unmeasured: look through it
                stack.extend(self.layer_inputs.get(name, []))
        return found

    def worst(self, count: int = 5) -> list[LayerError]:
        """The ``count`` layers with the lowest ``single`` cosine (NaN, e.g. an fp16 overflow, first)."""
        scored = [r for r in self.rows if r.single_cos is not None and r.op_type != "Input"]
        return sorted(scored, key=lambda r: -2.0 if np.isnan(r.single_cos) else r.single_cos)[:count]


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    # elementwise sums, not BLAS dot/norm: on a loaded machine the BLAS threads of a 100k-value dot
    # cost as much as the network run they score (auto_hybrid compares 230k-value maps per trial)
    a = np.asarray(a, np.float64).ravel()
    b = np.asarray(b, np.float64).ravel()
    na, nb = np.sqrt(np.sum(a * a)), np.sqrt(np.sum(b * b))
    if na == 0 and nb == 0:
        return 1.0
    if not np.isfinite(na) or not np.isfinite(nb):
        return float("nan")
    if na == 0 or nb == 0:
        return 0.0
    return float(np.clip(np.sum(a * b) / (na * nb), -1.0, 1.0))


def euclidean(a: np.ndarray, b: np.ndarray) -> float:
    difference = np.asarray(a, np.float64).ravel() - np.asarray(b, np.float64).ravel()
    return float(np.sqrt(np.sum(difference * difference)))


def analyse(model: RKNNModel, feeds: dict[str, np.ndarray],
            custom_ops: CustomOpRegistry | None = None) -> AnalysisResult:
    """Run golden and simulator on ``feeds`` (graph inputs, raw values) and measure every layer.

    ``custom_ops`` runs the model's custom-op layers (in Python, float32, in both runs).

    A tensor the built model fused into its consumer (a Conv output whose Relu runs inside the
    Conv) has no simulator value of its own: its row stays blank, and the consumer's ``single``
    error runs the fused pair together, as the NPU does.

    Example:
        >>> # result = analyse(rknn_model, {"x": np.zeros((1, 3, 224, 224), np.float32)})
        >>> # result.worst(1)[0].tensor   # the layer that loses most accuracy on its own
    """
    if model.golden is None:
        raise RuntimeStateError("accuracy_analysis needs the float (golden) model, which this model does not "
                                "carry: load the source model and build it instead of load_rknn")
    log.info("accuracy_analysis: running the float model and the simulator (entire), then each layer alone (single)")
    golden_graph = onnx.shape_inference.infer_shapes(model.golden)
    golden = _run_all(golden_graph, feeds, custom_ops)
    simulated = _run_all(_expose_quantized(_lowered(model)), feeds, custom_ops)
    result = AnalysisResult(golden=golden)
    for name in list(feeds):
        result.rows.append(_row("Input", name, golden.get(name), _sim_value(simulated, name)))
    fused = npu_layers.internal_tensors(golden_graph.graph)   # the layer record: computed, never stored
    for node in golden_graph.graph.node:
        for out in node.output:
            result.layer_inputs[out] = [i for i in node.input if i in golden and _is_float(golden[i])]
            if out and out in golden and _is_float(golden[out]):
                sim_value = None if out in fused else _sim_value(simulated, out)
                if sim_value is not None:
                    result.simulator[out] = sim_value
                result.rows.append(_row(node.op_type, out, golden[out], sim_value))
    _single_layer_errors(model, golden_graph, golden, result, custom_ops)
    return result


def _lowered(model: RKNNModel) -> onnx.ModelProto:
    """The simulator's graph, with every integer tensor also dequantized for comparison."""
    if model.is_quantized:
        return lower_quantized(model, all_float=True)
    return lower(model)


def _expose_quantized(graph: onnx.ModelProto) -> onnx.ModelProto:
    """Add a DequantizeLinear for every quantized tensor ``t__q`` of the lowered graph (with the
    lowering's own ``t__s``/``t__z``)."""
    inits = {i.name: i for i in graph.graph.initializer}
    produced = {o for n in graph.graph.node for o in n.output}
    extra = []
    integer = (tensor_of_form(o, INT_SUFFIX) for o in produced)
    for name in sorted(t for t in integer if t is not None):
        scale, zero = inits.get(name + SCALE_SUFFIX), inits.get(name + ZERO_POINT_SUFFIX)
        if scale is None or zero is None or dequantized_form(name) in produced:
            continue
        axis = {"axis": 1} if len(scale.dims) and scale.dims[0] > 1 else {}
        extra.append(helper.make_node("DequantizeLinear", [int_form(name), scale.name, zero.name],
                                      [dequantized_form(name)], name=f"{name}__analysis_dq", **axis))
    graph.graph.node.extend(extra)
    return graph


def _row(op_type: str, name: str, gold: np.ndarray | None, sim: np.ndarray | None) -> LayerError:
    row = LayerError(op_type=op_type, tensor=name)
    if gold is not None and sim is not None and gold.shape == sim.shape:
        row.entire_cos, row.entire_euc = cosine(gold, sim), euclidean(gold, sim)
        if op_type == "Input":
            row.single_cos, row.single_euc = row.entire_cos, row.entire_euc
    return row


def _is_float(array: np.ndarray) -> bool:
    return isinstance(array, np.ndarray) and array.dtype.kind == "f"


def _sim_value(values: dict[str, np.ndarray], name: str) -> np.ndarray | None:
    """The simulator's value of a structural tensor (the rounded/dequantized copy when there is one)."""
    for candidate in (float16_form(name), dequantized_form(name), name):
        if candidate in values:
            return values[candidate]
    return None


def _run_all(model: onnx.ModelProto, feeds: dict[str, np.ndarray],
             custom_ops: CustomOpRegistry | None = None) -> dict[str, np.ndarray]:
    """Every tensor of the top-level graph, by name (inputs included)."""
    graph = onnx.ModelProto()
    graph.CopyFrom(model)
    known = {o.name for o in graph.graph.output}
    produced = [o for node in graph.graph.node for o in node.output if o and o not in known]
    for name in produced:
        graph.graph.output.append(helper.make_empty_tensor_value_info(name))
    session = GraphRunner(graph, custom_ops)
    values = session.run({k: v for k, v in feeds.items() if k in session.input_types})
    out = dict(zip(session.output_names, values))
    out.update(feeds)
    return out


def _single_layer_errors(model: RKNNModel, golden_graph: onnx.ModelProto, golden: dict[str, np.ndarray],
                         result: AnalysisResult, custom_ops: CustomOpRegistry | None = None) -> None:
    """Each layer of the record (``openrknn.graph.npu_layers``) alone, from golden inputs: a fused
    activation runs with the Conv it is fused into, as the NPU does."""
    rows = {r.tensor: r for r in result.rows}
    types = {v.name: v for v in list(golden_graph.graph.value_info) + list(golden_graph.graph.input)
             + list(golden_graph.graph.output)}
    # constants as the built model stores them (quantized weights), else the golden float ones
    inits = {i.name: i for i in golden_graph.graph.initializer}
    inits.update({i.name: i for i in model.graph.graph.initializer if i.name in inits})
    for group in tqdm(npu_layers.layer_groups(golden_graph.graph), desc="I accuracy_analysis: single layers",
                      unit="layer", disable=None, leave=False):
        outs = [o for o in group.outputs if o in rows and o in result.simulator and _is_float(golden[o])]
        if not outs or any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
                           for n in group.nodes for a in n.attribute):
            continue
        try:
            values = _run_single(model, golden_graph, group.nodes, outs, types, inits, golden, custom_ops)
        except Exception as e:  # a layer that cannot run alone keeps a blank 'single' cell
            log.debug(f"accuracy_analysis: layer '{group.name}' not run alone: {e}")
            continue
        for out in outs:
            sim = _sim_value(values, out)
            if sim is not None and sim.shape == golden[out].shape:
                rows[out].single_cos, rows[out].single_euc = cosine(golden[out], sim), euclidean(golden[out], sim)


def _run_single(model: RKNNModel, golden_graph: onnx.ModelProto, nodes: list[onnx.NodeProto], outputs: list[str],
                types, inits, golden: dict[str, np.ndarray],
                custom_ops: CustomOpRegistry | None = None) -> dict[str, np.ndarray]:
    """Lower and run one layer (its nodes) alone, its inputs being golden values."""
    inside = {o for n in nodes for o in n.output}
    used = list(dict.fromkeys(i for n in nodes for i in n.input if i))
    feed_names = [i for i in used if i not in inits and i not in inside]
    graph = helper.make_graph(
        list(nodes), f"single_{nodes[-1].name}",
        [types[i] if i in types else helper.make_tensor_value_info(i, onnx.TensorProto.FLOAT, None) for i in feed_names],
        [types[o] if o in types else helper.make_empty_tensor_value_info(o) for o in outputs],
        [inits[i] for i in used if i in inits])
    single = helper.make_model(graph, opset_imports=golden_graph.opset_import, ir_version=golden_graph.ir_version)
    single = onnx.shape_inference.infer_shapes(single)
    record = Record(graph=single, inputs=[], outputs=[], float_dtype=model.float_dtype,
                    quantized_dtype=model.quantized_dtype, tensor_dtypes=model.tensor_dtypes,
                    quant_params=model.quant_params, metadata=model.metadata)
    return _run_all(_expose_quantized(_lowered(record)), {i: golden[i] for i in feed_names}, custom_ops)
