"""Run a built model on onnxruntime the way the NPU would, with the toolkit's input conventions.

Inputs: 4-D inputs arrive NHWC by default (``data_format``), are converted to the model's layout,
cast to the graph's dtype and fed raw (the normalisation is part of the graph). Outputs come back
float32, in the original model's layout. ``rknn_batch_size=N`` models take N stacked frames.
"""
from __future__ import annotations

import functools
import re
from typing import Any, Sequence

import numpy as np
import onnx
import onnxruntime as ort

from openrknn.errors import InferenceInputError, RuntimeStateError
from openrknn.graph.rknn_model import LAYOUT_NCHW, LAYOUT_NHWC, RKNNModel, TensorSpec
from openrknn.graph.custom_ops import CustomOpRegistry
from openrknn.sim.fp16 import lower_fp16
from openrknn.sim.partitioned import PartitionedRunner, has_custom_ops

_NCHW_TO_NHWC = (0, 2, 3, 1)
_NHWC_TO_NCHW = (0, 3, 1, 2)


def lower(model: RKNNModel) -> onnx.ModelProto:
    """The executable ONNX graph for ``model``: fp16-rounded float layers, or the quantized lowering."""
    if model.is_quantized:
        from openrknn.sim.quantized import lower_quantized   # quantization stage owns this lowering
        return lower_quantized(model)
    if model.float_dtype == "float32":
        return model.graph
    cpu_tensors = set()
    for node in model.graph.graph.node:
        if (model.metadata.get("op_target") or {}).get(node.name) == "cpu":
            cpu_tensors.update(node.output)
    return lower_fp16(model.graph, exclude=cpu_tensors)


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
    return DISABLED_OPTIMIZERS + (EXACT_SUM_OPTIMIZERS if quantized else [])


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


class Simulator:
    """An initialised simulator runtime for one model (``threads``: onnxruntime intra-op threads, 0 = all cores)."""

    def __init__(self, model: RKNNModel, custom_ops: CustomOpRegistry | None = None, threads: int = 0) -> None:
        self.model = model
        self.custom_ops = custom_ops
        self.session = GraphRunner(lower(model), custom_ops, threads)
        self._pass_through_session: GraphRunner | None = None
        self._pass_through_feeds: dict[str, str] = {}

    def run(self, inputs: Sequence[Any], data_format: Sequence[str] | str | None = None,
            inputs_pass_through: Sequence[int] | None = None) -> list[np.ndarray]:
        """Run one inference; see ``RKNN.inference``."""
        specs = self.model.inputs
        inputs, formats, pass_through = check_inference_args([s.name for s in specs], inputs, data_format,
                                                             inputs_pass_through)
        feeds = self._prepare_all(specs, inputs, formats)
        session = self._session_for(pass_through)
        batch = max(1, self.model.rknn_batch_size)
        names = [self._feed_name(spec, bool(pass_through[i])) for i, spec in enumerate(specs)]
        if batch == 1:
            outputs = session.run(dict(zip(names, feeds)))
        else:
            frames = [session.run({n: f[b:b + 1] for n, f in zip(names, feeds)}) for b in range(batch)]
            outputs = [np.concatenate([fr[k] for fr in frames], axis=0) for k in range(len(frames[0]))]
        return [np.asarray(o, dtype=np.float32) for o in outputs]

    def _prepare_all(self, specs: list[TensorSpec], inputs: Sequence[Any], formats: list[str]) -> list[np.ndarray]:
        sets = self.model.metadata.get("dynamic_input")
        if not sets:
            return [self._prepare(i, s, v, formats[i], tuple(s.shape)) for i, (s, v) in enumerate(zip(specs, inputs))]
        batch = max(1, self.model.rknn_batch_size)
        for shape_set in sets:   # shape sets pair up by index across inputs (seed 002 §5.4)
            try:
                return [self._prepare(i, s, v, formats[i], tuple([shape[0] * batch] + list(shape[1:])))
                        for i, (s, v, shape) in enumerate(zip(specs, inputs, shape_set))]
            except InferenceInputError:
                continue
        given = [tuple(np.asarray(v).shape) for v in inputs]
        raise InferenceInputError(f"input shapes {given} match none of the dynamic_input shape sets {sets} "
                                  f"({', '.join(f.upper() for f in formats)} layout)")

    def _prepare(self, index: int, spec: TensorSpec, value: Any, data_format: str,
                 expected: tuple[int, ...]) -> np.ndarray:
        try:
            array = np.asarray(value)
        except Exception as e:
            raise InferenceInputError(f"input {index} ('{spec.name}') is not an array: {e}") from e
        if array.dtype == object or array.dtype.kind in "USV":
            raise InferenceInputError(f"input {index} ('{spec.name}') has dtype {array.dtype}; give a numeric ndarray")
        if array.ndim == len(expected) - 1 and len(expected) == 4 and expected[0] == 1:
            array = array[np.newaxis]          # an HxWxC image without its batch axis
        if array.ndim == 4 and len(expected) == 4:
            array = _to_layout(array, data_format, spec.layout)
        if tuple(array.shape) != expected:
            shown = expected
            if len(expected) == 4 and spec.layout == LAYOUT_NCHW and data_format == "nhwc":
                shown = tuple(expected[i] for i in _NCHW_TO_NHWC)
            raise InferenceInputError(f"input {index} ('{spec.name}') has shape {tuple(np.asarray(value).shape)} but the "
                                      f"model expects {shown} ({data_format.upper() if len(expected) == 4 else 'as is'})")
        target = self.session.input_types.get(spec.name, np.dtype(np.float32))
        if not np.can_cast(array.dtype, target, casting="unsafe"):
            raise InferenceInputError(f"input {index} ('{spec.name}') dtype {array.dtype} cannot become {target}")
        return np.ascontiguousarray(array.astype(target, copy=False))

    def _feed_name(self, spec: TensorSpec, pass_through: bool) -> str:
        if not pass_through:
            return spec.name
        return self._pass_through_feeds.get(spec.name, spec.name)

    def _session_for(self, pass_through: list[int]) -> GraphRunner:
        if not any(pass_through):
            return self.session
        if self._pass_through_session is None:
            graph = lower(self.model)
            self._pass_through_feeds = _pass_through_inputs(graph, self.model)
            self._pass_through_session = GraphRunner(_without_preprocess(graph, self._pass_through_feeds),
                                                     self.custom_ops)
        return self._pass_through_session


