"""The part of TensorFlow's GraphDef schema a frozen graph needs, declared here (no TensorFlow).

The messages are described field by field with ``descriptor_pb2`` and turned into classes by
``google.protobuf.message_factory`` in a private descriptor pool, so no ``protoc`` run and no
TensorFlow install are needed and TensorFlow's own classes (if imported) are not disturbed.
Field numbers follow TensorFlow's public ``graph.proto``, ``node_def.proto``,
``attr_value.proto``, ``tensor.proto`` and ``tensor_shape.proto``; fields a frozen vision graph
does not use (function library, resource handles, variants) are left out and skipped on parse.

Example:
    >>> graph = GraphDef()
    >>> node = graph.node.add(name="x", op="Placeholder")
    >>> node.attr["dtype"].type = DT_FLOAT
    >>> GraphDef.FromString(graph.SerializeToString()).node[0].op
    'Placeholder'
"""
from __future__ import annotations

from typing import Any

import numpy as np
from google.protobuf import descriptor_pb2

from openrknn.frontends.protobuf_schema import message_classes

_F = descriptor_pb2.FieldDescriptorProto
_PACKAGE = "tensorflow"

# DataType enum values (types.proto) and their numpy equivalents.
DT_FLOAT, DT_DOUBLE, DT_INT32, DT_UINT8, DT_INT16, DT_INT8, DT_STRING = 1, 2, 3, 4, 5, 6, 7
DT_INT64, DT_BOOL, DT_HALF, DT_UINT16, DT_UINT32, DT_UINT64 = 9, 10, 19, 17, 22, 23
NUMPY_DTYPES: dict[int, Any] = {
    DT_FLOAT: np.float32, DT_DOUBLE: np.float64, DT_INT32: np.int32, DT_UINT8: np.uint8, DT_INT16: np.int16,
    DT_INT8: np.int8, DT_INT64: np.int64, DT_BOOL: np.bool_, DT_HALF: np.float16, DT_UINT16: np.uint16,
    DT_UINT32: np.uint32, DT_UINT64: np.uint64,
}
# TensorProto field holding the values of each dtype when tensor_content is empty.
_VALUE_FIELDS: dict[int, str] = {
    DT_FLOAT: "float_val", DT_DOUBLE: "double_val", DT_INT32: "int_val", DT_UINT8: "int_val",
    DT_INT16: "int_val", DT_INT8: "int_val", DT_UINT16: "int_val", DT_INT64: "int64_val", DT_BOOL: "bool_val",
    DT_HALF: "half_val", DT_UINT32: "uint32_val", DT_UINT64: "uint64_val",
}

# (message, [(field name, number, type, label, message type name)])
_OPT, _REP = _F.LABEL_OPTIONAL, _F.LABEL_REPEATED
_MESSAGES: list[tuple[str, list[tuple[str, int, int, int, str]]]] = [
    ("TensorShapeProto", [("dim", 2, _F.TYPE_MESSAGE, _REP, "TensorShapeProto.Dim"),
                          ("unknown_rank", 3, _F.TYPE_BOOL, _OPT, "")]),
    ("TensorProto", [
        ("dtype", 1, _F.TYPE_INT32, _OPT, ""), ("tensor_shape", 2, _F.TYPE_MESSAGE, _OPT, "TensorShapeProto"),
        ("version_number", 3, _F.TYPE_INT32, _OPT, ""), ("tensor_content", 4, _F.TYPE_BYTES, _OPT, ""),
        ("float_val", 5, _F.TYPE_FLOAT, _REP, ""), ("double_val", 6, _F.TYPE_DOUBLE, _REP, ""),
        ("int_val", 7, _F.TYPE_INT32, _REP, ""), ("string_val", 8, _F.TYPE_BYTES, _REP, ""),
        ("int64_val", 10, _F.TYPE_INT64, _REP, ""), ("bool_val", 11, _F.TYPE_BOOL, _REP, ""),
        ("half_val", 13, _F.TYPE_INT32, _REP, ""), ("uint32_val", 16, _F.TYPE_UINT32, _REP, ""),
        ("uint64_val", 17, _F.TYPE_UINT64, _REP, "")]),
    ("NameAttrList", [("name", 1, _F.TYPE_STRING, _OPT, "")]),
    ("AttrValue", [
        ("list", 1, _F.TYPE_MESSAGE, _OPT, "AttrValue.ListValue"), ("s", 2, _F.TYPE_BYTES, _OPT, ""),
        ("i", 3, _F.TYPE_INT64, _OPT, ""), ("f", 4, _F.TYPE_FLOAT, _OPT, ""), ("b", 5, _F.TYPE_BOOL, _OPT, ""),
        ("type", 6, _F.TYPE_INT32, _OPT, ""), ("shape", 7, _F.TYPE_MESSAGE, _OPT, "TensorShapeProto"),
        ("tensor", 8, _F.TYPE_MESSAGE, _OPT, "TensorProto"), ("placeholder", 9, _F.TYPE_STRING, _OPT, ""),
        ("func", 10, _F.TYPE_MESSAGE, _OPT, "NameAttrList")]),
    ("NodeDef", [
        ("name", 1, _F.TYPE_STRING, _OPT, ""), ("op", 2, _F.TYPE_STRING, _OPT, ""),
        ("input", 3, _F.TYPE_STRING, _REP, ""), ("device", 4, _F.TYPE_STRING, _OPT, ""),
        ("attr", 5, _F.TYPE_MESSAGE, _REP, "NodeDef.AttrEntry")]),
    ("VersionDef", [("producer", 1, _F.TYPE_INT32, _OPT, ""), ("min_consumer", 2, _F.TYPE_INT32, _OPT, "")]),
    ("GraphDef", [("node", 1, _F.TYPE_MESSAGE, _REP, "NodeDef"), ("versions", 4, _F.TYPE_MESSAGE, _OPT, "VersionDef")]),
    ("TensorShapeProto.Dim", [("size", 1, _F.TYPE_INT64, _OPT, ""), ("name", 2, _F.TYPE_STRING, _OPT, "")]),
    ("AttrValue.ListValue", [
        ("s", 2, _F.TYPE_BYTES, _REP, ""), ("i", 3, _F.TYPE_INT64, _REP, ""), ("f", 4, _F.TYPE_FLOAT, _REP, ""),
        ("b", 5, _F.TYPE_BOOL, _REP, ""), ("type", 6, _F.TYPE_INT32, _REP, ""),
        ("shape", 7, _F.TYPE_MESSAGE, _REP, "TensorShapeProto"), ("tensor", 8, _F.TYPE_MESSAGE, _REP, "TensorProto")]),
    ("NodeDef.AttrEntry", [("key", 1, _F.TYPE_STRING, _OPT, ""), ("value", 2, _F.TYPE_MESSAGE, _OPT, "AttrValue")]),
]
# The AttrValue fields that form its "value" oneof.
_ATTR_ONEOF = ("list", "s", "i", "f", "b", "type", "shape", "tensor", "placeholder", "func")


