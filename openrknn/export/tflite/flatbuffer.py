"""A TFLite model in memory (tensors, operators) and its serialisation with the ``tflite`` schema's
generated builder functions over a ``flatbuffers.Builder``."""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any

import numpy as np

_TYPES = {"float32": 0, "int32": 2, "uint8": 3, "int64": 4, "int8": 9}
_SCHEMA_VERSION = 3


@dataclass
class Quant:
    """``r = scale·(q − zero_point)``; per channel along ``axis`` when ``scale`` has several values."""

    scale: np.ndarray
    zero_point: np.ndarray
    axis: int = 0


@dataclass
class Tensor:
    name: str
    shape: list[int]
    dtype: str                       # one of _TYPES
    data: np.ndarray | None = None   # constant contents
    quant: Quant | None = None


@dataclass
class Operator:
    op: str                          # BuiltinOperator name, e.g. 'CONV_2D'
    inputs: list[int]                # tensor indices (-1: optional input left out)
    outputs: list[int]
    options: str | None = None       # options table name, e.g. 'Conv2DOptions'
    fields: dict[str, Any] = field(default_factory=dict)


@dataclass
class Graph:
    tensors: list[Tensor] = field(default_factory=list)
    operators: list[Operator] = field(default_factory=list)
    inputs: list[int] = field(default_factory=list)
    outputs: list[int] = field(default_factory=list)

    def add(self, tensor: Tensor) -> int:
        self.tensors.append(tensor)
        return len(self.tensors) - 1


def _schema(name: str) -> Any:
    return importlib.import_module(f"tflite.{name}")


def _vector(builder: Any, table: str, field_name: str, values: list[int] | np.ndarray, kind: str) -> int:
    getattr(_schema(table), f"{table}Start{field_name}Vector")(builder, len(values))
    prepend = getattr(builder, f"Prepend{kind}")
    for value in reversed(list(values)):
        prepend(value)
    return builder.EndVector()


def _offsets(builder: Any, table: str, field_name: str, offsets: list[int]) -> int:
    getattr(_schema(table), f"{table}Start{field_name}Vector")(builder, len(offsets))
    for offset in reversed(offsets):
        builder.PrependUOffsetTRelative(offset)
    return builder.EndVector()


def _table(builder: Any, name: str, fields: dict[str, Any]) -> int:
    """A table from its fields (the schema's CamelCase names; scalars, or offsets of objects built before)."""
    module = _schema(name)
    getattr(module, f"{name}Start")(builder)
    for key, value in fields.items():
        getattr(module, f"{name}Add{key}")(builder, value)
    return getattr(module, f"{name}End")(builder)


def serialize(graph: Graph, description: str = "openrknn") -> bytes:
    """The ``.tflite`` bytes of ``graph`` (one subgraph)."""
    import flatbuffers
    builder = flatbuffers.Builder(1024)
    opcodes: list[str] = []
    for operator in graph.operators:
        if operator.op not in opcodes:
            opcodes.append(operator.op)
    builtin = _schema("BuiltinOperator").BuiltinOperator
    options_enum = _schema("BuiltinOptions").BuiltinOptions

    buffers = [_buffer(builder, None)] + [_buffer(builder, t.data) for t in graph.tensors]
    tensors = []
    for index, tensor in enumerate(graph.tensors):
        name = builder.CreateString(tensor.name)
        shape = _vector(builder, "Tensor", "Shape", tensor.shape, "Int32")
        quant = _quantization(builder, tensor.quant) if tensor.quant is not None else None
        module = _schema("Tensor")
        module.TensorStart(builder)
        module.TensorAddShape(builder, shape)
        module.TensorAddType(builder, _TYPES[tensor.dtype])
        module.TensorAddBuffer(builder, index + 1 if tensor.data is not None else 0)
        module.TensorAddName(builder, name)
        if quant is not None:
            module.TensorAddQuantization(builder, quant)
        tensors.append(module.TensorEnd(builder))
    operators = []
    for operator in graph.operators:
        options = _table(builder, operator.options, operator.fields) if operator.options else None
        inputs = _vector(builder, "Operator", "Inputs", operator.inputs, "Int32")
        outputs = _vector(builder, "Operator", "Outputs", operator.outputs, "Int32")
        module = _schema("Operator")
        module.OperatorStart(builder)
        module.OperatorAddOpcodeIndex(builder, opcodes.index(operator.op))
        module.OperatorAddInputs(builder, inputs)
        module.OperatorAddOutputs(builder, outputs)
        if options is not None:
            module.OperatorAddBuiltinOptionsType(builder, getattr(options_enum, operator.options))
            module.OperatorAddBuiltinOptions(builder, options)
        operators.append(module.OperatorEnd(builder))
    tensor_vector = _offsets(builder, "SubGraph", "Tensors", tensors)
    operator_vector = _offsets(builder, "SubGraph", "Operators", operators)
    inputs = _vector(builder, "SubGraph", "Inputs", graph.inputs, "Int32")
    outputs = _vector(builder, "SubGraph", "Outputs", graph.outputs, "Int32")
    subgraph = _table(builder, "SubGraph", {"Tensors": tensor_vector, "Inputs": inputs, "Outputs": outputs,
                                            "Operators": operator_vector, "Name": builder.CreateString("main")})
    codes = []
    for op in opcodes:
        code = getattr(builtin, op)
        codes.append(_table(builder, "OperatorCode", {"DeprecatedBuiltinCode": min(code, 127), "BuiltinCode": code,
                                                      "Version": 1}))
    fields = {"Version": _SCHEMA_VERSION, "OperatorCodes": _offsets(builder, "Model", "OperatorCodes", codes),
              "Subgraphs": _offsets(builder, "Model", "Subgraphs", [subgraph]),
              "Description": builder.CreateString(description),
              "Buffers": _offsets(builder, "Model", "Buffers", buffers)}
    builder.Finish(_table(builder, "Model", fields), file_identifier=b"TFL3")
    return bytes(builder.Output())

def _buffer(builder: Any, data: np.ndarray | None) -> int:
    module = _schema("Buffer")
    if data is None:
        module.BufferStart(builder)
        return module.BufferEnd(builder)
    raw = np.ascontiguousarray(data).reshape(-1).view(np.uint8)
    builder.Prep(16, raw.size)   # 16-byte aligned: kernels read weights in place
    blob = builder.CreateNumpyVector(raw)
    module.BufferStart(builder)
    module.BufferAddData(builder, blob)
    return module.BufferEnd(builder)


def _quantization(builder: Any, quant: Quant) -> int:
    scale = _vector(builder, "QuantizationParameters", "Scale", np.asarray(quant.scale, np.float32).ravel(), "Float32")
    zero = _vector(builder, "QuantizationParameters", "ZeroPoint", np.asarray(quant.zero_point, np.int64).ravel(),
                   "Int64")
    module = _schema("QuantizationParameters")
    module.QuantizationParametersStart(builder)
    module.QuantizationParametersAddScale(builder, scale)
    module.QuantizationParametersAddZeroPoint(builder, zero)
    module.QuantizationParametersAddQuantizedDimension(builder, quant.axis)
    return module.QuantizationParametersEnd(builder)
