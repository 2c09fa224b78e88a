"""Structural graph of a quantized model → TFLite graph (see docs/deployment.md).

Each stored int8 tensor of the model becomes an int8 TFLite tensor with the model's scale and zero
point. Conv/Gemm layers become int8 CONV_2D / DEPTHWISE_CONV_2D / FULLY_CONNECTED (int8 weights,
int32 bias ``s_x·s_w``); data-movement layers run on the integers; two-tensor Adds and Concats are
int8. Steps our NPU model computes in float32 (inside a fused activation, element-wise layers:
dequantize → float op → quantize, see docs/quantization.md) are exported the same way:
DEQUANTIZE → float ops → QUANTIZE. A Conv whose output stays inside its layer (hard-swish after
it, a residual Add) gets an int8 intermediate over the narrowest range outside which the layer's
stored output no longer changes (:mod:`.ranges`).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx
from onnx import helper, numpy_helper, shape_inference

from openrknn.errors import NotSupportedError, UnsupportedOpError
from openrknn.export.tflite import float_ops, layout
from openrknn.export.tflite.flatbuffer import Graph, Operator, Quant, Tensor
from openrknn.export.tflite.ranges import intermediate_range
from openrknn.graph import npu_layers
from openrknn.graph.rknn_model import LAYOUT_NHWC, RKNNModel
from openrknn.quant import annotate
from openrknn.quant.numerics import QuantParams, asymmetric

NONE, RELU, RELU6 = 0, 1, 3


@dataclass
class LayerRow:
    """One row of the export report."""

    layer: str
    ops: str
    runs_on: str        # 'NPU (Teflon)' or 'CPU'
    why: str


class Exporter:
    """One export: walks the structural graph's layers in order and emits TFLite operators."""

    def __init__(self, model: RKNNModel, float_io: bool = True) -> None:
        self.model = model
        self.float_io = float_io
        graph = onnx.ModelProto()
        graph.CopyFrom(model.graph)
        for value in graph.graph.output:   # declared outputs may keep the source's -1 dims: infer them
            value.type.tensor_type.ClearField("shape")
        try:
            graph = shape_inference.infer_shapes(graph)
        except Exception:   # shapes of a built graph are static: inference only fails on custom ops
            pass
        self.shapes = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim]
                       for v in list(graph.graph.value_info) + list(graph.graph.input) + list(graph.graph.output)}
        self.inits = {i.name: numpy_helper.to_array(i) for i in model.graph.graph.initializer}
        for name, array in self.inits.items():
            self.shapes[name] = list(array.shape)
        self.params = {n: QuantParams.from_dict(r) for n, r in model.quant_params.items()
                       if n not in self.inits and r["dtype"] == "int8" and model.tensor_dtypes.get(n) != "float16"}
        self.groups = npu_layers.layer_groups(model.graph.graph)
        self.out = Graph()
        self.q: dict[str, int] = {}      # ONNX tensor -> int8 TFLite tensor
        self.f: dict[str, int] = {}      # ONNX tensor -> float32 TFLite tensor
        self.perm: dict[str, tuple[int, ...]] = {}
        self.rows: list[LayerRow] = []
        self._layer_ops: list[str] = []

    # ------------------------------------------------------------------ tensors
    def rank(self, name: str) -> int:
        return len(self.shapes[name])

    def storage(self, name: str) -> tuple[int, ...]:
        return self.perm.setdefault(name, layout.default_perm(self.rank(name)))

    def new_tensor(self, name: str, dtype: str, quant: Quant | None = None, perm: tuple[int, ...] | None = None,
                   shape: list[int] | None = None, label: str | None = None) -> int:
        """A TFLite tensor for the ONNX tensor ``name`` (``shape`` given: a helper tensor)."""
        if shape is None:
            if perm is not None:
                self.perm[name] = perm
            shape = layout.stored_shape(self.shapes[name], self.storage(name))
        return self.out.add(Tensor(label or name, shape, dtype, quant=quant))

    def const(self, name: str, array: np.ndarray, dtype: str, quant: Quant | None = None) -> int:
        array = np.asarray(array)
        return self.out.add(Tensor(name, list(array.shape), dtype, data=array.astype(dtype), quant=quant))

    def act_quant(self, name: str) -> Quant:
        p = self.params[name]
        return Quant(p.scale.ravel()[:1].astype(np.float32), p.zero_point.ravel()[:1])

    def emit(self, op: str, inputs: list[int], outputs: list[int], options: str | None = None, **fields) -> None:
        self.out.operators.append(Operator(op, inputs, outputs, options, fields))
        self._layer_ops.append(op)

    def need_q(self, name: str) -> int:
        """The int8 form of ``name`` (QUANTIZE of its float form when needed)."""
        if name not in self.q:
            source = self.need_f(name)
            self.q[name] = self.new_tensor(name, "int8", self.act_quant(name), label=f"{name}/int8")
            self.emit("QUANTIZE", [source], [self.q[name]])
        return self.q[name]

    def need_f(self, name: str) -> int:
        """The float32 form of ``name`` (DEQUANTIZE of its int8 form, or a float constant)."""
        if name in self.f:
            return self.f[name]
        if name in self.q:
            self.f[name] = self.new_tensor(name, "float32", label=f"{name}/float")
            self.emit("DEQUANTIZE", [self.q[name]], [self.f[name]])
        elif name in self.inits:
            return self.const(name, self.dequantized_init(name), "float32")
        else:
            raise NotSupportedError(f"tensor '{name}' is used before it is computed")
        return self.f[name]

    def in_perm(self, name: str, perm: tuple[int, ...], integer: bool) -> int:
        """``name`` (int8 or float) stored as ``perm`` (a TRANSPOSE when it is stored otherwise)."""
        index = self.need_q(name) if integer else self.need_f(name)
        have = self.storage(name)
        if have == perm:
            return index
        shape = layout.stored_shape(self.shapes[name], perm)
        tensor = self.out.tensors[index]
        out = self.out.add(Tensor(f"{name}/{''.join(map(str, perm))}", shape, tensor.dtype, quant=tensor.quant))
        if layout.same_memory(self.shapes[name], have) and layout.same_memory(self.shapes[name], perm):
            op, operand = "RESHAPE", np.array(shape)   # only size-1 axes move: the same bytes
        else:
            op, operand = "TRANSPOSE", np.array(layout.conversion_perm(have, perm))
        self.emit(op, [index, self.const(f"{name}/{op.lower()}{len(self.out.tensors)}", operand, "int32")], [out])
        return out

    def dequantized_init(self, name: str) -> np.ndarray:
        array = self.inits[name]
        record = self.model.quant_params.get(name)
        if record is None or array.dtype == np.float32:
            return array.astype(np.float32)
        if record["dtype"] == "int32":   # bias: s_x·s_w[c]·q
            return (array.astype(np.float64) * np.resize(np.asarray(record["scale"]), array.shape)).astype(np.float32)
        scale = np.asarray(record["scale"], np.float64)
        zero = np.asarray(record["zero_point"], np.float64)
        if record.get("axis") is not None and scale.size > 1:
            shape = [1] * array.ndim
            shape[record["axis"]] = -1
            scale, zero = scale.reshape(shape), zero.reshape(shape)
        return ((array.astype(np.float64) - zero) * scale).astype(np.float32)

    # ------------------------------------------------------------------ driver
    def run(self, inputs: list[str] | None = None, outputs: list[str] | None = None) -> Graph:
        """Export the whole model, or (``inputs``/``outputs`` given: per-layer checks) the layers
        between int8 ``inputs`` and ``outputs``, fed and read as int8."""
        sub = inputs is not None
        for value in self.model.graph.graph.input if not sub else []:
            self._graph_input(value.name)
        for name in inputs or []:
            self.q[name] = self.new_tensor(name, "int8", self.act_quant(name))
            self.out.inputs.append(self.q[name])
        wanted = set(outputs or [])
        for group in self.groups:
            if sub and not set(group.outputs) & wanted:
                continue
            self._layer_ops = []
            row = self._layer(group)
            self.rows.append(LayerRow(group.name, " ".join(dict.fromkeys(self._layer_ops)) or "-", *row))
        for name in outputs or [o.name for o in self.model.graph.graph.output]:
            integer = name in self.params and (sub or not self.float_io)
            index = self.in_perm(name, layout.identity(self.rank(name)) if not sub else self.storage(name), integer)
            if not integer and self.out.tensors[index].dtype != "float32":
                index = self.need_f(name)
            self.out.outputs.append(index)
        return self.out

    def _graph_input(self, name: str) -> None:
        spec = next((s for s in self.model.inputs if s.name == name), None)
        perm = layout.default_perm(self.rank(name))
        if spec is not None and spec.layout == LAYOUT_NHWC:
            perm = layout.identity(self.rank(name))
        if name in self.params and not self.float_io:
            self.q[name] = self.new_tensor(name, "int8", self.act_quant(name), perm)
            self.out.inputs.append(self.q[name])
        else:
            self.f[name] = self.new_tensor(name, "float32", perm=perm)
            self.out.inputs.append(self.f[name])

    def _layer(self, group: npu_layers.LayerGroup) -> tuple[str, str]:
        main = group.main
        kind = annotate.node_kind(main)
        teflon = None
        if kind in (annotate.QCONV, annotate.QMATMUL) and main.op_type in ("Conv", "Gemm", "MatMul"):
            teflon = self._weighted(group)
            rest = group.nodes[1:]
        else:
            rest = group.nodes
        for node in rest:
            self._node(node, group)
        return teflon or ("CPU", self._cpu_reason(group))

    def _cpu_reason(self, group: npu_layers.LayerGroup) -> str:
        op = group.main.op_type
        if annotate.node_kind(group.main) == annotate.FLOAT or group.main.output[0] not in self.params \
                and annotate.node_kind(group.main) != annotate.INTERNAL:
            return f"{op} runs in float (float16 on the NPU model): Teflon offloads only int8 Conv/DepthwiseConv"
        return f"{op}: Teflon's Rockchip backend offloads only Conv2D / DepthwiseConv2D (+ a fused Add)"

    # ------------------------------------------------------------------ weighted layers
    def _weighted(self, group: npu_layers.LayerGroup) -> tuple[str, str] | None:
        node = group.main
        x, w, y = node.input[0], node.input[1], node.output[0]
        bias = node.input[2] if len(node.input) > 2 and node.input[2] else None
        w_record = self.model.quant_params.get(w, {})
        if x not in self.params or w_record.get("dtype") != "int8" or self.inits[w].dtype != np.int8:
            self._node(node, group, force_float=True)
            return None
        if y not in self.params:
            if y in group.internal and all(o in self.params for o in group.outputs):
                lo, hi = intermediate_range(self, group, y)
                scale, zero = asymmetric(np.array([lo], np.float32), np.array([hi], np.float32), "int8")
                self.params[y] = QuantParams("int8", scale.astype(np.float32), zero.astype(np.int64))
            else:   # read by float layers only: a float op on dequantized weights
                self._node(node, group, force_float=True)
                return None
        per_channel = np.asarray(w_record["scale"]).size > 1
        if node.op_type == "Conv":
            depthwise = self._conv(node, x, w, y, bias)
            reason = self._teflon_reason(group, node, per_channel, depthwise)
        else:
            self._fully_connected(node, x, w, y, bias)
            reason = ("CPU", "FullyConnected: Teflon's Rockchip backend offloads only Conv2D / DepthwiseConv2D")
        return reason

    def _teflon_reason(self, group, node, per_channel: bool, depthwise: bool) -> tuple[str, str]:
        kind = "DepthwiseConv2D" if depthwise else "Conv2D"
        dilations = next((list(a.ints) for a in node.attribute if a.name == "dilations"), [1, 1])
        if per_channel:
            return "CPU", f"{kind} with per-channel weights: Teflon needs per-tensor (quantized_method='layer')"
        if any(d != 1 for d in dilations):
            return "CPU", f"{kind} with dilation {dilations}: Teflon's Rockchip backend has no dilation"
        if npu_layers.group_kind_and_name(group, set(self.inits))[0] == "conv+add":   # the layer record's kind
            return "NPU (Teflon)", f"int8 {kind}, per-tensor, the residual ADD fused in"
        return "NPU (Teflon)", f"int8 {kind}, per-tensor"

    def _weight_quant(self, w: str, axis: int) -> Quant:
        record = self.model.quant_params[w]
        return Quant(np.asarray(record["scale"], np.float32), np.zeros(len(record["scale"]), np.int64), axis)

    def _bias(self, bias: str | None, x: str, w: str, channels: int) -> int:
        """int32 bias with scale ``s_x·s_w`` (as many scales as the weights have)."""
        w_scale = np.asarray(self.model.quant_params[w]["scale"], np.float32)
        scale = (np.float32(self.params[x].scale.ravel()[0]) * w_scale).astype(np.float32)
        data = self.inits[bias].astype(np.int32).ravel() if bias else np.zeros(channels, np.int32)
        return self.const(bias or f"{w}/zero_bias", data, "int32", Quant(scale, np.zeros(scale.size, np.int64), 0))

    def _conv(self, node: onnx.NodeProto, x: str, w: str, y: str, bias: str | None) -> bool:
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        weight = self.inits[w]
        if weight.ndim != 4:
            raise NotSupportedError(f"Conv '{node.name or y}' is {weight.ndim - 2}-D; the TFLite "
                                     "export supports 2-D convolutions")
        group = int(attrs.get("group", 1))
        channels_in = self.shapes[x][1]
        depthwise = group > 1 and group == channels_in and weight.shape[1] == 1
        if group > 1 and not depthwise:
            raise NotSupportedError(f"grouped Conv '{node.name or y}' (group={group}) has no TFLite "
                                     "op; only group=1 and depthwise convolutions export")
        strides = list(attrs.get("strides", [1, 1]))
        dilations = list(attrs.get("dilations", [1, 1]))
        source, padding = self._padded(node, x, weight.shape[2:], strides, dilations, attrs)
        out = self._output(y)
        channels = weight.shape[0]
        if depthwise:
            filters = self.const(w, np.transpose(weight, (1, 2, 3, 0)), "int8", self._weight_quant(w, 3))
            self.emit("DEPTHWISE_CONV_2D", [source, filters, self._bias(bias, x, w, channels)], [out],
                      "DepthwiseConv2DOptions", Padding=padding, StrideW=strides[1], StrideH=strides[0],
                      DepthMultiplier=channels // channels_in, DilationWFactor=dilations[1],
                      DilationHFactor=dilations[0])
        else:
            filters = self.const(w, np.transpose(weight, (0, 2, 3, 1)), "int8", self._weight_quant(w, 0))
            self.emit("CONV_2D", [source, filters, self._bias(bias, x, w, channels)], [out], "Conv2DOptions",
                      Padding=padding, StrideW=strides[1], StrideH=strides[0], DilationWFactor=dilations[1],
                      DilationHFactor=dilations[0])
        return depthwise

    def _output(self, y: str) -> int:
        self.q[y] = self.new_tensor(y, "int8", self.act_quant(y))
        return self.q[y]

    def _padded(self, node, x: str, kernel, strides, dilations, attrs, integer: bool = True) -> tuple[int, int]:
        """The (input tensor, TFLite padding) of a Conv/Pool: SAME/VALID when the ONNX pads are those,
        else an explicit PAD (the zero point for int8: real 0)."""
        source = self.in_perm(x, layout.NHWC, integer)
        height, width = self.shapes[x][2:]
        pads = list(attrs.get("pads", [0, 0, 0, 0]))
        if attrs.get("auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET"):
            raise NotSupportedError(f"'{node.name}': auto_pad is not exported (the build resolves it)")
        if not any(pads):
            return source, 1
        same = []
        for size, k, s, d in zip((height, width), kernel, strides, dilations):
            effective = (k - 1) * d + 1
            total = max((-(-size // s) - 1) * s + effective - size, 0)
            same.append((total // 2, total - total // 2))
        if pads == [same[0][0], same[1][0], same[0][1], same[1][1]]:
            return source, 0
        amounts = np.array([[0, 0], [pads[0], pads[2]], [pads[1], pads[3]], [0, 0]], np.int32)
        shape = list(self.out.tensors[source].shape)
        shape[1] += pads[0] + pads[2]
        shape[2] += pads[1] + pads[3]
        tensor = self.out.tensors[source]
        padded = self.out.add(Tensor(f"{x}/padded{len(self.out.tensors)}", shape, tensor.dtype, quant=tensor.quant))
        if node.op_type == "MaxPool":
            fill = -128 if integer else np.finfo(np.float32).min
            value = self.const(f"{x}/pad_value{len(self.out.tensors)}", np.array(fill), tensor.dtype, tensor.quant)
            self.emit("PADV2", [source, self.const(f"{x}/pads", amounts, "int32"), value], [padded])
        else:   # int8 PAD fills with the zero point (real 0)
            self.emit("PAD", [source, self.const(f"{x}/pads{len(self.out.tensors)}", amounts, "int32")], [padded])
        return padded, 1

    def _fully_connected(self, node: onnx.NodeProto, x: str, w: str, y: str, bias: str | None) -> None:
        weight = self.inits[w]
        transposed = node.op_type == "Gemm" and any(a.name == "transB" and a.i for a in node.attribute)
        if node.op_type == "Gemm" and any(a.name == "transA" and a.i for a in node.attribute):
            raise NotSupportedError(f"Gemm '{node.name or y}' with transA=1 is not exported")
        if weight.ndim != 2:
            raise NotSupportedError(f"MatMul '{node.name or y}' with a {weight.ndim}-D weight is not exported "
                                    "(FULLY_CONNECTED takes a 2-D weight)")
        matrix = weight if transposed else weight.T
        axis = 0
        filters = self.const(w, matrix, "int8", self._weight_quant(w, axis))
        source = self.in_perm(x, layout.identity(self.rank(x)), True)
        self.q[y] = self.new_tensor(y, "int8", self.act_quant(y), layout.identity(self.rank(y)))
        self.emit("FULLY_CONNECTED", [source, filters, self._bias(bias, x, w, matrix.shape[0])], [self.q[y]],
                  "FullyConnectedOptions", KeepNumDims=self.rank(x) > 2)

    # ------------------------------------------------------------------ other nodes
    def _node(self, node: onnx.NodeProto, group: npu_layers.LayerGroup, force_float: bool = False) -> None:
        kind = annotate.node_kind(node)
        outs = [o for o in node.output if o]
        integer_out = all(o in self.params for o in outs) and not force_float
        if kind == annotate.OTHER and not outs:
            return
        if integer_out and self._integer_node(node, kind):
            return
        converter = float_ops.FLOAT_CONVERTERS.get(node.op_type)
        if converter is None:
            raise UnsupportedOpError(node.op_type, node.name or outs[0], hint="it has no TFLite export yet (exported: "
                                     + ", ".join(sorted(float_ops.FLOAT_CONVERTERS)) + ")")
        converter(self, node)
        for out in outs:
            if out in self.params and out not in group.internal or out in self.params and group.nodes[-1] is node:
                self.need_q(out)

    def _integer_node(self, node: onnx.NodeProto, kind: str | None) -> bool:
        """Emit ``node`` on int8 tensors when TFLite has the kernel and it computes what the model
        does; False leaves it to the float path."""
        data = [i for i in node.input if i and i not in self.inits]
        if not all(i in self.params for i in data):
            return False
        y = node.output[0]
        op = node.op_type
        if kind == annotate.FUSED_ACT and self.params[data[0]].to_dict() == self.params[y].to_dict():
            self.q[y] = self.need_q(data[0])     # the saturation of the producer is the activation
            self.perm[y] = self.storage(data[0])
            return True
        if op == "Add" and len(data) == 2:
            perm = self.storage(y)
            inputs = [self.in_perm(i, perm, True) for i in data]
            self.emit("ADD", inputs, [self._output(y)], "AddOptions")
            return True
        same = all(self.params[i].to_dict() == self.params[y].to_dict() for i in data)
        if op == "Concat" and len(data) == len(node.input) and same:   # XNNPACK concatenates equal parameters only
            float_ops.concat(self, node, integer=True)
            return True
        if kind == annotate.PASS and op in ("Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Dropout"):
            float_ops.reshape(self, node, integer=True)
            return True
        if kind == annotate.PASS and op in ("Transpose", "MaxPool"):
            (float_ops.transpose if op == "Transpose" else float_ops.pool)(self, node, integer=True)
            return True
        return False


def build_graph(model: RKNNModel, float_io: bool = True) -> tuple[Graph, list[LayerRow]]:
    """The TFLite graph of ``model`` and the per-layer report rows."""
    exporter = Exporter(model, float_io)
    return exporter.run(), exporter.rows


def build_layer_graph(model: RKNNModel, group_outputs: list[str], inputs: list[str]) -> Graph:
    """A graph of the layers that store ``group_outputs``, reading int8 ``inputs`` (per-layer checks)."""
    return Exporter(model, float_io=False).run(inputs=inputs, outputs=group_outputs)
