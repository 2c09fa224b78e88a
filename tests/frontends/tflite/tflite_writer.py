"""Write small ``.tflite`` files for the tests, with the flatbuffer object API LiteRT ships.

``ai_edge_litert`` (the test oracle) carries the full generated schema, including the object
API (``ModelT`` ... ``Pack``), so test models are written without TensorFlow.

Example:
    >>> w = ModelWriter()
    >>> x = w.tensor("x", [1, 4, 4, 3])
    >>> y = w.tensor("y", [1, 4, 4, 3])
    >>> w.op("RELU", [x], [y])
    >>> w.save(path, [x], [y])
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import flatbuffers
import numpy as np

schema = __import__("ai_edge_litert.schema_py_generated", fromlist=["ModelT"])

_TYPES = {np.dtype(np.float32): 0, np.dtype(np.float16): 1, np.dtype(np.int32): 2, np.dtype(np.uint8): 3,
          np.dtype(np.int64): 4, np.dtype(np.int8): 9, np.dtype(np.int16): 7}


class ModelWriter:
    """Collects tensors and operators of one subgraph and writes a TFLite flatbuffer."""

    def __init__(self) -> None:
        self.buffers = [schema.BufferT()]          # buffer 0: the empty buffer of activations
        self.tensors: list[Any] = []
        self.operators: list[Any] = []
        self.opcodes: list[Any] = []
        self._opcode_index: dict[tuple[int, str], int] = {}

    def tensor(self, name: str, shape: list[int], dtype: Any = np.float32, data: np.ndarray | None = None,
               quant: tuple[Any, Any, int] | None = None, sparsity: Any = None,
               raw: np.ndarray | None = None) -> int:
        """Add a tensor (constant when ``data`` is given; ``raw`` overrides the stored values)."""
        t = schema.TensorT()
        t.name, t.shape, t.type = name, list(shape), _TYPES[np.dtype(dtype)]
        t.buffer = 0
        stored = raw if raw is not None else data
        if stored is not None:
            buf = schema.BufferT()
            buf.data = list(np.ascontiguousarray(np.asarray(stored, dtype)).view(np.uint8).ravel())
            self.buffers.append(buf)
            t.buffer = len(self.buffers) - 1
        if quant is not None:
            q = schema.QuantizationParametersT()
            q.scale = [float(v) for v in np.atleast_1d(quant[0])]
            q.zeroPoint = [int(v) for v in np.atleast_1d(quant[1])]
            q.quantizedDimension = quant[2]
            t.quantization = q
        t.sparsity = sparsity
        self.tensors.append(t)
        return len(self.tensors) - 1

    def const(self, name: str, value: np.ndarray, dtype: Any = None) -> int:
        value = np.asarray(value, dtype or np.asarray(value).dtype)
        return self.tensor(name, list(value.shape), value.dtype, value)

    def op(self, name: str, inputs: list[int], outputs: list[int], options: Any = None,
           custom_code: str = "", custom_options: bytes = b"", version: int = 1) -> None:
        """Add an operator: a builtin by name (``"CONV_2D"``) or ``"CUSTOM"`` with ``custom_code``."""
        code = getattr(schema.BuiltinOperator, name)
        key = (code, custom_code)
        if key not in self._opcode_index:
            oc = schema.OperatorCodeT()
            oc.builtinCode, oc.deprecatedBuiltinCode = code, min(code, 127)
            oc.customCode = custom_code or None
            oc.version = version
            self.opcodes.append(oc)
            self._opcode_index[key] = len(self.opcodes) - 1
        o = schema.OperatorT()
        o.opcodeIndex, o.inputs, o.outputs = self._opcode_index[key], list(inputs), list(outputs)
        if options is not None:
            o.builtinOptionsType = getattr(schema.BuiltinOptions, type(options).__name__[:-1])
            o.builtinOptions = options
        if custom_options:
            o.customOptions = list(custom_options)
        self.operators.append(o)

    def to_bytes(self, inputs: list[int], outputs: list[int]) -> bytes:
        graph = schema.SubGraphT()
        graph.tensors, graph.operators, graph.inputs, graph.outputs = self.tensors, self.operators, inputs, outputs
        graph.name = "main"
        model = schema.ModelT()
        model.version, model.operatorCodes, model.subgraphs, model.buffers = 3, self.opcodes, [graph], self.buffers
        model.description = "openrknn test model"
        builder = flatbuffers.Builder(1024)
        builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
        return bytes(builder.Output())

    def save(self, path: Path, inputs: list[int], outputs: list[int]) -> Path:
        Path(path).write_bytes(self.to_bytes(inputs, outputs))
        return Path(path)


def options(kind: str, **fields: Any) -> Any:
    """An options object, e.g. ``options("Conv2DOptions", padding=0, strideW=1, strideH=1)``."""
    obj = getattr(schema, kind + "T")()
    for key, value in fields.items():
        if not hasattr(obj, key):
            raise AttributeError(f"{kind} has no field '{key}'")
        setattr(obj, key, value)
    return obj
