"""Read a ``.tflite`` flatbuffer into plain records (tensors, operators, constant data).

The flatbuffer schema bindings come from the ``tflite`` package; this module only walks them
once and turns what the converters need into Python values, so that a truncated or foreign
file fails here, with one clear message, instead of deep inside a converter.

Constant data is decoded as TFLite stores it: little-endian arrays in the model's buffers (or
past the flatbuffer for models > 2 GB), float16 weights as float16, sparse weights in the
TACO-style format described by ``SparsityParameters`` (see :func:`densify`).

Example:
    >>> graph = read_tflite("face_detection_short_range.tflite")   # doctest: +SKIP
    >>> graph.operators[0].name, graph.tensors[graph.inputs[0]].shape
    ('DEQUANTIZE', [1, 128, 128, 3])
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from openrknn.errors import ModelLoadError
from openrknn.frontends import require_file

_IDENTIFIER = b"TFL3"

# TensorType enum value -> numpy dtype (types a vision model can hold).
NUMPY_TYPES: dict[int, Any] = {
    0: np.float32, 1: np.float16, 2: np.int32, 3: np.uint8, 4: np.int64, 6: np.bool_,
    7: np.int16, 9: np.int8, 10: np.float64, 12: np.uint64, 15: np.uint32, 16: np.uint16,
}


@dataclass
class Tensor:
    """One TFLite tensor.

    Attributes:
        name: the tensor name (unique within the graph after reading).
        shape: static shape (``[]`` for scalars).
        dtype: numpy dtype of the stored values.
        data: constant value as stored (None for activations).
        scale / zero_point / quant_axis: affine quantization parameters, if any
            (``real = scale · (q − zero_point)``).
        sparsity: the ``SparsityParameters`` table of a sparse constant, else None.
    """

    name: str
    shape: list[int]
    dtype: Any
    data: np.ndarray | None = None
    scale: np.ndarray | None = None
    zero_point: np.ndarray | None = None
    quant_axis: int = 0
    sparsity: Any = None

    @property
    def quantized(self) -> bool:
        return self.scale is not None and self.scale.size > 0


@dataclass
class Operator:
    """One TFLite operator: its builtin name (or custom code), tensor indices and options."""

    index: int
    name: str
    inputs: list[int]
    outputs: list[int]
    options: Any = None
    custom_code: str = ""
    custom_options: bytes = b""

    def input(self, k: int) -> int:
        """Tensor index of input ``k``; -1 when absent (optional inputs)."""
        return self.inputs[k] if k < len(self.inputs) else -1


@dataclass
class TFLiteGraph:
    """The main subgraph of a TFLite model."""

    path: str
    tensors: list[Tensor]
    operators: list[Operator]
    inputs: list[int]
    outputs: list[int]
    description: str = ""
    extra_subgraphs: int = 0
    op_names: dict[int, str] = field(default_factory=dict)


def read_tflite(path: str) -> TFLiteGraph:
    """Parse ``path`` and return its main subgraph.

    Raises:
        ModelLoadError: the file is missing, not a TFLite flatbuffer, or truncated.
    """
    require_file(path, "load_tflite: model file")
    with open(path, "rb") as f:
        buf = f.read()
    if len(buf) < 8 or buf[4:8] != _IDENTIFIER:
        raise ModelLoadError(f"load_tflite: '{path}' is not a TFLite model (no 'TFL3' flatbuffer identifier); "
                             "pass a .tflite file made by the TFLite converter")
    import tflite

    try:
        model = tflite.Model.GetRootAsModel(buf, 0)
        return _read_model(path, buf, model, tflite)
    except ModelLoadError:
        raise
    except Exception as e:  # flatbuffers raises struct.error / IndexError / ... on damaged data
        raise ModelLoadError(f"load_tflite: '{path}' is damaged or truncated ({type(e).__name__}: {e}); "
                             "export the model again") from e


def _read_model(path: str, buf: bytes, model: Any, tflite: Any) -> TFLiteGraph:
    if model.SubgraphsLength() < 1:
        raise ModelLoadError(f"load_tflite: '{path}' has no subgraph")
    op_names = {v: k for k, v in vars(tflite.BuiltinOperator).items() if not k.startswith("_")}
    option_names = {v: k for k, v in vars(tflite.BuiltinOptions).items() if not k.startswith("_")}
    graph = model.Subgraphs(0)
    tensors = [_read_tensor(path, buf, model, graph.Tensors(i), tflite) for i in range(graph.TensorsLength())]
    _make_names_unique(tensors)
    operators = []
    for i in range(graph.OperatorsLength()):
        op = graph.Operators(i)
        code = model.OperatorCodes(op.OpcodeIndex())
        builtin = max(code.BuiltinCode(), code.DeprecatedBuiltinCode())
        name = op_names.get(builtin, f"BUILTIN_{builtin}")
        custom = code.CustomCode().decode("utf-8", "replace") if code.CustomCode() else ""
        operators.append(Operator(
            index=i, name=name, inputs=[int(v) for v in _ints(op.InputsAsNumpy())],
            outputs=[int(v) for v in _ints(op.OutputsAsNumpy())],
            options=_options(op, option_names, tflite), custom_code=custom,
            custom_options=bytes(_ints(op.CustomOptionsAsNumpy()).astype(np.uint8).tobytes())))
    description = model.Description().decode("utf-8", "replace") if model.Description() else ""
    return TFLiteGraph(path=path, tensors=tensors, operators=operators,
                       inputs=[int(v) for v in _ints(graph.InputsAsNumpy())],
                       outputs=[int(v) for v in _ints(graph.OutputsAsNumpy())],
                       description=description, extra_subgraphs=model.SubgraphsLength() - 1)


def _ints(values: Any) -> np.ndarray:
    """flatbuffers returns 0 (not an empty array) for an absent vector."""
    return values if isinstance(values, np.ndarray) else np.zeros(0, np.int32)


def _options(op: Any, option_names: dict[int, str], tflite: Any) -> Any:
    kind = op.BuiltinOptionsType()
    table = op.BuiltinOptions()
    if not kind or table is None:
        return None
    cls = getattr(tflite, option_names.get(kind, ""), None)
    if cls is None:
        return None
    options = cls()
    options.Init(table.Bytes, table.Pos)
    return options


def _read_tensor(path: str, buf: bytes, model: Any, t: Any, tflite: Any) -> Tensor:
    name = t.Name().decode("utf-8", "replace") if t.Name() else ""
    dtype = NUMPY_TYPES.get(t.Type())
    if dtype is None:
        type_names = {v: k for k, v in vars(tflite.TensorType).items() if not k.startswith("_")}
        raise ModelLoadError(f"load_tflite: '{path}': tensor '{name}' has type "
                             f"{type_names.get(t.Type(), t.Type())}, which vision models on the NPU do not use; "
                             "supported: float32/16/64, int8/16/32/64, uint8/16/32/64, bool")
    tensor = Tensor(name=name, shape=[int(v) for v in _ints(t.ShapeAsNumpy())], dtype=np.dtype(dtype),
                    sparsity=t.Sparsity())
    raw = _buffer_bytes(path, buf, model.Buffers(t.Buffer())) if t.Buffer() < model.BuffersLength() else b""
    if raw:
        data = np.frombuffer(raw, dtype=np.dtype(dtype).newbyteorder("<")).astype(dtype)
        tensor.data = data if tensor.sparsity is not None else data.reshape(tensor.shape)
    q = t.Quantization()
    if q is not None and q.ScaleLength() > 0:
        tensor.scale = np.asarray(q.ScaleAsNumpy(), np.float32)
        tensor.zero_point = np.asarray(_ints(q.ZeroPointAsNumpy()), np.int64)
        if tensor.zero_point.size == 0:
            tensor.zero_point = np.zeros_like(tensor.scale, np.int64)
        tensor.quant_axis = int(q.QuantizedDimension())
    return tensor


def _buffer_bytes(path: str, buf: bytes, buffer: Any) -> bytes:
    offset, size = int(buffer.Offset()), int(buffer.Size())
    if offset > 1:   # data stored after the flatbuffer (models over 2 GB)
        if offset + size > len(buf):
            raise ModelLoadError(f"load_tflite: '{path}' is truncated (a weight buffer ends past the file end)")
        return buf[offset:offset + size]
    data = buffer.DataAsNumpy()
    return data.tobytes() if isinstance(data, np.ndarray) else b""


def _make_names_unique(tensors: list[Tensor]) -> None:
    seen: set[str] = set()
    for i, t in enumerate(tensors):
        name = t.name or f"tensor_{i}"
        k = 1
        while name in seen:
            name = f"{t.name}_{k}"
            k += 1
        seen.add(name)
        t.name = name


def densify(tensor: Tensor) -> np.ndarray:
    """The dense value of a sparse constant (``SparsityParameters``, TFLite's DENSIFY input).

    The stored values are listed in traversal order: level ``l`` walks dimension
    ``traversal_order[l]`` of the *blocked* shape (original dimensions, then one extra dimension
    per block in ``block_map``), either densely (``dense_size`` steps) or in CSR form (the
    children of parent position ``p`` are ``array_indices[array_segments[p]:array_segments[p+1]]``).
    Original coordinate of a blocked dimension ``d`` = ``outer · block_size + inner``.
    """
    sp = tensor.sparsity
    order = [int(v) for v in _ints(sp.TraversalOrderAsNumpy())]
    block_map = [int(v) for v in _ints(sp.BlockMapAsNumpy())]
    rank = len(tensor.shape)
    position = np.zeros(1, np.int64)       # index into the next level's segments, per path
    coords = np.zeros((1, len(order)), np.int64)
    for level, dim in enumerate(order):
        meta = sp.DimMetadata(level)
        if meta.Format() == 0:   # DENSE
            size = int(meta.DenseSize())
            position = (position[:, None] * size + np.arange(size)).ravel()
            coords = np.repeat(coords, size, axis=0)
            coords[:, dim] = np.tile(np.arange(size), len(coords) // size)
        else:                    # SPARSE_CSR
            segments, indices = _index_vector(meta.ArraySegments(), meta.ArraySegmentsType()), \
                _index_vector(meta.ArrayIndices(), meta.ArrayIndicesType())
            starts, ends = segments[position], segments[position + 1]
            counts = ends - starts
            position = np.concatenate([np.arange(s, e) for s, e in zip(starts, ends)]) if len(starts) else starts
            coords = np.repeat(coords, counts, axis=0)
            coords[:, dim] = indices[position]
    dense = np.zeros(tensor.shape, tensor.data.dtype)
    index = [coords[:, d].copy() for d in range(rank)]
    for k, d in enumerate(block_map):
        block = int(sp.DimMetadata(order.index(rank + k)).DenseSize())  # block dimensions are dense
        index[d] = index[d] * block + coords[:, rank + k]
    values = tensor.data.ravel()
    if values.size != len(coords):
        raise ModelLoadError(f"load_tflite: sparse tensor '{tensor.name}' holds {values.size} values but its "
                             f"sparsity metadata lists {len(coords)}")
    dense[tuple(index)] = values
    return dense


def _index_vector(table: Any, kind: int) -> np.ndarray:
    import tflite

    cls = {1: tflite.Int32Vector, 2: tflite.Uint16Vector, 3: tflite.Uint8Vector}.get(kind)
    if cls is None or table is None:
        return np.zeros(0, np.int64)
    vec = cls()
    vec.Init(table.Bytes, table.Pos)
    return np.asarray(_ints(vec.ValuesAsNumpy()), np.int64)
