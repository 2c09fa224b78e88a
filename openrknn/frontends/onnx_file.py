"""``load_onnx``: read an ONNX file, cut it at the requested inputs/outputs, fix its shapes."""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import onnx
import onnx.version_converter
from onnx import numpy_helper

from openrknn import log
from openrknn.errors import ModelLoadError
from openrknn.frontends import SourceModel
from openrknn.graph.custom_ops import CustomOpRegistry
from openrknn.graph.supported_ops import check_supported
from openrknn.graph.rknn_model import LAYOUT_NCHW, LAYOUT_UNDEFINED
from openrknn.frontends import require_file


# Newest default-domain opset every supported onnxruntime (>= 1.18) implements completely.
MAX_RUNTIME_OPSET = 21


def load_onnx(model: str, inputs: Sequence[str] | None = None, input_size_list: Sequence[Sequence[int]] | None = None,
              input_initial_val: Sequence[Any] | None = None, outputs: Sequence[str] | None = None,
              custom_ops: CustomOpRegistry | None = None, allow_dynamic: bool = False) -> SourceModel:
    """Load an ``.onnx`` file as documented for ``RKNN.load_onnx``.

    Args:
        model: path of the ``.onnx`` file.
        inputs: names of tensors to use as model inputs (cuts the graph above them).
        input_size_list: one full shape per input (fixes dynamic dimensions).
        input_initial_val: one array (or None) per input; an input with a value becomes a constant.
        outputs: names of tensors to use as model outputs (cuts the graph below them).
        custom_ops: registered custom ops (their nodes are accepted).
        allow_dynamic: keep dynamic dimensions (config ``dynamic_input`` fixes them at build).
    """
    proto = _to_runtime_opset(_read(model, custom_ops))
    check_supported(proto, custom_ops)
    _check_io_types(proto)
    graph_inputs = _graph_input_names(proto)
    current_outputs = [o.name for o in proto.graph.output]
    wants_cut = ((inputs is not None and list(inputs) != graph_inputs)
                 or (outputs is not None and list(outputs) != current_outputs))
    if wants_cut:
        proto = _cut(proto, list(inputs) if inputs is not None else graph_inputs,
                     list(outputs) if outputs is not None else [o.name for o in proto.graph.output], inputs, outputs)
        graph_inputs = _graph_input_names(proto)
    if input_size_list is not None:
        _set_input_shapes(proto, graph_inputs, input_size_list)
    values = _bake_initial_values(proto, graph_inputs, input_initial_val)
    if not allow_dynamic:
        _fix_dynamic_dims(proto)
        _forget_dynamic_output_dims(proto)
    try:
        proto = onnx.shape_inference.infer_shapes(proto, strict_mode=False)
    except Exception as e:  # onnx raises several exception types here
        raise ModelLoadError(f"{model}: shape inference failed: {e}") from e
    layouts = {}
    for value in proto.graph.input:
        dims = value.type.tensor_type.shape.dim
        layouts[value.name] = LAYOUT_NCHW if len(dims) == 4 else LAYOUT_UNDEFINED
    return SourceModel(model=proto, framework="onnx", input_layouts=layouts, input_values=values)


# Tensor types a model input/output may have (what RKNN I/O tensors and numpy both represent).
_IO_TYPES = {onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.DOUBLE, onnx.TensorProto.INT8,
             onnx.TensorProto.UINT8, onnx.TensorProto.INT16, onnx.TensorProto.UINT16, onnx.TensorProto.INT32,
             onnx.TensorProto.UINT32, onnx.TensorProto.INT64, onnx.TensorProto.UINT64, onnx.TensorProto.BOOL}


def _check_io_types(proto: onnx.ModelProto) -> None:
    for kind, values in (("input", proto.graph.input), ("output", proto.graph.output)):
        for value in values:
            if not value.type.HasField("tensor_type"):
                raise ModelLoadError(f"model {kind} '{value.name}' is a {value.type.WhichOneof('value')}, not a "
                                     "tensor; RKNN models take and return tensors only")
            elem = value.type.tensor_type.elem_type
            if elem and elem not in _IO_TYPES:
                name = onnx.TensorProto.DataType.Name(elem)
                raise ModelLoadError(f"model {kind} '{value.name}' has type {name}, which Rockchip NPUs do not "
                                     "support; export the model with float32/float16 or 8/16/32-bit integer I/O")


def _to_runtime_opset(proto: onnx.ModelProto) -> onnx.ModelProto:
    """Models newer than the opset the simulator's kernels cover are converted down when onnx can."""
    opset = next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), MAX_RUNTIME_OPSET)
    if opset <= MAX_RUNTIME_OPSET:
        return proto
    try:
        converted = onnx.version_converter.convert_version(proto, MAX_RUNTIME_OPSET)
    except Exception as e:   # the converter raises several types; the model may still run as it is
        log.warning(f"load_onnx: opset {opset} could not be converted to {MAX_RUNTIME_OPSET} ({str(e)[:120]}); "
                    "loading it unchanged")
        return proto
    log.info(f"load_onnx: opset {opset} converted to {MAX_RUNTIME_OPSET}")
    return converted


def _read(path: str, custom_ops: CustomOpRegistry | None = None) -> onnx.ModelProto:
    require_file(path, "model file")
    try:
        proto = onnx.load(str(path))
    except Exception as e:
        raise ModelLoadError(f"'{path}' is not a valid ONNX model ({type(e).__name__}: {e}); "
                             "check the file is complete and was exported as .onnx") from e
    if not proto.graph.node:
        raise ModelLoadError(f"'{path}' holds no graph nodes; is it really an ONNX model?")
    if custom_ops is not None and any(n.op_type in custom_ops for n in proto.graph.node):
        return proto   # the checker cannot know registered custom ops
    try:
        onnx.checker.check_model(proto)
    except onnx.checker.ValidationError as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else repr(e)
        log.warning(f"load_onnx: '{path}' does not pass onnx.checker ({first}); trying anyway")
    return proto


