"""Run a built model on onnxruntime the way the NPU would, with the toolkit's input conventions.

Inputs: 4-D inputs arrive NHWC by default (``data_format``), are converted to the model's layout,
cast to the graph's dtype and fed raw (the normalisation is part of the graph). Outputs come back
float32, in the original model's layout. ``rknn_batch_size=N`` models take N stacked frames.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import onnx
from onnx.utils import Extractor

from openrknn.errors import InferenceInputError
from openrknn.graph import npu_layers
from openrknn.graph.rknn_model import LAYOUT_NCHW, LAYOUT_NHWC, RKNNModel, TensorSpec
from openrknn.graph.custom_ops import CustomOpRegistry
# the runner moved below quant/ and sim/; re-exported for code that imports it from here
from openrknn.graph.runner import (DISABLED_OPTIMIZERS, EXACT_SUM_OPTIMIZERS, GraphRunner,  # noqa: F401
                                   disabled_optimizers, make_session)
from openrknn.sim.fp16 import lower_fp16
from openrknn.sim.quantized import lower_quantized

_NCHW_TO_NHWC = (0, 2, 3, 1)
_NHWC_TO_NCHW = (0, 3, 1, 2)


def lower(model: RKNNModel) -> onnx.ModelProto:
    """The executable ONNX graph for ``model``: fp16-rounded float layers, or the quantized lowering."""
    if model.is_quantized:
        return lower_quantized(model)
    if model.float_dtype == "float32":
        return model.graph
    # the layer record says which layers run on the CPU (op_target): their outputs stay float32
    cpu_tensors = {t for record in npu_layers.model_records(model) if record.target == "CPU" for t in record.stored}
    return lower_fp16(model.graph, exclude=cpu_tensors)


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
        # one copy that transposes and casts together (astype on the transposed view kept its strides,
        # so a second copy made it contiguous: 2.2 ms of a 480×480 picture instead of 0.16)
        return np.ascontiguousarray(array, dtype=target)

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
    graph = onnx.shape_inference.infer_shapes(graph)
    return Extractor(graph).extract_model(list(feeds.values()), [o.name for o in graph.graph.output])
