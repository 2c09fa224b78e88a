"""Registry of user custom operators (``RKNN.reg_custom_op``, seed 002 §5.5).

A custom op is a Python class with ``op_type`` (str), ``shape_infer(node, in_shapes, in_dtypes)``
returning ``(out_shapes, out_dtypes)`` and ``compute(node, inputs)`` returning a list of arrays.
Frontends consult the registry to accept otherwise unknown ops; the simulator runs ``compute``.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from openrknn.errors import ConfigError

CUSTOM_DOMAIN = "openrknn.custom"


class CustomOpRegistry:
    """The custom ops registered on one RKNN object."""

    def __init__(self) -> None:
        self._ops: dict[str, Any] = {}

    def register(self, custom_op: Any) -> None:
        """Register a custom op class, or an instance of one (the vendor's examples pass an instance)."""
        op_class = custom_op if isinstance(custom_op, type) else type(custom_op)
        op_type = getattr(custom_op, "op_type", None)
        if not isinstance(op_type, str) or not op_type:
            raise ConfigError("reg_custom_op: the class needs a string attribute 'op_type'")
        for method in ("shape_infer", "compute"):
            if not callable(getattr(custom_op, method, None)):
                raise ConfigError(f"reg_custom_op: class '{op_class.__name__}' has no method '{method}'")
        if op_type in self._ops:
            raise ConfigError(f"reg_custom_op: op_type '{op_type}' is already registered")
        # callers instantiate what get() returns: an instance is handed back as it is (it may carry state)
        self._ops[op_type] = custom_op if isinstance(custom_op, type) else (lambda: custom_op)

    def __contains__(self, op_type: str) -> bool:
        return op_type in self._ops

    def get(self, op_type: str) -> Any:
        return self._ops.get(op_type)

    def names(self) -> list[str]:
        return sorted(self._ops)


def get_node_attr(node: Any, name: str, default: Any = None) -> Any:
    """Value of attribute ``name`` of an ONNX node (numpy array for tensors), or ``default``."""
    for attr in node.attribute:
        if attr.name == name:
            value = helper.get_attribute_value(attr)
            if hasattr(value, "dims"):
                return numpy_helper.to_array(value)
            if isinstance(value, bytes):
                return value.decode("utf-8")
            return value
    return default


def apply_custom_ops(model: onnx.ModelProto, registry: CustomOpRegistry | None) -> onnx.ModelProto:
    """Move registered op types to ``CUSTOM_DOMAIN`` and give their outputs shapes from ``shape_infer``.

    ONNX shape inference knows nothing of custom ops, so this alternates it with the classes'
    ``shape_infer(node, in_shapes, in_dtypes)`` until every custom output is typed.
    """
    if registry is None or not registry.names():
        return model
    out = onnx.ModelProto()
    out.CopyFrom(model)
    custom = [n for n in out.graph.node if n.op_type in registry]
    if not custom:
        return out
    for node in custom:
        node.domain = CUSTOM_DOMAIN
    if not any(o.domain == CUSTOM_DOMAIN for o in out.opset_import):
        out.opset_import.append(helper.make_opsetid(CUSTOM_DOMAIN, 1))
    for _ in range(len(custom) + 1):
        out = onnx.shape_inference.infer_shapes(out, strict_mode=False)
        known = {v.name: v for v in list(out.graph.value_info) + list(out.graph.input) + list(out.graph.output)}
        for init in out.graph.initializer:
            known.setdefault(init.name, helper.make_tensor_value_info(init.name, init.data_type, list(init.dims)))
        progressed = False
        for node in custom:
            if all(o in known and known[o].type.tensor_type.elem_type for o in node.output):
                continue
            if not all(i in known for i in node.input if i):
                continue
            shapes = [[d.dim_value for d in known[i].type.tensor_type.shape.dim] for i in node.input if i]
            dtypes = [np.dtype(helper.tensor_dtype_to_np_dtype(known[i].type.tensor_type.elem_type))
                      for i in node.input if i]
            out_shapes, out_dtypes = registry.get(node.op_type)().shape_infer(node, shapes, dtypes)
            for name, shape, dtype in zip(node.output, out_shapes, out_dtypes):
                elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
                value = helper.make_tensor_value_info(name, elem, [int(d) for d in shape])
                graph_out = next((o for o in out.graph.output if o.name == name), None)
                if graph_out is not None:
                    graph_out.CopyFrom(value)
                else:
                    out.graph.value_info.append(value)
            progressed = True
        if not progressed:
            break
    return out
