"""Run an ONNX graph on onnxruntime with the values kept: the one runner every stage uses.

``make_session`` is an onnxruntime CPU session with the optimizers that would change values switched
off, retried under the runtime's IR version when a newer onnx stamped the graph. ``GraphRunner`` runs
one graph, or — when it holds user custom ops — ``PartitionedRunner``'s onnxruntime segments with the
custom ops run in numpy between them (they stay float32, as the guide says they run on the CPU).
Calibration (``quant/``), the simulator (``sim/``), analysis and evaluation all run graphs through here.
"""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper

from openrknn.errors import RuntimeStateError
from openrknn.graph.custom_ops import CUSTOM_DOMAIN, CustomOpRegistry


# onnxruntime optimizers that would change the values of our graphs:
# - WeightBiasQuantization rewrites "DequantizeLinear → Conv/MatMul with float weights →
#   QuantizeLinear" by quantizing those weights itself (to 8 bits, per tensor): our float-weight
#   layers between integer tensors (16-bit layers, float fallbacks) must run with exactly the weights
#   the model stores.
# - QDQSelectorActionTransformer fuses "DequantizeLinear → op → QuantizeLinear" into QLinearAdd,
#   QLinearMul, QLinearAveragePool, QLinearSigmoid, ... whose rounding is their own (and per CPU
#   kernel), not the documented float32 dequantize → op → quantize; on x86 it also turns int8
#   Conv/MatMul chains into u8 × s8 kernels that saturate on AVX2 without VNNI.
DISABLED_OPTIMIZERS = ["WeightBiasQuantization", "QDQSelectorActionTransformer"]
# In quantized graphs also: ConvMulFusion / ConvAddFusion / MatMulScaleFusion fold a following
# constant Mul/Add into the Conv/MatMul weights, so the exact integer sums of the lowering (a float32
# Conv on integer weights, then the scale) would become rounded float sums, different per CPU kernel.
# (Float graphs keep them: they are ~20 % faster there and nothing exact depends on them.)
EXACT_SUM_OPTIMIZERS = ["ConvMulFusion", "ConvAddFusion", "MatMulScaleFusion"]
_INTEGER_OPS = frozenset({"QuantizeLinear", "DequantizeLinear", "QLinearConv", "ConvInteger", "MatMulInteger"})


def make_session(graph: onnx.ModelProto, threads: int = 0) -> ort.InferenceSession:
    """An onnxruntime CPU session for ``graph`` with the optimizations that keep its values.

    Raises:
        RuntimeStateError: onnxruntime refuses the graph.
    """
    options = ort.SessionOptions()
    options.log_severity_level = 3
    # (session.disable_quant_qdq would drop onnxruntime's DequantizeLinear copies — 17-59 fewer nodes
    # on the OCR models, 4-7 % faster — but in onnxruntime 1.32 its layout transform then hands a
    # graph output that a DequantizeLinear shares with an NHWC QLinearConv back as NHWC: not used.)
    if threads:
        options.intra_op_num_threads = threads
    try:
        return _session(graph, options)
    except Exception as e:  # onnxruntime raises its own exception classes
        limit = re.search(r"max supported IR version: (\d+)", str(e))
        if limit is None or int(limit.group(1)) >= graph.ir_version:
            raise RuntimeStateError(f"the simulator cannot run this model: {e}") from e
    # A newer onnx than the installed onnxruntime stamps graphs with an IR version that runtime does
    # not know; the graphs we run use nothing of the newer IR, so they run under the older number.
    older = onnx.ModelProto()
    older.CopyFrom(graph)
    older.ir_version = int(limit.group(1))
    try:
        return _session(older, options)
    except Exception as e:  # onnxruntime raises its own exception classes
        raise RuntimeStateError(f"the simulator cannot run this model: {e}") from e


def disabled_optimizers(graph: onnx.ModelProto) -> list[str]:
    """The onnxruntime optimizers a simulator session of ``graph`` runs without."""
    quantized = any(node.op_type in _INTEGER_OPS for node in graph.graph.node)
    return DISABLED_OPTIMIZERS + (EXACT_SUM_OPTIMIZERS if quantized else []) + _conv_add_fusion(graph)


def _conv_add_fusion(graph: onnx.ModelProto) -> list[str]:
    """onnxruntime 1.32's ConvAddActivationFusion can drop a Conv output that is also a graph output
    when an Add of two Conv outputs reads it (the partial sums of a Conv split over its input
    channels, graph/passes/wide_convs.py, with a calibration output on the first tile): off then."""
    nodes = graph.graph.node
    conv_out = {n.output[0] for n in nodes if n.op_type == "Conv" and n.output}
    outputs = {o.name for o in graph.graph.output}
    risky = any(n.op_type == "Add" and len(n.input) == 2 and all(i in conv_out for i in n.input)
                and any(i in outputs for i in n.input) for n in nodes)
    return ["ConvAddActivationFusion"] if risky else []


def _session(graph: onnx.ModelProto, options: ort.SessionOptions) -> ort.InferenceSession:
    # onnxruntime ignores optimizer names it does not have (versions before that optimizer)
    return ort.InferenceSession(graph.SerializeToString(), options, providers=["CPUExecutionProvider"],
                                disabled_optimizers=disabled_optimizers(graph))


