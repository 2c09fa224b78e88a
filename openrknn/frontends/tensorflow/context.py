"""Conversion state shared by the TensorFlow op converters: values, layouts, constants, attributes.

TensorFlow vision graphs are NHWC; ONNX convolutions and pools are NCHW. Rather than wrap every
convolution in a pair of Transposes, each converted tensor remembers its layout: a 4-D value
whose ``channels_first`` flag is set holds the NCHW permutation of the TensorFlow NHWC tensor.
Convolution-like ops produce channels-first values, layout-neutral ops (activations,
element-wise arithmetic with broadcast constants, concat, pad, mean) keep the layout and remap
their axes or constants, and ops whose meaning depends on the memory order (Reshape, MatMul)
and the graph outputs ask for the TensorFlow layout, which inserts one Transpose where needed.

Constants stay numpy arrays until an ONNX node consumes them, so constant sub-graphs of frozen
graphs (e.g. an unfused batch norm's ``Rsqrt(var + eps) * gamma``) fold in numpy.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from openrknn.errors import ModelLoadError
from openrknn.frontends.onnx_builder import GraphBuilder
from openrknn.frontends.tensorflow.schema import tensor_to_numpy

NHWC_TO_NCHW = (0, 3, 1, 2)
NCHW_TO_NHWC = (0, 2, 3, 1)
# TensorFlow NHWC axis -> position of that axis in the channels-first ONNX tensor.
CF_AXIS = {0: 0, 1: 2, 2: 3, 3: 1}


@dataclass
class Value:
    """One TensorFlow tensor after conversion.

    Attributes:
        name: ONNX tensor name; for a constant, the TensorFlow node name (a hint for its initializer).
        rank: TensorFlow rank.
        channels_first: the ONNX tensor is the NCHW permutation of the 4-D NHWC TensorFlow tensor.
        const: the value when it is known at conversion time (TensorFlow layout).
    """

    name: str
    rank: int
    channels_first: bool = False
    const: np.ndarray | None = None


class Context:
    """Values of the converted tensors and helpers to emit ONNX nodes for one graph.

    Args:
        builder: the ONNX graph under construction.
        source: file name used in error messages.
    """

    def __init__(self, builder: GraphBuilder, source: str) -> None:
        self.b = builder
        self.source = source
        self.values: dict[str, Value] = {}
        self._tf_copy: dict[str, str] = {}
        self._cf_copy: dict[str, str] = {}
        self._consts: dict[tuple[int, bool], str] = {}
        # ONNX output name -> the NodeProto that makes it; TensorFlow tensor key -> number of consumers.
        self.producers: dict[str, Any] = {}
        self.uses: dict[str, int] = {}

    # ------------------------------------------------------------------ values
    def input(self, node: Any, index: int) -> Value:
        """The value feeding data input ``index`` of ``node`` (control inputs are skipped)."""
        data = [i for i in node.input if not i.startswith("^")]
        if index >= len(data):
            raise ModelLoadError(f"{self.source}: node '{node.name}' ({node.op}) has {len(data)} inputs, "
                                 f"input {index} is missing")
        return self.values[tensor_key(data[index])]

    def data_inputs(self, node: Any) -> list[Value]:
        """Every data input of ``node``."""
        return [self.values[tensor_key(i)] for i in node.input if not i.startswith("^")]

    def const_input(self, node: Any, index: int, what: str) -> np.ndarray:
        """Input ``index`` of ``node`` as a numpy array; it must be constant in a frozen graph."""
        value = self.input(node, index)
        if value.const is None:
            raise ModelLoadError(f"{self.source}: node '{node.name}' ({node.op}) needs a constant {what}, but it is "
                                 "computed at run time; freeze the graph or give the value in predef_file")
        return value.const

    def emit(self, op_type: str, inputs: Sequence[str], node: Any, rank: int, channels_first: bool = False,
             suffix: str = "", **attrs: Any) -> Value:
        """Append one ONNX node named after the TensorFlow node and return its output value."""
        name = node.name + suffix
        out = name if not channels_first else f"{name}/nchw"
        onnx_name = self.b.node(op_type, list(inputs), name=name, outputs=[out], **attrs)
        self.producers[onnx_name] = self.b.nodes[-1]
        return Value(onnx_name, rank, channels_first and rank == 4)

    def const_name(self, array: np.ndarray, hint: str, dtype: Any = np.float32) -> str:
        """Emit ``array`` as an initializer and return its name."""
        return self.b.const(hint, np.asarray(array), dtype=dtype)

    # ------------------------------------------------------------------ layouts
    def as_tf(self, value: Value, hint: str = "", name: str | None = None) -> str:
        """ONNX name of ``value`` in TensorFlow layout (adds a Transpose for a channels-first value)."""
        if value.const is not None:
            return self._emit_const(value, False, hint)
        if not value.channels_first:
            return value.name
        if value.name not in self._tf_copy:
            base = name or value.name.removesuffix("/nchw")
            self._tf_copy[value.name] = self.b.node("Transpose", [value.name], name=f"{base}/to_nhwc",
                                                    outputs=[base], perm=list(NCHW_TO_NHWC))
        return self._tf_copy[value.name]

    def as_cf(self, value: Value, hint: str = "") -> str:
        """ONNX name of the 4-D ``value`` in channels-first (NCHW) layout."""
        if value.rank != 4:
            raise ModelLoadError(f"{self.source}: tensor '{value.name or hint}' has rank {value.rank}, "
                                 "a 4-D NHWC tensor is needed here")
        if value.const is not None:
            return self._emit_const(value, True, hint)
        if value.channels_first:
            return value.name
        if value.name not in self._cf_copy:
            self._cf_copy[value.name] = self.b.node("Transpose", [value.name], name=f"{value.name}/to_nchw",
                                                    perm=list(NHWC_TO_NCHW))
        return self._cf_copy[value.name]

    def _emit_const(self, value: Value, channels_first: bool, hint: str) -> str:
        key = (id(value), channels_first)
        if key not in self._consts:
            array = np.transpose(value.const, NHWC_TO_NCHW) if channels_first else value.const
            self._consts[key] = self.const_name(array, value.name or hint or "const", dtype=_onnx_dtype(array))
        return self._consts[key]

    def spatial_input(self, node: Any) -> tuple[Value, str, bool, list[int]]:
        """Input 0 of a 4-D window op: (value, ONNX name in NCHW, node is NHWC, TensorFlow shape).

        An NHWC node reads the channels-first copy; an NCHW node reads the tensor as it is.
        """
        last = channels_last(node)
        value = self.input(node, 0)
        name = self.as_cf(value, node.name) if last else self.as_tf(value, node.name)
        return value, name, last, self.tf_shape(value)

    def reduced(self, value: Value, axes: Sequence[int], keepdims: bool, hint: str) -> tuple[str, bool, list[int]]:
        """Operand, output layout and ONNX axes of a reduction/squeeze of TensorFlow ``axes``.

        A channels-first input stays channels-first when ``keepdims``; without it the result is in
        TensorFlow layout when the kept axes appear in the same order in NCHW (e.g. reducing H, W
        of NHWC leaves ``[N, C]`` either way); otherwise the input is brought back to NHWC first.
        """
        if value.channels_first:
            cf_axes = sorted(CF_AXIS[a] for a in axes)
            if keepdims:
                return value.name, True, cf_axes
            kept = [a for a in NHWC_TO_NCHW if a not in axes]
            if kept == sorted(kept):
                return value.name, False, cf_axes
        return self.as_tf(value, hint), False, sorted(axes)

    def tf_shape(self, value: Value) -> list[int]:
        """Static TensorFlow-layout shape of ``value`` (ONNX shape inference when needed)."""
        if value.const is not None:
            return list(value.const.shape)
        shape = self.b.shape(value.name)
        return [shape[i] for i in NCHW_TO_NHWC] if value.channels_first else shape


# ---------------------------------------------------------------------- attributes
def tensor_key(ref: str) -> str:
    """``'conv'`` / ``'conv:1'`` / ``'^conv'`` -> ``'conv:0'`` / ``'conv:1'`` / ``'conv:0'``."""
    ref = ref.lstrip("^")
    head, sep, tail = ref.rpartition(":")
    if sep and tail.isdigit():
        return ref
    return f"{ref}:0"


def attr(node: Any, key: str, default: Any = None) -> Any:
    """The Python value of attribute ``key`` of a NodeDef (str for bytes, list for lists)."""
    if key not in node.attr:
        return default
    value = node.attr[key]
    kind = value.WhichOneof("value")
    if kind is None:
        return default
    if kind == "s":
        return value.s.decode("utf-8", "replace")
    if kind == "list":
        lst = value.list
        for field in ("i", "f", "s", "b", "type"):
            items = list(getattr(lst, field))
            if items:
                return [x.decode("utf-8", "replace") if isinstance(x, bytes) else x for x in items]
        return []
    if kind == "tensor":
        return tensor_to_numpy(value.tensor)
    if kind == "shape":
        return None if value.shape.unknown_rank else [int(d.size) for d in value.shape.dim]
    return getattr(value, kind)


def channels_last(node: Any) -> bool:
    """True when the node's ``data_format`` is NHWC (TensorFlow's default)."""
    return not str(attr(node, "data_format", "NHWC")).startswith("NC")


def _onnx_dtype(array: np.ndarray) -> Any:
    if np.issubdtype(array.dtype, np.integer):
        return np.int64
    if array.dtype == np.bool_:
        return np.bool_
    return np.float32