def _build_file() -> descriptor_pb2.FileDescriptorProto:
    file = descriptor_pb2.FileDescriptorProto(name="openrknn_tf_graph.proto", package=_PACKAGE, syntax="proto3")
    declared: dict[str, descriptor_pb2.DescriptorProto] = {}
    for full_name, fields in _MESSAGES:
        outer, _, inner = full_name.partition(".")
        if inner:
            message = declared[outer].nested_type.add(name=inner)
        else:
            message = file.message_type.add(name=outer)
        declared[full_name] = message
        if inner == "AttrEntry":
            message.options.map_entry = True
        if full_name == "AttrValue":
            message.oneof_decl.add(name="value")
        for name, number, ftype, label, type_name in fields:
            field = message.field.add(name=name, number=number, type=ftype, label=label)
            if type_name:
                field.type_name = f".{_PACKAGE}.{type_name}"
            if full_name == "AttrValue" and name in _ATTR_ONEOF:
                field.oneof_index = 0
    return file


_CLASSES = message_classes(_build_file(), ("GraphDef", "NodeDef", "AttrValue", "TensorProto", "TensorShapeProto"))
GraphDef = _CLASSES["GraphDef"]
NodeDef = _CLASSES["NodeDef"]
AttrValue = _CLASSES["AttrValue"]
TensorProto = _CLASSES["TensorProto"]
TensorShapeProto = _CLASSES["TensorShapeProto"]


def tensor_to_numpy(tensor: Any) -> np.ndarray:
    """The value of a ``TensorProto`` as a numpy array.

    Values come from ``tensor_content`` (raw little-endian bytes) when present, else from the
    typed repeated field; a repeated field shorter than the shape is padded with its last value,
    as TensorFlow does for splat constants.

    Raises:
        ValueError: the dtype is not numeric or the data does not fit the shape.
    """
    dtype = NUMPY_DTYPES.get(tensor.dtype)
    if dtype is None:
        raise ValueError(f"tensor dtype {tensor.dtype} is not a supported numeric type")
    shape = [int(d.size) for d in tensor.tensor_shape.dim]
    count = int(np.prod(shape)) if shape else 1
    if tensor.tensor_content:
        array = np.frombuffer(tensor.tensor_content, dtype=np.dtype(dtype).newbyteorder("<")).astype(dtype)
        return array.reshape(shape)
    values = list(getattr(tensor, _VALUE_FIELDS[tensor.dtype]))
    if tensor.dtype == DT_HALF:
        array = np.asarray(values, np.uint16).view(np.float16)
    else:
        array = np.asarray(values).astype(dtype)
    if array.size == count:
        return array.reshape(shape)
    if array.size == 0:
        return np.zeros(shape, dtype)
    if array.size < count:
        return np.concatenate([array, np.full(count - array.size, array[-1], dtype)]).reshape(shape)
    raise ValueError(f"tensor holds {array.size} values but its shape {shape} needs {count}")


def numpy_to_tensor(array: Any, dtype: Any = None) -> Any:
    """A ``TensorProto`` holding ``array`` in ``tensor_content`` (used by tests and predef values)."""
    array = np.asarray(array, dtype=dtype)
    codes = {np.dtype(v): k for k, v in NUMPY_DTYPES.items()}
    if array.dtype not in codes:
        raise ValueError(f"numpy dtype {array.dtype} has no TensorFlow equivalent here")
    tensor = TensorProto(dtype=codes[array.dtype], tensor_content=array.astype(array.dtype.newbyteorder("<")).tobytes())
    for size in array.shape:
        tensor.tensor_shape.dim.add(size=int(size))
    return tensor