class GraphRunner:
    """One executable graph: a plain onnxruntime session, or segments around custom ops.

    ``run(feeds)`` returns the values of ``output_names`` (the graph outputs, in order).
    """

    def __init__(self, graph: onnx.ModelProto, custom_ops: CustomOpRegistry | None = None, threads: int = 0) -> None:
        self.input_types = {v.name: _elem_np_type(v) for v in graph.graph.input}
        self.output_names = [v.name for v in graph.graph.output]
        if has_custom_ops(graph):
            sessions = functools.partial(make_session, threads=threads)
            self._partitioned: PartitionedRunner | None = PartitionedRunner(graph, custom_ops, sessions)
            self._session = None
        else:
            self._partitioned = None
            self._session = make_session(graph, threads)

    def run(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        if self._partitioned is not None:
            return self._partitioned.run(feeds)
        try:
            return self._session.run(None, feeds)
        except Exception as e:   # onnxruntime raises its own exception types for kernel failures
            raise RuntimeStateError(f"the simulator failed while running the model: {e}") from e


def _elem_np_type(value: onnx.ValueInfoProto) -> np.dtype:
    elem = value.type.tensor_type.elem_type
    return np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem)) if elem else np.dtype(np.float32)


# ---------------------------------------------------------------- graphs with custom ops
def has_custom_ops(model: onnx.ModelProto) -> bool:
    return any(node.domain == CUSTOM_DOMAIN for node in model.graph.node)


@dataclass
class _Segment:
    nodes: list[onnx.NodeProto]
    custom: Any = None                  # an instance of the user's class for a custom node
    session: Any = None
    inputs: list[str] | None = None
    outputs: list[str] | None = None


class PartitionedRunner:
    """Executes ``model`` (with custom-domain nodes) segment by segment."""

    def __init__(self, model: onnx.ModelProto, registry: CustomOpRegistry | None, make_session) -> None:
        registry = registry or CustomOpRegistry()
        self.graph_inputs = [v.name for v in model.graph.input]
        self.graph_outputs = [v.name for v in model.graph.output]
        inits = {i.name: i for i in model.graph.initializer}
        self.constants = {name: onnx.numpy_helper.to_array(t) for name, t in inits.items()}
        self.segments = self._split(model, registry)
        needed_later = self._needed_after(model)
        try:   # element types of the tensors that cross segments (integer ones included)
            typed = onnx.shape_inference.infer_shapes(model, strict_mode=False)
        except Exception:  # noqa: BLE001 - onnx raises several types; untyped tensors default to float
            typed = model
        for index, seg in enumerate(self.segments):
            if seg.custom is not None:
                continue
            produced = [o for n in seg.nodes for o in n.output if o]
            consumed = [i for n in seg.nodes for i in n.input if i and i not in produced]
            seg.inputs = [i for i in dict.fromkeys(consumed) if i not in inits]
            seg.outputs = [o for o in produced if o in needed_later[index] or o in self.graph_outputs]
            seg.session = make_session(self._segment_model(typed, seg, inits))

    def _split(self, model: onnx.ModelProto, registry: CustomOpRegistry) -> list[_Segment]:
        segments: list[_Segment] = []
        for node in model.graph.node:
            if node.domain == CUSTOM_DOMAIN:
                op_class = registry.get(node.op_type)
                if op_class is None:
                    raise RuntimeStateError(f"the model uses custom op '{node.op_type}' (layer '{node.name}'); register "
                                            "its class with reg_custom_op() before loading the model")
                segments.append(_Segment(nodes=[node], custom=op_class()))
            elif segments and segments[-1].custom is None:
                segments[-1].nodes.append(node)
            else:
                segments.append(_Segment(nodes=[node]))
        return segments

    def _needed_after(self, model: onnx.ModelProto) -> list[set[str]]:
        needed: list[set[str]] = []
        later: set[str] = set(self.graph_outputs)
        for seg in reversed(self.segments):
            needed.append(set(later))
            for node in seg.nodes:
                later.update(i for i in node.input if i)
        return list(reversed(needed))

    def _segment_model(self, model: onnx.ModelProto, seg: _Segment, inits: dict) -> onnx.ModelProto:
        types = {v.name: v for v in list(model.graph.value_info) + list(model.graph.input) + list(model.graph.output)
                 if v.type.HasField("tensor_type")}   # outputs added for inspection carry no type
        used_inits = [inits[i] for n in seg.nodes for i in n.input if i in inits]
        graph = helper.make_graph(
            seg.nodes, "segment",
            [types.get(i) or helper.make_tensor_value_info(i, onnx.TensorProto.FLOAT, None) for i in seg.inputs],
            [types.get(o) or helper.make_empty_tensor_value_info(o) for o in seg.outputs],
            list({t.name: t for t in used_inits}.values()))
        opsets = [o for o in model.opset_import if o.domain != CUSTOM_DOMAIN]
        return helper.make_model(graph, opset_imports=opsets, ir_version=model.ir_version)

    def run(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        values: dict[str, Any] = dict(self.constants)
        values.update(feeds)
        for seg in self.segments:
            if seg.custom is not None:
                node = seg.nodes[0]
                inputs = [values[i] for i in node.input if i]
                outputs = seg.custom.compute(node, inputs)
                for name, value in zip(node.output, outputs):
                    values[name] = np.asarray(value)
            else:
                result = seg.session.run(seg.outputs, {i: values[i] for i in seg.inputs})
                values.update(zip(seg.outputs, result))
        return [values[name] for name in self.graph_outputs]
