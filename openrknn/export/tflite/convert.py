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
from openrknn.export.tflite import float_ops, layout, lookup
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
    int8: bool = True   # every operator of the layer writes integers (no float step)


def activation_params(model: RKNNModel, inits: dict[str, np.ndarray]) -> dict[str, QuantParams]:
    """The int8 parameters of every activation the model stores as int8, by tensor name: the one place
    the export reads the model's activation parameters (weights: ``Exporter._weight_quant``/``_bias``)."""
    return {n: QuantParams.from_dict(r) for n, r in model.quant_params.items()
            if n not in inits and r["dtype"] == "int8" and model.tensor_dtypes.get(n) != "float16"}


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
        self.params = activation_params(model, self.inits)
        self.groups = npu_layers.layer_groups(model.graph.graph)
        self.out = Graph()
        self.q: dict[str, int] = {}      # ONNX tensor -> int8 TFLite tensor
        self.f: dict[str, int] = {}      # ONNX tensor -> float32 TFLite tensor
        self.perm: dict[str, tuple[int, ...]] = {}
        self.rows: list[LayerRow] = []
        self.staged: dict[str, Quant] = {}   # int8 parameters of a kernel's output before its requantization
        # float tensors computed from the graph's float inputs only (the mean/std steps)
        self.from_inputs: set[str] = {i.name for i in model.graph.graph.input}
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
            if name in self.from_inputs:
                source = self._on_grid(name, source)
            self.q[name] = self.new_tensor(name, "int8", self.act_quant(name), label=f"{name}/int8")
            self.emit("QUANTIZE", [source], [self.q[name]])
            # the model stores the int8 value: later float readers see it dequantized, not the float before
            self.f.pop(name, None)
        return self.q[name]

    def _on_grid(self, name: str, source: int) -> int:
        """``round_half_even(x / s) · s``: the value QUANTIZE then stores exactly. The model quantizes
        ``rne(x / s)``; LiteRT's QUANTIZE multiplies by ``1/s``, which decides exact ties (pixel values
        normalised by mean 127.5, std 127.5 hit one on every pixel) the other way on a few percent."""
        shape = self.out.tensors[source].shape
        scale = self.const(f"{name}/scale", np.array(self.act_quant(name).scale[0], np.float32), "float32")
        steps = self.new_tensor(name, "float32", shape=shape, label=f"{name}/steps")
        rounded = self.new_tensor(name, "float32", shape=shape, label=f"{name}/rounded")
        on_grid = self.new_tensor(name, "float32", shape=shape, label=f"{name}/on_grid")
        self.emit("DIV", [source, scale], [steps], "DivOptions")
        self.emit("ROUND", [steps], [rounded])
        self.emit("MUL", [rounded, scale], [on_grid], "MulOptions")
        return on_grid

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
        for name in inputs or []:   # int8 where the model stores int8, else float (a float layer's output)
            if name in self.params:
                self.q[name] = self.new_tensor(name, "int8", self.act_quant(name))
                self.out.inputs.append(self.q[name])
            else:
                self.f[name] = self.new_tensor(name, "float32")
                self.out.inputs.append(self.f[name])
        wanted = set(outputs or [])
        for group in self.groups:
            if sub and not set(group.outputs) & wanted:
                continue
            self._layer_ops = []
            first = len(self.out.operators)
            row = self._layer(group)
            integer = all(self.out.tensors[t].dtype != "float32" for op in self.out.operators[first:]
                          for t in op.outputs)
            self.rows.append(LayerRow(group.name, " ".join(dict.fromkeys(self._layer_ops)) or "-", *row, integer))
        for name in outputs or [o.name for o in self.model.graph.graph.output]:
            perm = layout.identity(self.rank(name)) if not sub else self.storage(name)
            if name in self.params and self.float_io and not sub:
                # the stored int8 value, dequantized (the float before its QUANTIZE is not what the model outputs)
                stored = self.in_perm(name, perm, True)
                index = self.out.add(Tensor(f"{name}/dequantized", list(self.out.tensors[stored].shape), "float32"))
                self.emit("DEQUANTIZE", [stored], [index])
            else:
                index = self.in_perm(name, perm, name in self.params)
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
        if kind in (annotate.QCONV, annotate.QMATMUL) and main.op_type in ("Conv", "Gemm", "MatMul") \
                or kind == annotate.QCONVT and self._plain_transpose_conv(main):
            teflon = self._weighted(group)
            rest = group.nodes[1:]
            y = main.output[0]
            if rest and y in self.q and y in group.internal and len(group.outputs) == 1 \
                    and not self._shares_params(y, group.outputs[0]) \
                    and lookup.emit(self, rest, y, group.outputs[0]):
                return teflon or ("CPU", self._cpu_reason(group))
            if self._int8_add(group, rest):
                return teflon or ("CPU", self._cpu_reason(group))
        else:
            rest = group.nodes
            if self._int8_add(group, rest):
                return "CPU", "int8 ADD: Teflon offloads an ADD only fused into the Conv before it"
            if self._lookup_layer(group):
                return "CPU", "element-wise int8 lookup (GATHER): Teflon offloads only Conv2D / DepthwiseConv2D"
        for node in rest:
            self._node(node, group)
        return teflon or ("CPU", self._cpu_reason(group))

    def _int8_add(self, group: npu_layers.LayerGroup, rest: list[onnx.NodeProto]) -> bool:
        """A two-tensor Add followed by a Relu/Clip that the output's int8 range applies: one int8 ADD
        (LiteRT requantizes in fixed point: within a step of the model's float sum)."""
        if len(rest) != 2 or rest[0].op_type != "Add" or rest[1].input[0] != rest[0].output[0] \
                or not self._saturates(rest[1], group.outputs):
            return False
        data = [i for i in rest[0].input if i]
        if len(data) != 2 or any(i not in self.params or i in self.inits or self.rank(i) != self.rank(rest[1].output[0])
                                 for i in data):
            return False
        out = rest[1].output[0]
        perm = self.storage(out)
        inputs = [self.in_perm(i, perm, True) for i in data]
        self.emit("ADD", inputs, [self._output(out)], "AddOptions")
        return True

    def _saturates(self, node: onnx.NodeProto, outputs: list[str]) -> bool:
        """``node`` is a Relu/Clip writing the one stored output, whose int8 range already applies it."""
        if node.op_type not in ("Relu", "Clip") or outputs != [node.output[0]] or outputs[0] not in self.params:
            return False
        low, high = annotate.clip_bounds(node, {k: numpy_helper.from_array(v, k) for k, v in self.inits.items()
                                                if k in node.input})
        params = self.params[outputs[0]]
        scale, zero = float(params.scale.ravel()[0]), int(params.zero_point.ravel()[0])
        return scale * (params.qmin - zero) >= low and scale * (params.qmax - zero) <= high + 1e-6 * scale

    def _shares_params(self, a: str, b: str) -> bool:
        return a in self.params and b in self.params and self.params[a].to_dict() == self.params[b].to_dict()

    def _saturated_activation(self, group: npu_layers.LayerGroup) -> bool:
        """A weighted layer ending in one Relu/Clip that the output's int8 range already applies (so
        Teflon takes the layer whole)."""
        rest = group.nodes[1:]
        return len(rest) == 1 and self._saturates(rest[0], group.outputs)

    def _lookup_layer(self, group: npu_layers.LayerGroup) -> bool:
        """A layer of element-wise steps between two int8 tensors as one lookup (not a Relu the int8
        saturation already is)."""
        first, out = group.nodes[0], group.outputs[-1]
        data = [i for i in first.input if i and i not in self.inits]
        if len(group.outputs) != 1 or len(data) != 1 or data[0] not in self.params:
            return False
        if len(group.nodes) == 1 and annotate.node_kind(first) == annotate.FUSED_ACT \
                and self.params[data[0]].to_dict() == self.params[out].to_dict():
            return False
        return lookup.emit(self, group.nodes, data[0], out)

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
            if self._saturated_activation(group):   # Relu/Clip = the int8 saturation: write the output directly
                self.params[y] = self.params[group.outputs[0]]
            elif y in group.internal and all(o in self.params for o in group.outputs):
                lo, hi = intermediate_range(self, group, y)
                if lo == hi == 0.0:   # no input range moves the output by a step (a tiny output scale)
                    self._node(node, group, force_float=True)
                    return None
                scale, zero = asymmetric(np.array([lo], np.float32), np.array([hi], np.float32), "int8")
                self.params[y] = QuantParams("int8", scale.astype(np.float32), zero.astype(np.int64))
            else:   # read by float layers only: a float op on dequantized weights
                self._node(node, group, force_float=True)
                return None
        per_channel = np.asarray(w_record["scale"]).size > 1
        if node.op_type == "Conv":
            depthwise = self._conv(node, x, w, y, bias)
            reason = self._teflon_reason(group, node, per_channel, depthwise)
        elif node.op_type == "ConvTranspose":
            self._transpose_conv(x, w, y, bias, node)
            reason = ("CPU", "TransposeConv: Teflon's Rockchip backend offloads only Conv2D / DepthwiseConv2D")
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

    def conv_1d(self, node: onnx.NodeProto, integer: bool, convert) -> bool:
        """A 1-D Conv as the 2-D one over ``[N, 1, L, C]`` (``convert(node_2d)`` emits it) between two
        RESHAPEs; False when ``node`` is not 1-D."""
        x, w, y = node.input[0], node.input[1], node.output[0]
        if self.inits[w].ndim != 3:
            return False
        x2, y2 = f"{x}/as_2d", f"{y}/as_2d"
        (n, c, length), (_, o, out_length) = self.shapes[x], self.shapes[y]
        self.shapes[x2], self.shapes[y2] = [n, c, 1, length], [n, o, 1, out_length]
        self.inits[w] = self.inits[w][:, :, None, :]   # [O, C/g, 1, K]: this exporter reads w only here
        for a, b in ((x, x2), (y, y2)):
            if a in self.params:
                self.params[b] = self.params[a]
        source = self.in_perm(x, (0, 2, 1), integer)   # [N, L, C]
        tensor = self.out.tensors[source]
        table = self.q if integer else self.f
        table[x2] = self.new_tensor(x2, tensor.dtype, tensor.quant, layout.NHWC)
        self.emit("RESHAPE", [source, self.const(f"{x2}/shape", np.array(self.out.tensors[table[x2]].shape), "int32")],
                  [table[x2]])
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        two_d = {"kernel_shape": [1] + list(attrs.get("kernel_shape", self.inits[w].shape[3:])),
                 "strides": [1] + list(attrs.get("strides", [1])), "dilations": [1] + list(attrs.get("dilations", [1])),
                 "group": attrs.get("group", 1)}
        if "pads" in attrs:
            two_d["pads"] = [0, attrs["pads"][0], 0, attrs["pads"][1]]
        if "auto_pad" in attrs:
            two_d["auto_pad"] = attrs["auto_pad"]
        convert(helper.make_node("Conv", [x2] + list(node.input[1:]), [y2], name=node.name, **two_d))
        made = (self.q if y2 in self.q else self.f)[y2]
        out = self.new_tensor(y, self.out.tensors[made].dtype, self.out.tensors[made].quant, (0, 2, 1))
        (self.q if y2 in self.q else self.f)[y] = out
        self.emit("RESHAPE", [made, self.const(f"{y}/shape", np.array(self.out.tensors[out].shape), "int32")], [out])
        return True

    def _conv(self, node: onnx.NodeProto, x: str, w: str, y: str, bias: str | None) -> bool:
        if self.conv_1d(node, True, lambda two_d: self._conv(two_d, two_d.input[0], w, two_d.output[0], bias)):
            return False
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

    @staticmethod
    def _plain_transpose_conv(node: onnx.NodeProto) -> bool:
        """A ConvTranspose TRANSPOSE_CONV computes as is: group 1, no pads, output padding or dilation."""
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        return attrs.get("group", 1) == 1 and not any(attrs.get("pads", [0])) \
            and not any(attrs.get("output_padding", [0])) and all(d == 1 for d in attrs.get("dilations", [1, 1])) \
            and attrs.get("auto_pad", b"NOTSET") in (b"NOTSET", "NOTSET")

    def _transpose_conv(self, x: str, w: str, y: str, bias: str | None, node: onnx.NodeProto) -> None:
        """int8 TRANSPOSE_CONV: weights [C_in, C_out, kh, kw] → [C_out, kh, kw, C_in], scales per C_out."""
        weight = self.inits[w]
        strides = list(next((a.ints for a in node.attribute if a.name == "strides"), [1, 1]))
        filters = self.const(w, np.transpose(weight, (1, 2, 3, 0)), "int8", self._weight_quant(w, 0))
        shape = self.const(f"{y}/output_shape", np.array(layout.stored_shape(self.shapes[y], layout.NHWC)), "int32")
        source = self.in_perm(x, layout.NHWC, True)
        out = self.new_tensor(y, "int8", self.act_quant(y), layout.NHWC)
        self.q[y] = out
        self.emit("TRANSPOSE_CONV", [shape, filters, source, self._bias(bias, x, w, weight.shape[1])], [out],
                  "TransposeConvOptions", Padding=1, StrideW=strides[1], StrideH=strides[0])

    def _output(self, y: str) -> int:
        self.q[y] = self.new_tensor(y, "int8", self.act_quant(y))
        return self.q[y]

    def _padded(self, node, x: str, kernel, strides, dilations, attrs, integer: bool = True) -> tuple[int, int]:
        """The (input tensor, TFLite padding) of a Conv/Pool: SAME/VALID when the ONNX pads are those,
        else an explicit PAD (the zero point for int8: real 0)."""
        source = self.in_perm(x, layout.NHWC, integer)
        height, width = self.shapes[x][2:]
        pads = list(attrs.get("pads", [0, 0, 0, 0]))
        same = []
        for size, k, s, d in zip((height, width), kernel, strides, dilations):
            effective = (k - 1) * d + 1
            total = max((-(-size // s) - 1) * s + effective - size, 0)
            same.append((total // 2, total - total // 2))
        auto_pad = attrs.get("auto_pad", b"NOTSET")
        auto_pad = auto_pad.decode() if isinstance(auto_pad, bytes) else auto_pad
        if auto_pad == "VALID":
            pads = [0, 0, 0, 0]
        elif auto_pad in ("SAME_UPPER", "SAME_LOWER"):   # SAME_UPPER puts the odd pixel at the end, as TFLite's SAME
            ends = same if auto_pad == "SAME_UPPER" else [(b, a) for a, b in same]
            pads = [ends[0][0], ends[1][0], ends[0][1], ends[1][1]]
        elif auto_pad not in ("NOTSET", ""):
            raise NotSupportedError(f"{node.op_type} '{node.name}': auto_pad={auto_pad!r} is not an ONNX value")
        if not any(pads):
            return source, 1
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
        if all(i in self.from_inputs or i in self.inits for i in node.input if i):
            self.from_inputs.update(outs)
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
        if op == "Concat" and len(data) == len(node.input):   # inputs requantized to the output's parameters
            self._requantized_concat(node)
            return True
        if kind == annotate.PASS and op in ("Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Dropout"):
            float_ops.reshape(self, node, integer=True)
            return True
        if kind == annotate.PASS and op in ("Transpose", "MaxPool"):
            (float_ops.transpose if op == "Transpose" else float_ops.pool)(self, node, integer=True)
            return True
        # int8 kernels that move or select values: exact when the parameters are shared
        if same and op in float_ops.INTEGER_WHEN_SHARED:
            float_ops.INTEGER_WHEN_SHARED[op](self, node, integer=True)
            return True
        # int8 kernels that rescale (LiteRT requantizes in fixed point: within a step of the model's
        # dequantize → float op → quantize)
        if op in float_ops.INTEGER_RESCALING and float_ops.integer_rescaling_ok(self, node):
            float_ops.INTEGER_RESCALING[op](self, node, integer=True)
            return True
        staged = float_ops.staged_quant(self, node, data)
        if staged is not None:   # the int8 kernel on its own parameters, then an int8 → int8 QUANTIZE
            converter = float_ops.INTEGER_WHEN_SHARED.get(op) or float_ops.INTEGER_RESCALING[op]
            self.staged[y] = staged
            try:
                converter(self, node, integer=True)
            finally:
                del self.staged[y]
            middle = self.q[y]
            self.q[y] = self.new_tensor(y, "int8", self.act_quant(y))
            self.emit("QUANTIZE", [middle], [self.q[y]])
            return True
        return False

    def _requantized_concat(self, node: onnx.NodeProto) -> None:
        y = node.output[0]
        perm = self.storage(y)
        inputs = []
        for name in node.input:
            index = self.in_perm(name, perm, True)
            if self.params[name].to_dict() != self.params[y].to_dict():
                tensor = self.out.tensors[index]
                requantized = self.out.add(Tensor(f"{name}/as_{y}", list(tensor.shape), "int8",
                                                  quant=self.act_quant(y)))
                self.emit("QUANTIZE", [index], [requantized])
                index = requantized
            inputs.append(index)
        axis = next(a.i for a in node.attribute if a.name == "axis")
        self.emit("CONCATENATION", inputs, [self._output(y)], "ConcatenationOptions",
                  Axis=layout.storage_axis(axis, perm))


def build_graph(model: RKNNModel, float_io: bool = True) -> tuple[Graph, list[LayerRow]]:
    """The TFLite graph of ``model`` and the per-layer report rows."""
    exporter = Exporter(model, float_io)
    return exporter.run(), exporter.rows


def build_layer_graph(model: RKNNModel, group_outputs: list[str], inputs: list[str]) -> Graph:
    """A graph of the layers that store ``group_outputs``, reading int8 ``inputs`` (per-layer checks)."""
    return Exporter(model, float_io=False).run(inputs=inputs, outputs=group_outputs)
