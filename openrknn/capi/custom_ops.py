"""``rknn_register_custom_ops`` (seed 002 §5.5.4): C callbacks as the simulator's custom-op classes.

Each registered CPU op becomes a class in the model's ``RKNNLite`` custom-op registry, so the
simulator cuts the graph around it exactly as for a Python ``reg_custom_op``. Per custom node of the
model, one ``rknn_custom_op_context`` and one set of input/output tensors live as long as the
context: ``init`` is called at registration, ``prepare`` then ``compute`` on every run (float32 data,
NCHW for 4-D tensors, int64 kept int64), ``destroy`` at ``rknn_destroy``.
"""
from __future__ import annotations

import ctypes
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx

from openrknn.capi import structs as s
from openrknn.capi.tensors import ApiError
from openrknn.graph.custom_ops import CUSTOM_DOMAIN, get_node_attr

_nodes_by_context: dict[int, "NodeState"] = {}   # rknn_custom_op_context address -> its node


@dataclass
class NodeState:
    """One custom node: its op context, its tensors and the buffers they point to."""

    node: onnx.NodeProto
    op: "CallbackOp"
    context: s.rknn_custom_op_context = field(default_factory=s.rknn_custom_op_context)
    inputs: Any = None
    outputs: Any = None
    buffers: list[np.ndarray] = field(default_factory=list)
    kept: list[Any] = field(default_factory=list)     # attribute values handed out by get_op_attr


def _describe(tensor: s.rknn_custom_op_tensor, index: int, name: str, array: np.ndarray) -> None:
    attr = tensor.attr
    attr.index = index
    attr.n_dims = array.ndim
    for i in range(s.MAX_DIMS):
        attr.dims[i] = array.shape[i] if i < array.ndim else 0
    s.set_name(attr, "name", name)
    attr.n_elems = array.size
    attr.size = attr.size_with_stride = array.nbytes
    attr.fmt = s.FORMAT_NCHW if array.ndim == 4 else s.FORMAT_UNDEFINED
    attr.type = s.TYPE_OF_NUMPY[array.dtype.name]
    attr.qnt_type, attr.zp, attr.scale = s.QNT_NONE, 0, 1.0
    attr.w_stride = attr.h_stride = 0
    tensor.mem.virt_addr = array.ctypes.data
    tensor.mem.phys_addr = 0
    tensor.mem.fd = -1
    tensor.mem.offset = 0
    tensor.mem.size = array.nbytes
    tensor.mem.flags = s.MEM_FLAGS_ALLOC_INSIDE


def _shape_of(graph: onnx.ModelProto, name: str) -> tuple[list[int], int] | None:
    for value in list(graph.graph.value_info) + list(graph.graph.input) + list(graph.graph.output):
        if value.name == name and value.type.tensor_type.HasField("shape"):
            dims = [d.dim_value for d in value.type.tensor_type.shape.dim]
            if dims and all(d > 0 for d in dims):
                return dims, value.type.tensor_type.elem_type
    return None


def _array_for(shape_type: tuple[list[int], int] | None, like: np.ndarray | None = None) -> np.ndarray:
    if shape_type is not None:
        dims, elem = shape_type
        dtype = np.int64 if elem == onnx.TensorProto.INT64 else np.float32
        return np.zeros(dims, dtype)
    return np.zeros(like.shape if like is not None else (1,), like.dtype if like is not None else np.float32)


