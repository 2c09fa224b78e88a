"""Checks of the graph inside a ``.rknn`` against what opening a file is allowed to do.

* No external data: an ONNX tensor may name a file to read its values from; onnxruntime would
  resolve it against the current folder, so a crafted model could read local files into its
  outputs. A ``.rknn`` is self-contained — every such reference is refused.
* The header's inputs/outputs must be the graph's: names present, same rank, same known sizes.
* Every name in the graph is text (protobuf hands invalid UTF-8 back as bytes).
* A model input with a zero-size dimension must run: empty tensors are valid ONNX (a reduction
  over an empty set is 0), so such a model is accepted only if the graph runs on the empty input;
  otherwise it is refused here instead of failing at inference with a raw onnxruntime message.
"""
from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import numpy as np
import onnx

from openrknn.errors import ModelFileError
from openrknn.graph.rknn_model import RKNNModel
from openrknn.graph.runner import make_session


def _tensors(graph: onnx.GraphProto) -> Iterator[onnx.TensorProto]:
    """Every tensor stored in ``graph``, its node attributes and subgraphs."""
    yield from graph.initializer
    for sparse in graph.sparse_initializer:
        yield sparse.values
        yield sparse.indices
    for node in graph.node:
        for attr in node.attribute:
            if attr.HasField("t"):
                yield attr.t
            yield from attr.tensors
            if attr.HasField("g"):
                yield from _tensors(attr.g)
            for sub in attr.graphs:
                yield from _tensors(sub)


def refuse_external_data(model: onnx.ModelProto, source: str) -> None:
    """Raise if any tensor of ``model`` (functions included) points to data outside the file."""
    tensors = list(_tensors(model.graph))
    for function in model.functions:
        tensors += list(_tensors(onnx.GraphProto(node=function.node)))
    for tensor in tensors:
        if tensor.data_location == onnx.TensorProto.EXTERNAL or len(tensor.external_data):
            where = next((e.value for e in tensor.external_data if e.key == "location"), "?")
            raise ModelFileError(f"'{source}': tensor '{tensor.name}' refers to external data ('{where}'); a .rknn "
                                 "must contain all its weights, so it is refused (it could read files of this "
                                 "computer). Rebuild it from the source model with openrknn")


def check_tensor_sizes(model: onnx.ModelProto, source: str) -> None:
    """Every stored tensor's dims are non-negative and its raw bytes match them (so no reader fails later)."""
    for tensor in _tensors(model.graph):
        if any(d < 0 for d in tensor.dims):
            raise ModelFileError(f"'{source}': tensor '{tensor.name}' has a negative dimension {list(tensor.dims)}; "
                                 "the file is damaged")
        if not tensor.HasField("raw_data"):
            continue
        try:
            itemsize = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type)).itemsize
        except (KeyError, TypeError, ValueError) as e:
            raise ModelFileError(f"'{source}': tensor '{tensor.name}' has an unknown data type {tensor.data_type}; "
                                 "the file is damaged") from e
        if tensor.data_type in (onnx.TensorProto.INT4, onnx.TensorProto.UINT4):
            expected = (math.prod(tensor.dims) + 1) // 2
        else:
            expected = math.prod(tensor.dims) * itemsize
        if tensor.data_type != onnx.TensorProto.STRING and len(tensor.raw_data) != expected:
            raise ModelFileError(f"'{source}': tensor '{tensor.name}' holds {len(tensor.raw_data)} bytes but its "
                                 f"shape {list(tensor.dims)} needs {expected}; the file is damaged")


def refuse_bad_names(model: onnx.ModelProto, source: str) -> None:
    """Raise if a node, tensor or attribute name is not valid UTF-8 text."""
    def bad(graph: onnx.GraphProto) -> bool:
        names = [v.name for v in list(graph.input) + list(graph.output) + list(graph.value_info)]
        names += [t.name for t in graph.initializer]
        for node in graph.node:
            names += [node.op_type, node.domain, node.name, *node.input, *node.output]
            for attr in node.attribute:
                names.append(attr.name)
                if attr.HasField("g") and bad(attr.g) or any(bad(g) for g in attr.graphs):
                    return True
        return not all(isinstance(n, str) for n in names)
    if bad(model.graph):
        raise ModelFileError(f"'{source}': the graph has a name that is not valid UTF-8 text; the file is damaged")


def check_empty_inputs(graph: onnx.ModelProto, specs: list[Any], source: str,
                       error: type[Exception] = ModelFileError) -> None:
    """A zero-size model input is accepted only when the graph runs on it (see the module docstring)."""
    empty = [s for s in specs if 0 in s.shape]
    if not empty:
        return

    feeds = {s.name: np.zeros([max(d, 0) if d >= 0 else 1 for d in s.shape], s.dtype) for s in specs}
    try:
        make_session(graph).run(None, feeds)
    except Exception as e:   # onnxruntime's own exception classes, or the simulator's refusal
        first = str(e).strip().splitlines()[0][:160] if str(e).strip() else type(e).__name__
        raise error(f"{source}: model input '{empty[0].name}' has a zero-size dimension {list(empty[0].shape)} and "
                    f"the model cannot run on an empty tensor ({first}); give the input a real shape "
                    "(load_onnx(inputs=..., input_size_list=...))") from e


def check_io_against_graph(model: RKNNModel, source: str) -> None:
    """The header's inputs/outputs exist in the graph with the same rank and known dimensions."""
    graph = model.graph.graph
    inits = {i.name for i in graph.initializer}
    for kind, specs, values in (("input", model.inputs, [v for v in graph.input if v.name not in inits]),
                                ("output", model.outputs, list(graph.output))):
        by_name = {v.name: v for v in values}
        for spec in specs:
            value = by_name.get(spec.name)
            if value is None:
                raise ModelFileError(f"'{source}': the header names {kind} '{spec.name}' but the graph has no such "
                                     f"{kind} (graph {kind}s: {sorted(by_name)[:8]}); the file is damaged")
            if not value.type.tensor_type.HasField("shape"):
                continue
            dims = value.type.tensor_type.shape.dim
            if len(dims) != len(spec.shape):
                raise ModelFileError(f"'{source}': {kind} '{spec.name}' has shape {spec.shape} in the header but "
                                     f"{len(dims)} dimensions in the graph; the file is damaged")
            for axis, (dim, size) in enumerate(zip(dims, spec.shape)):
                if axis == 0 and model.rknn_batch_size > 1:
                    continue   # the header counts the whole batch
                if dim.HasField("dim_value") and dim.dim_value > 0 and size > 0 and dim.dim_value != size:
                    raise ModelFileError(f"'{source}': {kind} '{spec.name}' has shape {spec.shape} in the header but "
                                         f"dimension {axis} is {dim.dim_value} in the graph; the file is damaged")
