"""The conversion state shared by the TFLite op converters, and the converter registry.

TFLite keeps image tensors in NHWC; ONNX convolutions, pools and resizes want NCHW. Each
converted 4-D tensor therefore lives in one of two layouts: ``NATIVE`` (the TFLite layout, NHWC
for images) or ``NCHW``. Layout-bound ops ask for ``NCHW`` and produce ``NCHW``; element-wise
ops keep whatever layout their input has; everything else asks for ``NATIVE``. A ``Transpose``
is inserted (once per tensor and layout) only where a consumer needs the other layout, so a
chain conv → add → conv stays in NCHW.

Example of a converter (one file per op family registers its own)::

    @converter("RELU")
    def relu(ctx: Context, op: Operator) -> None:
        x, layout = ctx.get_any(op.inputs[0])
        ctx.node("Relu", [x], [ctx.out(op.outputs[0], layout)])
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np
import onnx
from onnx import helper, numpy_helper

from openrknn.errors import ModelLoadError
from openrknn.graph.names import fresh_name
from openrknn.frontends.tflite.reader import Operator, TFLiteGraph
from openrknn.graph.custom_ops import CustomOpRegistry

NATIVE = "NATIVE"
NCHW = "NCHW"
TO_NCHW = (0, 3, 1, 2)
TO_NHWC = (0, 2, 3, 1)
# TFLite (NHWC) axis -> the same axis of the NCHW copy.
NHWC_AXIS_IN_NCHW = (0, 2, 3, 1)

Converter = Callable[["Context", Operator], None]
CONVERTERS: dict[str, Converter] = {}

_QUANT_TYPES = {np.dtype(np.int8): "int8", np.dtype(np.uint8): "uint8", np.dtype(np.int16): "int16",
                np.dtype(np.int32): "int32"}
# ActivationFunctionType -> (ONNX op, attributes/bounds); SIGN_BIT (5) is not a vision activation.
_ACTIVATIONS = {1: ("Relu", None), 2: ("Clip", (-1.0, 1.0)), 3: ("Clip", (0.0, 6.0)), 4: ("Tanh", None)}


def converter(*names: str) -> Callable[[Converter], Converter]:
    """Register a function converting the TFLite builtin ops ``names`` (duplicates are an error)."""

    def register(fn: Converter) -> Converter:
        for name in names:
            if name in CONVERTERS:
                raise ValueError(f"TFLite converter for '{name}' registered twice")
            CONVERTERS[name] = fn
        return fn

    return register


class Context:
    """Tensors, nodes and initializers of the ONNX graph being built from one TFLite graph.

    Args:
        graph: the parsed TFLite graph.
        custom_ops: registered custom ops (CUSTOM ops with these codes are accepted).
        qdq: keep quantized tensors as QDQ pairs (fully quantized source).
    """

    def __init__(self, graph: TFLiteGraph, custom_ops: CustomOpRegistry | None = None, qdq: bool = False) -> None:
        self.graph = graph
        self.custom_ops = custom_ops
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self.value_info: list[onnx.ValueInfoProto] = []
        self.quant_params: dict[str, dict[str, Any]] = {}
        self.folded: dict[int, np.ndarray] = {}      # constants computed at load (DEQUANTIZE, DENSIFY)
        self._where: dict[int, tuple[str, str]] = {}  # tensor index -> (ONNX name, layout)
        self._views: dict[tuple[int, Any], str] = {}
        self._names: set[str] = {t.name for t in graph.tensors}
        self._node_names: set[str] = set()
        self._outputs = set(graph.outputs)
        self.qdq = qdq
        self._pending_qdq: list[tuple[str, int, str]] = []

    # ------------------------------------------------------------------ names
    def unique(self, hint: str) -> str:
        """A fresh tensor name based on ``hint``."""
        return fresh_name(hint, self._names)

    def node(self, op_type: str, inputs: list[str], outputs: list[str], name: str | None = None,
             domain: str | None = None, **attrs: Any) -> onnx.NodeProto:
        """Append an ONNX node (named after its first output unless ``name`` is given)."""
        node_name = fresh_name(name or outputs[0], self._node_names)
        made = helper.make_node(op_type, inputs, outputs, name=node_name, domain=domain, **attrs)
        self.nodes.append(made)
        return made

    def add_const(self, value: np.ndarray, hint: str) -> str:
        """Store ``value`` as an initializer and return its name."""
        name = self.unique(hint)
        self.initializers.append(numpy_helper.from_array(_contiguous(value), name))
        return name

    # ---------------------------------------------------------------- tensors
    def tensor(self, idx: int) -> Any:
        return self.graph.tensors[idx]

    def shape(self, idx: int) -> list[int]:
        """TFLite (native) shape of tensor ``idx``."""
        return list(self.graph.tensors[idx].shape)

    def is_const(self, idx: int) -> bool:
        return idx in self.folded or (idx >= 0 and self.graph.tensors[idx].data is not None)

    def const(self, idx: int) -> np.ndarray | None:
        """Real value of a constant tensor (quantized values dequantized: ``r = s·(q − z)``), else None."""
        if idx in self.folded:
            return self.folded[idx]
        t = self.graph.tensors[idx]
        if t.data is None:
            return None
        if t.sparsity is not None:
            raise ModelLoadError(f"load_tflite: sparse tensor '{t.name}' is used without a DENSIFY op")
        if t.quantized and t.dtype.kind in "iu" and t.data.ndim > 0 and t.scale.size > 1:
            shape = [1] * t.data.ndim
            shape[t.quant_axis] = -1
            real = (t.data.astype(np.float64) - t.zero_point.reshape(shape)) * t.scale.reshape(shape)
            return real.astype(np.float32)
        if t.quantized and t.dtype.kind in "iu":
            return ((t.data.astype(np.float64) - t.zero_point[0]) * t.scale[0]).astype(np.float32)
        return t.data

    def int_const(self, idx: int, what: str, op: Operator) -> np.ndarray:
        """A constant integer operand (shapes, axes, paddings); refuses a computed one."""
        value = self.const(idx)
        if value is None:
            raise ModelLoadError(f"load_tflite: {op.name} '{self.op_label(op)}' needs a constant {what} "
                                 f"(tensor '{self.tensor(idx).name}' is computed at run time)")
        return np.asarray(value).astype(np.int64)

    def op_label(self, op: Operator) -> str:
        return self.graph.tensors[op.outputs[0]].name if op.outputs else f"op{op.index}"

    def layout(self, idx: int) -> str:
        """Layout tensor ``idx`` currently has (constants count as native)."""
        return self._where[idx][1] if idx in self._where else NATIVE

    def rank(self, idx: int) -> int:
        return len(self.graph.tensors[idx].shape)

    def get(self, idx: int, layout: str = NATIVE) -> str:
        """ONNX name of tensor ``idx`` in ``layout`` (only rank-4 tensors can be NCHW)."""
        if self.rank(idx) != 4:
            layout = NATIVE
        if self.is_const(idx):
            return self._const_view(idx, TO_NCHW if layout == NCHW else None)
        if idx not in self._where:
            raise ModelLoadError(f"load_tflite: tensor '{self.tensor(idx).name}' is used before it is computed")
        name, current = self._where[idx]
        if current == layout:
            return name
        key = (idx, layout)
        if key not in self._views:
            view = self.unique(f"{self.tensor(idx).name}_{layout.lower()}")
            self.node("Transpose", [name], [view], perm=list(TO_NCHW if layout == NCHW else TO_NHWC))
            self._views[key] = view
        return self._views[key]

    def get_any(self, idx: int) -> tuple[str, str]:
        """ONNX name of tensor ``idx`` in whatever layout it already has, and that layout."""
        layout = self.layout(idx) if self.rank(idx) == 4 else NATIVE
        return self.get(idx, layout), layout

    def get_permuted(self, idx: int, perm: tuple[int, ...] | None) -> str:
        """Tensor ``idx`` (native layout) transposed by ``perm`` (weights of convolutions)."""
        if self.is_const(idx):
            return self._const_view(idx, perm)
        name = self.get(idx, NATIVE)
        if perm is None:
            return name
        view = self.unique(f"{self.tensor(idx).name}_perm")
        self.node("Transpose", [name], [view], perm=list(perm))
        return view

    def _const_view(self, idx: int, perm: tuple[int, ...] | None) -> str:
        key = (idx, perm)
        if key in self._views:
            return self._views[key]
        t = self.tensor(idx)
        if self.qdq and t.quantized and idx not in self.folded and t.data is not None and t.dtype in _QUANT_TYPES:
            name = self._dequantized_const(idx, perm)
            self._views[key] = name
            return name
        value = np.asarray(self.const(idx))
        if value.dtype == np.float16 or value.dtype == np.float64:
            value = value.astype(np.float32)
        if perm is not None:
            value = np.transpose(value, perm)
        name = self._const_name(idx, perm)
        self.initializers.append(numpy_helper.from_array(_contiguous(value), name))
        self._record_quant(idx, name, perm)
        self._views[key] = name
        return name

    def _const_name(self, idx: int, perm: tuple[int, ...] | None) -> str:
        """The TFLite name for the constant as stored, a suffixed one for a transposed copy."""
        t = self.tensor(idx)
        if perm is None:
            return t.name      # reserved for this tensor in __init__; each view is made once
        return self.unique(f"{t.name}_{'nchw' if perm == TO_NCHW else 'perm'}")

    def _dequantized_const(self, idx: int, perm: tuple[int, ...] | None) -> str:
        """Integer initializer + DequantizeLinear (``r = s·(q − z)``) for a quantized constant."""
        t = self.tensor(idx)
        data = t.data if perm is None else np.transpose(t.data, perm)
        name = self._const_name(idx, perm)
        stored = self.add_const(data, f"{name}_quantized")
        inputs, attrs = self._qparams_inputs(idx, name, perm)
        self.node("DequantizeLinear", [stored] + inputs, [name], **attrs)
        self._record_quant(idx, name, perm)
        return name

    def _qparams_inputs(self, idx: int, hint: str, perm: tuple[int, ...] | None) -> tuple[list[str], dict]:
        t = self.tensor(idx)
        per_axis = t.scale.size > 1
        scale = t.scale.astype(np.float32) if per_axis else np.float32(t.scale[0])
        zero = t.zero_point.astype(t.dtype) if per_axis else np.asarray(t.zero_point[0], t.dtype)
        names = [self.add_const(np.asarray(scale), f"{hint}_scale"),
                 self.add_const(np.asarray(zero), f"{hint}_zero_point")]
        attrs = {"axis": list(perm).index(t.quant_axis) if perm is not None else t.quant_axis} if per_axis else {}
        return names, attrs

    def out(self, idx: int, layout: str = NATIVE) -> str:
        """Declare that tensor ``idx`` is produced in ``layout``; returns the ONNX name to write.

        In a quantized model a quantized activation is then passed through QuantizeLinear →
        DequantizeLinear (emitted by :meth:`flush_qdq`), which consumers read.
        """
        if self.rank(idx) != 4:
            layout = NATIVE
        t = self.tensor(idx)
        name = t.name
        if layout == NCHW and idx in self._outputs:
            name = self.unique(f"{name}_nchw")
        self._record_quant(idx, name, TO_NCHW if layout == NCHW else None)
        if self.qdq and t.quantized and t.dtype in _QUANT_TYPES and idx not in self._outputs:
            self._where[idx] = (self.unique(f"{name}_dq"), layout)
            self._pending_qdq.append((name, idx, layout))
        else:
            self._where[idx] = (name, layout)
        return name

    def flush_qdq(self) -> None:
        """Emit the QuantizeLinear → DequantizeLinear pairs of the activations produced so far."""
        for name, idx, layout in self._pending_qdq:
            perm = TO_NCHW if layout == NCHW else None
            inputs, attrs = self._qparams_inputs(idx, name, perm)
            quantized = self.unique(f"{name}_quantized")
            self.node("QuantizeLinear", [name] + inputs, [quantized], name=f"{name}_quantize", **attrs)
            self.node("DequantizeLinear", [quantized] + inputs, [self._where[idx][0]], name=f"{name}_dequantize",
                      **attrs)
        self._pending_qdq.clear()

    def alias(self, src: int, dst: int) -> None:
        """Tensor ``dst`` carries the same value as ``src`` (QUANTIZE/DEQUANTIZE in the real domain)."""
        x, layout = self.get_any(src)
        self.node("Identity", [x], [self.out(dst, layout)])

    def set_folded(self, idx: int, value: np.ndarray) -> None:
        self.folded[idx] = value

    def _record_quant(self, idx: int, name: str, perm: tuple[int, ...] | None) -> None:
        t = self.tensor(idx)
        if not t.quantized or t.dtype not in _QUANT_TYPES:
            return
        axis = None
        if t.scale.size > 1:
            axis = list(perm).index(t.quant_axis) if perm is not None else t.quant_axis
        self.quant_params[name] = {"scale": [float(v) for v in t.scale], "zero_point": [int(v) for v in t.zero_point],
                                   "axis": axis, "dtype": _QUANT_TYPES[t.dtype]}

    # ------------------------------------------------------------- emitting
    def emit(self, op: Operator, op_type: str, inputs: list[str], layout: str, fused: int = 0,
             **attrs: Any) -> None:
        """One ONNX node for ``op`` writing its first output, plus the fused activation if any."""
        y = self.out(op.outputs[0], layout)
        if fused == 0:
            self.node(op_type, inputs, [y], **attrs)
            return
        if fused not in _ACTIVATIONS:
            raise ModelLoadError(f"load_tflite: {op.name} '{self.op_label(op)}' has fused activation "
                                 f"{fused} (SIGN_BIT), which has no ONNX equivalent")
        pre = self.unique(f"{y}_pre_act")
        self.node(op_type, inputs, [pre], name=f"{y}_{op_type.lower()}", **attrs)
        self.activation(fused, pre, y)

    def activation(self, fused: int, x: str, y: str) -> None:
        act, bounds = _ACTIVATIONS[fused]
        if bounds is None:
            self.node(act, [x], [y])
            return
        lo = self.add_const(np.array(bounds[0], np.float32), f"{y}_min")
        hi = self.add_const(np.array(bounds[1], np.float32), f"{y}_max")
        self.node(act, [x, lo, hi], [y])

    def finish_outputs(self) -> list[str]:
        """Graph outputs in native layout, named like the TFLite outputs."""
        names = []
        for idx in self.graph.outputs:
            if self.is_const(idx) and idx not in self._where:
                value = np.asarray(self.const(idx))
                value = value.astype(np.float32) if value.dtype.kind == "f" else value
                self.node("Identity", [self.add_const(value, f"{self.tensor(idx).name}_value")], [self.out(idx)])
            name, layout = self._where[idx]
            if layout == NCHW:
                final = self.tensor(idx).name
                self.node("Transpose", [name], [final], perm=list(TO_NHWC))
                name = final
                self._record_quant(idx, name, None)
            names.append(name)
        return names


def _contiguous(value: np.ndarray) -> np.ndarray:
    """C-ordered array keeping 0-d scalars 0-d (``np.ascontiguousarray`` makes them 1-d)."""
    value = np.asarray(value)
    return value if value.flags.c_contiguous else value.copy(order="C")


def nchw_axis(axis: int, rank: int, layout: str) -> int:
    """The ONNX axis of TFLite axis ``axis`` for a tensor of ``rank`` held in ``layout``."""
    axis = axis + rank if axis < 0 else axis
    return NHWC_AXIS_IN_NCHW[axis] if layout == NCHW and rank == 4 else axis