class CallbackOp:
    """A simulator custom-op class whose ``compute`` calls the registered C callbacks."""

    def __init__(self, spec: s.rknn_custom_op, graph: onnx.ModelProto) -> None:
        self.op_type = spec.op_type.decode()
        self.graph = graph
        self.init = s.OP_CALLBACK(spec.init) if spec.init else None
        self.prepare = s.OP_CALLBACK(spec.prepare) if spec.prepare else None
        self.compute_fn = s.OP_CALLBACK(spec.compute)
        self.destroy_fn = s.DESTROY_CALLBACK(spec.destroy) if spec.destroy else None
        self.nodes: dict[str, NodeState] = {}

    def __call__(self) -> "CallbackOp":   # the registry instantiates what it holds
        return self

    def shape_infer(self, node: Any, in_shapes: list, in_dtypes: list) -> tuple[list, list]:
        found = _shape_of(self.graph, node.output[0])
        return ([found[0]], [in_dtypes[0]]) if found else ([list(in_shapes[0])], [in_dtypes[0]])

    def state(self, node: onnx.NodeProto, inputs: list[np.ndarray] | None = None) -> NodeState:
        """The node's tensors, (re)shaped to ``inputs`` when given."""
        key = node.name or node.output[0]
        state = self.nodes.get(key)
        if state is None:
            state = NodeState(node, self)
            state.context.target = s.TARGET_TYPE_CPU
            state.context.internal_ctx = id(state)
            self.nodes[key] = state
            _nodes_by_context[ctypes.addressof(state.context)] = state
        in_arrays = ([np.ascontiguousarray(np.asarray(x, np.int64 if np.asarray(x).dtype == np.int64 else np.float32))
                      for x in inputs] if inputs is not None else
                     [_array_for(_shape_of(self.graph, name)) for name in node.input if name])
        shapes = [a.shape for a in in_arrays]
        if state.inputs is None or [b.shape for b in state.buffers[:len(in_arrays)]] != shapes:
            outs = [_array_for(_shape_of(self.graph, name), in_arrays[0] if in_arrays else None)
                    for name in node.output]
            state.buffers = in_arrays + outs
            state.inputs = (s.rknn_custom_op_tensor * max(1, len(in_arrays)))()
            state.outputs = (s.rknn_custom_op_tensor * max(1, len(outs)))()
            for i, (name, array) in enumerate(zip([n for n in node.input if n], in_arrays)):
                _describe(state.inputs[i], i, name, array)
            for i, (name, array) in enumerate(zip(node.output, outs)):
                _describe(state.outputs[i], i, name, array)
        else:
            for buffer, array in zip(state.buffers, in_arrays):
                buffer[...] = array
        return state

    def _call(self, function: Any, what: str, state: NodeState) -> None:
        n_in, n_out = len([n for n in state.node.input if n]), len(state.node.output)
        code = function(ctypes.byref(state.context), state.inputs, n_in, state.outputs, n_out)
        if code < 0:
            raise ApiError(s.ERR_FAIL, f"custom op '{self.op_type}' (layer '{state.node.name}'): the {what} callback "
                                       f"returned {code}")

    def initialise(self, node: onnx.NodeProto) -> None:
        state = self.state(node)
        if self.init is not None:
            self._call(self.init, "init", state)

    def compute(self, node: onnx.NodeProto, inputs: list[np.ndarray]) -> list[np.ndarray]:
        state = self.state(node, inputs)
        if self.prepare is not None:
            self._call(self.prepare, "prepare", state)
        self._call(self.compute_fn, "compute", state)
        n_in = len(inputs)
        return [buffer.copy() for buffer in state.buffers[n_in:]]

    def destroy(self) -> None:
        for state in self.nodes.values():
            if self.destroy_fn is not None:
                self.destroy_fn(ctypes.byref(state.context))
            _nodes_by_context.pop(ctypes.addressof(state.context), None)
        self.nodes.clear()


class RegisteredOps:
    """The callback ops of one model context (destroyed with it)."""

    def __init__(self) -> None:
        self.ops: list[CallbackOp] = []

    def destroy(self) -> None:
        for op in self.ops:
            op.destroy()


def register(ctx: Any, specs: list[s.rknn_custom_op]) -> None:
    """Register ``specs`` on the model context, call ``init`` per node, then start its runtime."""
    graph = ctx.model.graph
    used = {n.op_type for n in graph.graph.node if n.domain == CUSTOM_DOMAIN}
    registry = ctx.lite._custom_ops            # RKNNLite's registry (same package)
    created = []
    for spec in specs:
        op_type = spec.op_type.decode()
        if spec.target != s.TARGET_TYPE_CPU:
            raise ApiError(s.ERR_PARAM_INVALID, f"custom op '{op_type}': target {spec.target} is not supported; this "
                                                "runtime runs CPU operators (RKNN_TARGET_TYPE_CPU) only, no OpenCL")
        if not spec.compute:
            raise ApiError(s.ERR_PARAM_INVALID, f"custom op '{op_type}': compute must be set")
        if op_type in registry:
            raise ApiError(s.ERR_PARAM_INVALID, f"custom op '{op_type}' is already registered on this context")
        if op_type not in used:
            raise ApiError(s.ERR_PARAM_INVALID, f"the model has no custom op '{op_type}' (it uses: "
                                                f"{', '.join(sorted(used)) or 'none'})")
        created.append(CallbackOp(spec, graph))
    if ctx.custom_ops is None:
        ctx.custom_ops = RegisteredOps()
    for op in created:
        registry.register(op)
        ctx.custom_ops.ops.append(op)
        for node in graph.graph.node:
            if node.domain == CUSTOM_DOMAIN and node.op_type == op.op_type:
                op.initialise(node)
    if used <= set(registry.names()):
        ctx.start()


def get_op_attr(op_ctx: int, name: str, attr_address: int) -> None:
    state = _nodes_by_context.get(op_ctx)
    if state is None:
        raise ApiError(s.ERR_PARAM_INVALID, "op_ctx is not a context the runtime passed to a callback")
    out = s.at(s.rknn_custom_op_attr, attr_address)
    s.set_name(out, "name", name)
    value = get_node_attr(state.node, name)
    if value is None:
        out.n_elems, out.data, out.dtype = 0, None, s.TENSOR_UINT8
        return
    if isinstance(value, str):
        array = np.frombuffer(value.encode() + b"\0", np.uint8).copy()
        out.n_elems = len(value)
    else:
        array = np.atleast_1d(np.asarray(value))
        array = array.astype(np.float32) if array.dtype.kind == "f" else array.astype(np.int64)
        out.n_elems = array.size
    array = np.ascontiguousarray(array)
    state.kept.append(array)
    out.dtype = s.TYPE_OF_NUMPY[array.dtype.name]
    out.data = array.ctypes.data
