"""Message classes from a schema declared in Python (no protoc): used by the Caffe and TensorFlow readers."""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory


def message_classes(file: descriptor_pb2.FileDescriptorProto, names: Iterable[str]) -> dict[str, Any]:
    """Message classes of ``file``, in a private pool so they never clash with a framework's own."""
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    # protobuf >= 4.22 has GetMessageClass; older releases only MessageFactory.GetPrototype
    make = getattr(message_factory, "GetMessageClass", None) or message_factory.MessageFactory(pool).GetPrototype
    return {name: make(pool.FindMessageTypeByName(f"{file.package}.{name}")) for name in names}
