"""``load_tflite``: read a TensorFlow Lite flatbuffer and convert it to ONNX (opset 17).

The file is parsed with the ``tflite`` schema bindings (no TensorFlow needed); each builtin op
family has its converter module here (``conv``, ``pool``, ``elementwise``, ``shape``,
``spatial``, ``quant``, ``custom``), registered with :func:`~.context.converter`.

Layouts: the graph inputs and outputs keep the TFLite layout (NHWC for images) unless
``input_is_nchw`` is set, in which case 4-D inputs are declared NCHW. Inside, convolution-like
ops run in NCHW and transposes are only added where a consumer needs NHWC.

Fully quantized models (int8/uint8 activations) become an ONNX QDQ graph: integer weights
behind ``DequantizeLinear``, every quantized activation through ``QuantizeLinear →
DequantizeLinear`` with the TFLite scale and zero point (``r = s·(q − z)``), so build imports them
instead of calibrating. The same parameters are listed in ``SourceModel.quant_params``. Graph
inputs and outputs carry real values (feed raw integer data with ``mean_values = z`` and
``std_values = 1/s``). Weight-only quantized (hybrid) and float16 models become float32.

Example:
    >>> from openrknn.frontends.tflite import load_tflite
    >>> source = load_tflite("face_detection_short_range.tflite")    # doctest: +SKIP
    >>> source.input_layouts
    {'input': 'NHWC'}
"""
from __future__ import annotations

import os
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper

from openrknn import log
from openrknn.errors import ModelLoadError, UnsupportedOpError
from openrknn.frontends import FRONTEND_OPSET, SourceModel
from openrknn.frontends.tflite import conv, custom, elementwise, pool, quant, shape, spatial  # noqa: F401  (registration)
from openrknn.frontends.tflite.context import CONVERTERS, NATIVE, NCHW, Context
from openrknn.frontends.tflite.reader import read_tflite
from openrknn.graph.custom_ops import CUSTOM_DOMAIN, CustomOpRegistry

__all__ = ["load_tflite"]


def load_tflite(model: str, input_is_nchw: bool = False, custom_ops: CustomOpRegistry | None = None) -> SourceModel:
    """Load a ``.tflite`` model as documented for ``RKNN.load_tflite``.

    Args:
        model: path of the ``.tflite`` file.
        input_is_nchw: declare 4-D inputs as NCHW instead of the TFLite NHWC layout.
        custom_ops: registered custom ops; a TFLite CUSTOM op is accepted when its custom code is
            registered, refused otherwise.

    Returns:
        The ONNX model with ``input_layouts`` ('NHWC' or 'NCHW' per 4-D input) and, for
        quantized models, ``quant_params``.

    Raises:
        ModelLoadError: missing, foreign or damaged file, or a graph that cannot be converted.
        UnsupportedOpError: an op without converter, or an unregistered CUSTOM op.
    """
    try:
        import tflite  # noqa: F401  (the schema bindings the reader uses)
    except ImportError as e:
        raise ModelLoadError("load_tflite needs the TFLite schema bindings: pip install 'openrknn[tflite]'") from e

    graph = read_tflite(model)
    if graph.extra_subgraphs:
        log.warning(f"load_tflite: '{model}' has {graph.extra_subgraphs} more subgraph(s); only the main one "
                    "is converted")
    _refuse_unknown_ops(graph, CONVERTERS)
    quantized = _fully_quantized(graph)
    ctx = Context(graph, custom_ops=custom_ops, qdq=quantized)
    inputs, layouts = [], {}
    for idx in graph.inputs:
        t = graph.tensors[idx]
        layout = NCHW if input_is_nchw and len(t.shape) == 4 else NATIVE
        dims = [t.shape[a] for a in (0, 3, 1, 2)] if layout == NCHW else t.shape
        inputs.append(helper.make_tensor_value_info(ctx.out(idx, layout), _elem_type(t), dims))
        layouts[t.name] = ("NCHW" if layout == NCHW else "NHWC") if len(t.shape) == 4 else "UNDEFINED"
    ctx.flush_qdq()
    for op in graph.operators:
        _convert(ctx, op, CONVERTERS[op.name], model)
        ctx.flush_qdq()
    outputs = [helper.make_tensor_value_info(name, _elem_type(graph.tensors[idx]), graph.tensors[idx].shape)
               for name, idx in zip(ctx.finish_outputs(), graph.outputs)]
    proto = _make_model(ctx, inputs, outputs, model)
    log.info(f"load_tflite: '{os.path.basename(str(model))}' converted: {len(graph.operators)} TFLite ops -> "
             f"{len(proto.graph.node)} ONNX nodes" + (", quantization parameters kept" if quantized else ""))
    return SourceModel(model=proto, framework="tflite", input_layouts=layouts,
                       quant_params=ctx.quant_params if quantized else {})


def _fully_quantized(graph: Any) -> bool:
    """True when some activation (not a weight, not a densified weight) holds quantized integers."""
    weights = {o for op in graph.operators if op.name == "DENSIFY" for o in op.outputs}
    return any(t.quantized and t.data is None and t.dtype.kind in "iu" and i not in weights
               for i, t in enumerate(graph.tensors))


def _refuse_unknown_ops(graph: Any, converters: dict[str, Any]) -> None:
    unknown = [op for op in graph.operators if op.name not in converters]
    if not unknown:
        return
    names = sorted({op.name for op in unknown})
    first = unknown[0]
    label = graph.tensors[first.outputs[0]].name if first.outputs else f"op{first.index}"
    raise UnsupportedOpError(first.name, label, "TFLite", hint=(
        f"the model uses unsupported op(s) {', '.join(names)}; supported TFLite ops: "
        f"{', '.join(sorted(converters))}"))


def _convert(ctx: Any, op: Any, fn: Any, model: str) -> None:
    try:
        fn(ctx, op)
    except ModelLoadError:
        raise
    except Exception as e:   # a malformed op (missing options, wrong arity) must name itself
        raise ModelLoadError(f"load_tflite: '{model}': cannot convert {op.name} '{ctx.op_label(op)}' "
                             f"({type(e).__name__}: {e})") from e


def _elem_type(tensor: Any) -> int:
    """ONNX element type of a graph input/output: float32 for float and quantized tensors."""
    if tensor.dtype.kind == "f" or tensor.quantized:
        return TensorProto.FLOAT
    return helper.np_dtype_to_tensor_dtype(np.dtype(tensor.dtype))


def _make_model(ctx: Any, inputs: list, outputs: list, path: str) -> onnx.ModelProto:
    graph = helper.make_graph(ctx.nodes, os.path.splitext(os.path.basename(str(path)))[0] or "tflite",
                              inputs, outputs, ctx.initializers, value_info=ctx.value_info)
    opsets = [helper.make_opsetid("", FRONTEND_OPSET)]
    has_custom = any(n.domain == CUSTOM_DOMAIN for n in ctx.nodes)
    if has_custom:
        opsets.append(helper.make_opsetid(CUSTOM_DOMAIN, 1))
    proto = helper.make_model(graph, opset_imports=opsets, producer_name="openrknn.load_tflite")
    proto.ir_version = 8
    try:
        proto = onnx.shape_inference.infer_shapes(proto, strict_mode=not has_custom)
        onnx.checker.check_model(proto)
    except Exception as e:   # onnx raises several exception types
        raise ModelLoadError(f"load_tflite: '{path}': the converted graph is not valid ONNX: {e}") from e
    return proto