def check_inference_args(names: list[str], inputs: Any, data_format: Sequence[str] | str | None,
                         inputs_pass_through: Sequence[int] | None) -> tuple[list[Any], list[str], list[int]]:
    """The ``inference()`` lists checked against the model's inputs: (inputs, 'nhwc'/'nchw' each, flags)."""
    if not isinstance(inputs, (list, tuple)):
        inputs = [inputs]
    if len(inputs) != len(names):
        raise InferenceInputError(f"the model has {len(names)} input(s) {names} but {len(inputs)} were given")
    pass_through = list(inputs_pass_through or [0] * len(names))
    if len(pass_through) != len(names):
        raise InferenceInputError(f"inputs_pass_through has {len(pass_through)} flag(s) for {len(names)} input(s)")
    return list(inputs), _formats(data_format, len(names)), pass_through


def _formats(data_format: Sequence[str] | str | None, count: int) -> list[str]:
    if data_format is None:
        return ["nhwc"] * count
    items = [data_format] * count if isinstance(data_format, str) else list(data_format)
    if len(items) != count:
        raise InferenceInputError(f"data_format lists {len(items)} layout(s) for {count} input(s); list all inputs")
    out = []
    for item in items:
        low = str(item).lower() if item is not None else "nhwc"
        if low not in ("nhwc", "nchw"):
            raise InferenceInputError(f"data_format '{item}' is not valid; use 'nhwc' or 'nchw'")
        out.append(low)
    return out


def _to_layout(array: np.ndarray, data_format: str, model_layout: str) -> np.ndarray:
    if model_layout == LAYOUT_NCHW and data_format == "nhwc":
        return array.transpose(_NHWC_TO_NCHW)
    if model_layout == LAYOUT_NHWC and data_format == "nchw":
        return array.transpose(_NCHW_TO_NHWC)
    return array


def _elem_np_type(value: onnx.ValueInfoProto) -> np.dtype:
    elem = value.type.tensor_type.elem_type
    return np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem)) if elem else np.dtype(np.float32)


def _pass_through_inputs(graph: onnx.ModelProto, model: RKNNModel) -> dict[str, str]:
    """Input name → the tensor of the executable graph a pass-through input feeds: the normalised input.

    The quantized lowering renames that tensor's float value ``<name>__raw`` (its quantized form
    keeps the name's ``__q``), so the float tensor before the input quantization is fed there.
    """
    produced = {o for node in graph.graph.node for o in node.output} | {v.name for v in graph.graph.input}
    feeds = {}
    for spec in model.inputs:
        name = spec.name
        for pre in model.preprocess:
            if pre.input_name == spec.name:
                name = pre.normalized_name
        if name not in produced and f"{name}__raw" in produced:
            name = f"{name}__raw"
        feeds[spec.name] = name
    return feeds


def _without_preprocess(graph: onnx.ModelProto, feeds: dict[str, str]) -> onnx.ModelProto:
    """The executable graph fed after normalisation (``inputs_pass_through``)."""
    from onnx.utils import Extractor

    graph = onnx.shape_inference.infer_shapes(graph)
    return Extractor(graph).extract_model(list(feeds.values()), [o.name for o in graph.graph.output])
