"""Import of already-quantized ONNX models (QDQ and QOperator formats) without re-calibration.

QOperator layers (``QLinearConv``, ``QLinearMatMul``) are first rewritten to their QDQ form; then
every ``QuantizeLinear → DequantizeLinear`` pair on an activation is removed and its parameters
recorded on the float tensor, and every ``DequantizeLinear`` of a constant becomes an integer
initializer with its parameters. The layers are then marked like a calibrated model's, so the
simulator lowers both the same way.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import replace

import numpy as np
import onnx
from onnx import helper, numpy_helper

from openrknn import log
from openrknn.errors import NotSupportedError, QuantizationError
from openrknn.graph.preprocess import PREPROCESS_KEY
from openrknn.graph.rknn_model import RKNNModel
from openrknn.quant import annotate
from openrknn.quant.fold import constants_to_initializers
from openrknn.quant.numerics import QuantParams

QUANTIZED_OPS = frozenset({"QuantizeLinear", "DequantizeLinear", "QLinearConv", "QLinearMatMul", "ConvInteger",
                           "MatMulInteger", "DynamicQuantizeLinear"})
_DTYPES = {onnx.TensorProto.INT8: "int8", onnx.TensorProto.UINT8: "uint8", onnx.TensorProto.INT16: "int16",
           onnx.TensorProto.INT32: "int32", onnx.TensorProto.INT4: "int4"}


def is_prequantized(model_proto: onnx.ModelProto) -> bool:
    """True when the graph holds quantization operators (an ONNX QDQ or QOperator model).

    Example:
        >>> import onnx
        >>> is_prequantized(onnx.ModelProto())
        False
    """
    return any(node.op_type in QUANTIZED_OPS for node in model_proto.graph.node)


def import_quantized(rknn_model: RKNNModel) -> RKNNModel:
    """Turn a built QDQ/QOperator model into a quantized :class:`RKNNModel` keeping its parameters.

    Raises:
        NotSupportedError: a quantized operator other than QuantizeLinear, DequantizeLinear,
            QLinearConv or QLinearMatMul.
        QuantizationError: quantization parameters that are not constants.
    """
    graph = onnx.ModelProto()
    graph.CopyFrom(rknn_model.graph)
    constants_to_initializers(graph)
    _qoperator_to_qdq(graph)
    params: dict[str, QuantParams] = {}
    records: dict[str, dict] = {}
    _constant_dequantize(graph, params, records)
    _activation_pairs(graph, params)
    del graph.graph.value_info[:]
    graph = onnx.shape_inference.infer_shapes(graph)
    plan = annotate.mark(graph, integer_activations=True)
    for tensor, source in plan.shared:
        if tensor not in params and source in params:
            params[tensor] = params[source]
    records.update({name: p.to_dict() for name, p in params.items()})
    act_dtypes = {p.dtype for n, p in params.items() if n not in records or records[n].get("axis") is None}
    toolkit = rknn_model.metadata.get("toolkit", 2)
    dtype = "w16a16i" if "int16" in act_dtypes else ("asymmetric_quantized-u8" if toolkit == 1 and "uint8" in act_dtypes
                                                      else "w8a8")
    int_outputs = {o for n in graph.graph.node if annotate.node_kind(n) in annotate.INTEGER_KINDS for o in n.output}
    tensor_dtypes = {name: (params[name].dtype if name in int_outputs and name in params else "float16")
                     for name in annotate.float_tensor_names(graph)}
    tensor_dtypes.update({name: r["dtype"] for name, r in records.items() if name not in tensor_dtypes})
    log.info(f"import_quantized: {len(params)} tensors keep the source's scales and zero points")
    float_outputs = {o.name for o in graph.graph.output if o.type.tensor_type.elem_type == onnx.TensorProto.FLOAT}
    outputs = [replace(spec, dtype="float32") if spec.name in float_outputs else spec for spec in rknn_model.outputs]
    model = replace(rknn_model, graph=graph, quantized_dtype=dtype, quant_params=records, tensor_dtypes=tensor_dtypes,
                    outputs=outputs)
    model.metadata = dict(rknn_model.metadata, quantization={"algorithm": "imported", "method": "source"})
    return model


def _init_array(inits: dict, name: str, node: onnx.NodeProto) -> np.ndarray:
    if name not in inits:
        raise QuantizationError(f"node '{node.name}' ({node.op_type}): quantization parameter '{name}' is not a "
                                "constant; only static quantization can be imported")
    return numpy_helper.to_array(inits[name])


def _params_of(node: onnx.NodeProto, inits: dict, dtype: str | None = None) -> QuantParams:
    scale = _init_array(inits, node.input[1], node).astype(np.float32).ravel()
    if len(node.input) > 2 and node.input[2]:
        zero_init = inits.get(node.input[2])
        zero = _init_array(inits, node.input[2], node).astype(np.int64).ravel()
        if dtype is None and zero_init.data_type not in _DTYPES:
            name = onnx.helper.tensor_dtype_to_np_dtype(zero_init.data_type).name
            raise NotSupportedError(f"{node.op_type} '{node.name}': {name} quantization is not an RKNN data type "
                                    f"(int8, uint8, int16, int32 and int4 weights are)")
        dtype = dtype or _DTYPES[zero_init.data_type]
    else:
        zero, dtype = np.zeros(scale.shape, np.int64), dtype or "uint8"
    axis = next((a.i for a in node.attribute if a.name == "axis"), 1) if scale.size > 1 else None
    qtype = "asymmetric_quantized" if np.any(zero != 0) else "symmetric_quantized"
    if dtype == "uint8":
        qtype = "asymmetric_quantized"
    return QuantParams(dtype=dtype, scale=scale, zero_point=zero, qtype=qtype, axis=axis)


def _activation_params(node: onnx.NodeProto, inits: dict) -> QuantParams:
    params = _params_of(node, inits)
    if params.scale.size > 1:
        raise NotSupportedError(f"{node.op_type} '{node.name}' quantizes the activation '{node.input[0]}' per "
                                "channel; RKNN quantizes activations per tensor (weights may be per channel)")
    return params


def _constant_dequantize(graph: onnx.ModelProto, params: dict, records: dict) -> None:
    inits = {i.name: i for i in graph.graph.initializer}
    keep = []
    for node in graph.graph.node:
        if node.op_type != "DequantizeLinear" or node.input[0] not in inits:
            keep.append(node)
            continue
        source = inits[node.input[0]]
        dtype = _DTYPES.get(source.data_type)
        if dtype is None:
            raise NotSupportedError(f"DequantizeLinear '{node.name}': constant of type {source.data_type} is not supported")
        array = numpy_helper.to_array(source)
        graph.graph.initializer.append(numpy_helper.from_array(array, node.output[0]))
        if dtype == "int32":
            scale = _init_array(inits, node.input[1], node).astype(np.float32).ravel()
            records[node.output[0]] = {"dtype": "int32", "qtype": "symmetric_quantized", "qmethod": "channel", "axis": 0,
                                       "scale": [float(v) for v in np.resize(scale, array.size)],
                                       "zero_point": [0] * int(array.size)}
        else:
            params[node.output[0]] = _params_of(node, inits, dtype)
            records[node.output[0]] = params[node.output[0]].to_dict()
    del graph.graph.node[:]
    graph.graph.node.extend(keep)


def _activation_pairs(graph: onnx.ModelProto, params: dict) -> None:
    inits = {i.name: i for i in graph.graph.initializer}
    consumers = defaultdict(list)
    for node in graph.graph.node:
        for name in node.input:
            consumers[name].append(node)
    rename: dict[str, str] = {}
    drop = set()
    for node in graph.graph.node:
        if node.op_type != "QuantizeLinear":
            continue
        source, quantized = node.input[0], node.output[0]
        params[source] = _activation_params(node, inits)
        drop.add(id(node))
        rename[quantized] = source
        for user in consumers[quantized]:
            if user.op_type == "DequantizeLinear":
                drop.add(id(user))
                rename[user.output[0]] = source
    graph_inputs = {v.name for v in graph.graph.input} - set(inits)
    outputs = {o.name for o in graph.graph.output}
    for node in graph.graph.node:
        if id(node) in drop:
            continue
        if node.op_type == "DequantizeLinear" and node.input[0] in graph_inputs:
            # an integer model input: the DequantizeLinear stays as the input stage (like the
            # mean/std nodes) and its output carries the input's parameters
            params[node.output[0]] = _activation_params(node, inits)
            node.metadata_props.add(key=PREPROCESS_KEY, value=node.input[0])
        elif node.op_type in ("DequantizeLinear", "QuantizeLinear"):
            raise NotSupportedError(f"{node.op_type} '{node.name}' on '{node.input[0]}' has no matching pair; "
                                    "only QDQ pairs, constant DequantizeLinear and DequantizeLinear of a model "
                                    "input are supported")
    keep = [n for n in graph.graph.node if id(n) not in drop]
    for out in outputs & set(rename):   # Q (→ DQ) → graph output: the float source takes the output's name
        _float_output(graph, out)         # an integer output is returned dequantized, as inference() does
        source = rename.pop(out)
        if source in graph_inputs:        # a model input quantized straight to an output: a layer copies it
            params[out] = params[source]
            keep.append(helper.make_node("Identity", [source], [out], name=f"{out}__copy"))
            continue
        params[out] = params.pop(source)
        rename = {k: (out if v == source else v) for k, v in rename.items()}
        rename[source] = out
        for node in keep:
            node.output[:] = [out if o == source else o for o in node.output]
    for node in keep:
        for i, name in enumerate(node.input):
            node.input[i] = rename.get(name, name)
    del graph.graph.node[:]
    graph.graph.node.extend(keep)


def _float_output(graph: onnx.ModelProto, name: str) -> None:
    for value in graph.graph.output:
        if value.name == name:
            value.type.tensor_type.elem_type = onnx.TensorProto.FLOAT


def _qoperator_to_qdq(graph: onnx.ModelProto) -> None:
    """Rewrite QLinearConv / QLinearMatMul as DequantizeLinear → float op → QuantizeLinear."""
    nodes = []
    inits = {i.name: i for i in graph.graph.initializer}
    for node in graph.graph.node:
        if node.op_type in ("QLinearConv", "QLinearMatMul"):
            nodes += _expand_qlinear(node, graph, inits)
        elif node.op_type in ("ConvInteger", "MatMulInteger", "DynamicQuantizeLinear"):
            raise NotSupportedError(f"{node.op_type} '{node.name}': dynamic quantization is not supported; export "
                                    "the model with static QDQ quantization")
        else:
            nodes.append(node)
    del graph.graph.node[:]
    graph.graph.node.extend(nodes)


def _expand_qlinear(node: onnx.NodeProto, graph: onnx.ModelProto, inits: dict) -> list[onnx.NodeProto]:
    i = list(node.input)
    base = node.name or node.output[0]
    x, w, y = f"{base}__x", f"{base}__w", f"{base}__y"
    per_channel = _init_array(inits, i[4], node).size > 1
    opset = next((o.version for o in graph.opset_import if o.domain in ("", "ai.onnx")), 13)
    if per_channel and opset < 13:
        raise NotSupportedError(f"{node.op_type} '{node.name}': per-channel weight scales need opset 13 or later "
                                f"(the model has opset {opset}); convert it with onnx.version_converter first")
    axis = {"axis": 0 if node.op_type == "QLinearConv" else 1} if per_channel else {}
    out = [helper.make_node("DequantizeLinear", [i[0], i[1], i[2]], [x], name=f"{base}__dqx"),
           helper.make_node("DequantizeLinear", [i[3], i[4], i[5]], [w], name=f"{base}__dqw", **axis)]
    inputs = [x, w]
    if node.op_type == "QLinearConv" and len(i) > 8 and i[8]:
        bias_scale = (_init_array(inits, i[1], node).astype(np.float32).ravel()[0]
                      * _init_array(inits, i[4], node).astype(np.float32).ravel()).astype(np.float32)
        graph.graph.initializer.append(numpy_helper.from_array(bias_scale if bias_scale.size > 1 else bias_scale[0],
                                                               f"{base}__bs"))
        out.append(helper.make_node("DequantizeLinear", [i[8], f"{base}__bs"], [f"{base}__b"], name=f"{base}__dqb"))
        inputs.append(f"{base}__b")
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    op = "Conv" if node.op_type == "QLinearConv" else "MatMul"
    out.append(helper.make_node(op, inputs, [y], name=base, **attrs))
    out.append(helper.make_node("QuantizeLinear", [y, i[6], i[7]], [node.output[0]], name=f"{base}__qy"))
    return out