def _graph_input_names(proto: onnx.ModelProto) -> list[str]:
    inits = {i.name for i in proto.graph.initializer}
    return [i.name for i in proto.graph.input if i.name not in inits]


def _all_tensor_names(proto: onnx.ModelProto) -> set[str]:
    names = {i.name for i in proto.graph.input}
    for node in proto.graph.node:
        names.update(node.output)
    return names


def _cut(proto: onnx.ModelProto, in_names: list[str], out_names: list[str],
         user_inputs: Sequence[str] | None, user_outputs: Sequence[str] | None) -> onnx.ModelProto:
    known = _all_tensor_names(proto)
    if any(attr.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
           for node in proto.graph.node for attr in node.attribute):
        log.warning("load_onnx: the model has control-flow subgraphs (If/Loop); tensors they read from the outer "
                    "graph must stay inside the cut")
    for arg, names in (("inputs", user_inputs), ("outputs", user_outputs)):
        for name in names or []:
            if name not in known:
                raise ModelLoadError(f"the '{name}' in {arg}={list(names)} is invalid: no tensor of that name in the "
                                     "model (see the tensor names in Netron)")
    try:
        proto = onnx.shape_inference.infer_shapes(proto, strict_mode=False)
        return onnx.utils.Extractor(proto).extract_model(in_names, out_names)
    except Exception as e:
        raise ModelLoadError(f"cannot cut the graph at inputs={in_names} outputs={out_names}: {e}") from e


def _set_input_shapes(proto: onnx.ModelProto, names: list[str], sizes: Sequence[Sequence[int]]) -> None:
    if len(sizes) != len(names):
        raise ModelLoadError(f"input_size_list has {len(sizes)} shape(s) but the model has {len(names)} input(s) {names}")
    by_name = {v.name: v for v in proto.graph.input}
    for name, size in zip(names, sizes):
        shape = [int(d) for d in size]
        dims = by_name[name].type.tensor_type.shape
        old = [d.dim_value if d.HasField("dim_value") else -1 for d in dims.dim]
        if len(old) == len(shape) + 1 and old[0] in (1, -1):
            shape = [1] + shape    # Toolkit1 style sizes leave out the batch
        if old and len(old) != len(shape):
            raise ModelLoadError(f"input_size_list gives {shape} for input '{name}' whose rank is {len(old)}")
        for d_old, d_new in zip(old, shape):
            if d_old > 0 and d_old != d_new:
                raise ModelLoadError(f"input_size_list gives {shape} for input '{name}' but the model fixes it to {old}")
        dims.ClearField("dim")
        for d in shape:
            dims.dim.add().dim_value = d
    # Stale intermediate shapes would contradict the new input shapes.
    del proto.graph.value_info[:]


def _forget_dynamic_output_dims(proto: onnx.ModelProto) -> None:
    """With every input size fixed, an output dim written as -1 or a name (exporters do both) is left
    unknown, so shape inference fills in the real size instead of keeping the placeholder."""
    for value in proto.graph.output:
        for d in value.type.tensor_type.shape.dim:
            if (d.HasField("dim_value") and d.dim_value < 0) or d.HasField("dim_param"):
                d.Clear()


def _bake_initial_values(proto: onnx.ModelProto, names: list[str], values: Sequence[Any] | None) -> dict[str, Any]:
    if values is None:
        return {}
    if len(values) != len(names):
        raise ModelLoadError(f"input_initial_val has {len(values)} value(s) but the model has {len(names)} input(s)")
    baked = {}
    elem_types = {v.name: v.type.tensor_type.elem_type for v in proto.graph.input}
    for name, value in zip(names, values):
        if value is None:
            continue
        dtype = onnx.helper.tensor_dtype_to_np_dtype(elem_types[name])
        array = np.asarray(value).astype(dtype)
        proto.graph.initializer.append(numpy_helper.from_array(array, name))
        keep = [v for v in proto.graph.input if v.name != name]
        del proto.graph.input[:]
        proto.graph.input.extend(keep)
        baked[name] = array
        log.info(f"load_onnx: input '{name}' fixed to its initial value, shape {list(array.shape)}")
    return baked


def _fix_dynamic_dims(proto: onnx.ModelProto) -> None:
    """Static shapes are required (the NPU compiles fixed shapes): batch defaults to 1, others must be given."""
    inits = {i.name for i in proto.graph.initializer}
    changed = False
    for value in proto.graph.input:
        if value.name in inits:
            continue
        dims = value.type.tensor_type.shape.dim
        for axis, d in enumerate(dims):
            if d.HasField("dim_value") and d.dim_value >= 0:   # 0 is a real (empty) size, not a dynamic one
                continue
            if axis == 0:
                d.Clear()
                d.dim_value = 1
                changed = True
                log.warning(f"load_onnx: input '{value.name}' has a dynamic batch; it is fixed to 1")
                continue
            shape = [x.dim_value if x.HasField("dim_value") else (x.dim_param or "?") for x in dims]
            pattern = ",".join(str(d) if isinstance(d, int) else "?" for d in shape)
            raise ModelLoadError(f"input '{value.name}' has a dynamic shape {shape}; give its size with "
                                 "load_onnx(..., inputs=[...], input_size_list=[[...]]) (or use config dynamic_input); "
                                 f"on the command line: --input-size-list {pattern} with each ? replaced by a size "
                                 "('#' between inputs)")
    if changed:
        del proto.graph.value_info[:]
