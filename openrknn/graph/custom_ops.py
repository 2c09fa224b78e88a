"""Registry of user custom operators (``RKNN.reg_custom_op``, seed 002 §5.5).

A custom op is a Python class with ``op_type`` (str), ``shape_infer(node, in_shapes, in_dtypes)``
returning ``(out_shapes, out_dtypes)`` and ``compute(node, inputs)`` returning a list of arrays.
Frontends consult the registry to accept otherwise unknown ops; the simulator runs ``compute``.
"""
from __future__ import annotations

from typing import Any

from openrknn.errors import ConfigError

CUSTOM_DOMAIN = "openrknn.custom"


class CustomOpRegistry:
    """The custom ops registered on one RKNN object."""

    def __init__(self) -> None:
        self._ops: dict[str, Any] = {}

    def register(self, op_class: Any) -> None:
        if not isinstance(op_class, type):
            raise ConfigError("reg_custom_op: custom_op must be a class (not an instance)")
        op_type = getattr(op_class, "op_type", None)
        if not isinstance(op_type, str) or not op_type:
            raise ConfigError("reg_custom_op: the class needs a string attribute 'op_type'")
        for method in ("shape_infer", "compute"):
            if not callable(getattr(op_class, method, None)):
                raise ConfigError(f"reg_custom_op: class '{op_class.__name__}' has no method '{method}'")
        if op_type in self._ops:
            raise ConfigError(f"reg_custom_op: op_type '{op_type}' is already registered")
        self._ops[op_type] = op_class

    def __contains__(self, op_type: str) -> bool:
        return op_type in self._ops

    def get(self, op_type: str) -> Any:
        return self._ops.get(op_type)

    def names(self) -> list[str]:
        return sorted(self._ops)


def get_node_attr(node: Any, name: str, default: Any = None) -> Any:
    """Value of attribute ``name`` of an ONNX node (numpy array for tensors), or ``default``."""
    from onnx import helper, numpy_helper

    for attr in node.attribute:
        if attr.name == name:
            value = helper.get_attribute_value(attr)
            if hasattr(value, "dims"):
                return numpy_helper.to_array(value)
            if isinstance(value, bytes):
                return value.decode("utf-8")
            return value
    return default
