"""Lowering of a quantized model to an onnxruntime graph with integer semantics.

Each structural tensor ``T`` has up to two executable forms: the integer tensor ``T__q`` and a
float tensor (``T__dq`` = DequantizeLinear of ``T__q``, ``T__fp16`` for float16 layers, or ``T``
itself for graph inputs/outputs and names used inside subgraphs); :func:`int_form`,
:func:`dequantized_form`, :func:`float16_form` and :func:`tensor_of_form` are those names for the
readers of a lowered graph. Each node is lowered by the
function registered for the kind ``openrknn.quant.annotate`` stored on it (:func:`register_lowering`;
a second lowering for one kind is an error, a kind without one fails naming it). The exact-integer
sums and requantization live in :mod:`openrknn.sim.integer_arithmetic`, with their contract; see
docs/quantization.md for the arithmetic:

* ``qconv``: ``QLinearConv`` — uint8 inputs; int8 weights of non-grouped Convs as they are where
  the runtime's u8 × s8 kernel is exact (probed once), else split into two 7-bit halves over the
  input read twice (no pair of u8·s8 products can saturate a 16-bit lane); depthwise int8 weights
  likewise as they are where probed exact; other weights as uint8 (u8 × u8 kernels are exact on
  every CPU); int32 accumulation plus int32 bias, requantization
  ``clamp(rne(float32(acc)·M_c) + z_y)`` with ``M_c = s_x·s_w[c]/s_y`` per channel.
  Depthwise Convs of 5×5 and more take the ``qconvt`` path below (exact float32 sums, the same
  requantization): onnxruntime's float32 depthwise kernel is several times faster there.
* ``qconvt``: ConvTranspose — exact integer sums computed by a float32 ConvTranspose on the
  integers (all partial sums below 2^24), then the same int32 bias and requantization.
* ``qmatmul`` / ``qmatmul2``: ``MatMulInteger`` (int32) [+ int32 bias] → ``Cast`` → ``Mul(M)`` →
  ``QuantizeLinear(scale 1, z_y)``: the same requantization.
* ``pass`` / ``fused_act``: the op runs on the integers (the parameters are shared).
* ``qfloat``: DequantizeLinear inputs, the op in float32, QuantizeLinear output (rne, saturate).
* ``internal``: a step inside a fused activation, float32, not rounded or stored.
* ``float``: the op in float32 on float inputs, output rounded to float16.

16-bit activations have no integer kernels in onnxruntime: their Conv/MatMul layers run as
``qfloat`` on the dequantized int16 weights. In an 8-bit model with hybrid int16 layers, an 8-bit
layer reads a 16-bit tensor through a requantization to 8 bits (``T__as8``). Weight-only dtypes (w8a16, w4a16) dequantize the
weights and run the fp16 lowering of ``openrknn.sim.fp16``.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Callable

import numpy as np
import onnx
from onnx import helper, numpy_helper

from openrknn.errors import ModelFileError
from openrknn.graph import npu_layers
from openrknn.graph.preprocess import PREPROCESS_KEY
from openrknn.graph.rknn_model import RKNNModel
from openrknn.quant import annotate
from openrknn.quant.numerics import NUMPY_TYPES, QuantParams, dequantize, requant_multiplier
from openrknn.quant.settings import DTYPES
from openrknn.quant.weights import narrowed
from openrknn.sim.fp16 import FLOAT16_SUFFIX, lower_fp16, round_to_fp16
from openrknn.sim.integer_arithmetic import IntegerArithmetic, weighted_io
from openrknn.sim.sigmoid import exact_sigmoid_nodes

_MS_DOMAIN = "com.microsoft"

# The names of a structural tensor T's executable forms in the lowered graph. Readers of a lowered graph
# (analysis/accuracy, export/tflite/verify) find the forms through these names, not by spelling them.
INT_SUFFIX, DEQUANTIZED_SUFFIX, SCALE_SUFFIX, ZERO_POINT_SUFFIX = "__q", "__dq", "__s", "__z"


def int_form(tensor: str) -> str:
    """``T__q``: the integer tensor (uint8 for int8 activations, with zero point + 128)."""
    return tensor + INT_SUFFIX


def dequantized_form(tensor: str) -> str:
    """``T__dq``: DequantizeLinear of ``T__q`` (scale ``T__s``, zero point ``T__z``)."""
    return tensor + DEQUANTIZED_SUFFIX


def float16_form(tensor: str) -> str:
    """``T__fp16``: a tensor a float16 layer stores, rounded to float16 (held as float32)."""
    return tensor + FLOAT16_SUFFIX


def tensor_of_form(name: str, suffix: str) -> str | None:
    """The structural tensor whose form (``suffix``) ``name`` is, or None."""
    return name[:-len(suffix)] if name.endswith(suffix) else None
_EIGHT_BIT = ("int8", "uint8")
_ONNX_TYPES = {"int8": onnx.TensorProto.INT8, "uint8": onnx.TensorProto.UINT8, "int16": onnx.TensorProto.INT16}


def lower_quantized(rknn_model: RKNNModel, all_float: bool = False) -> onnx.ModelProto:
    """The executable graph of a quantized model: float32 inputs and outputs, integer inside.

    Args:
        rknn_model: a model built with ``do_quantization=True`` (or imported pre-quantized).
        all_float: also dequantize every integer tensor to ``T__dq`` (for per-layer accuracy
            analysis; onnxruntime does not prune them, so inference leaves this off).

    Example:
        >>> # session = onnxruntime.InferenceSession(lower_quantized(model).SerializeToString())
    """
    spec = DTYPES.get(rknn_model.quantized_dtype or "w8a8", DTYPES["w8a8"])
    if spec.act_dtype is None:
        return lower_fp16(_dequantized_weights(rknn_model))
    return _Lowering(rknn_model, (spec.act_dtype, spec.act_qtype), all_float).run()


def _is_large_depthwise(node: onnx.NodeProto, weight: onnx.TensorProto) -> bool:
    """A depthwise Conv (one input channel per group) with a kernel of 5×5 or more: onnxruntime's
    float32 depthwise Conv on the centred integers runs it several times faster than its
    QLinearConv (PP-OCR cls −14 %, det −25 % CPU time for the whole model); 3×3 ones are faster as
    QLinearConv (MobileNet +65 %, det +40 % when they were moved too)."""
    group = next((a.i for a in node.attribute if a.name == "group"), 1)
    return (LARGE_DEPTHWISE_IN_FLOAT and group > 1 and weight.dims[1] == 1
            and int(np.prod(weight.dims[2:])) >= _LARGE_KERNEL_AREA)


_LARGE_KERNEL_AREA = 25
# Set to False to lower every depthwise Conv to QLinearConv (the exactness guard compares both forms).
LARGE_DEPTHWISE_IN_FLOAT = True


def _dequantized_weights(model: RKNNModel) -> onnx.ModelProto:
    graph = onnx.ModelProto()
    graph.CopyFrom(model.graph)
    for init in graph.graph.initializer:
        record = model.quant_params.get(init.name)
        if record and init.data_type != onnx.TensorProto.FLOAT:
            array = dequantize(numpy_helper.to_array(init), QuantParams.from_dict(record))
            init.CopyFrom(numpy_helper.from_array(array, init.name))
    return graph


def _outer_references(graph: onnx.GraphProto) -> set[str]:
    """Names that subgraphs (If/Loop/Scan bodies) read from the enclosing scope."""
    names: set[str] = set()
    for node in graph.node:
        for attr in node.attribute:
            subs = [attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs)
            for sub in subs:
                for inner in sub.node:
                    names.update(inner.input)
                names |= _outer_references(sub)
    return names


# ------------------------------------------------------------------ the layer-kind registry
LayerLowering = Callable[["_Lowering", onnx.NodeProto], None]
_LOWERINGS: dict[str, LayerLowering] = {}


def register_lowering(kind: str) -> Callable[[LayerLowering], LayerLowering]:
    """Decorator: ``function`` lowers the nodes ``openrknn.quant.annotate`` marked with ``kind``.

    Raises:
        ValueError: ``kind`` already has a lowering (two would silently shadow each other).
    """
    def add(function: LayerLowering) -> LayerLowering:
        if kind in _LOWERINGS:
            raise ValueError(f"layer kind {kind!r} already has a lowering ({_LOWERINGS[kind].__qualname__}); "
                             f"{function.__qualname__} cannot be registered for it too")
        _LOWERINGS[kind] = function
        return function
    return add


def lowering_for(kind: str, node_name: str = "") -> LayerLowering:
    """The registered lowering of ``kind``.

    Raises:
        ModelFileError: no lowering for ``kind`` (a model marked by another openrknn version, or a
            damaged file): the message names the node, the kind and the known kinds.
    """
    try:
        return _LOWERINGS[kind]
    except KeyError:
        raise ModelFileError(f"node {node_name!r} is marked with the layer kind {kind!r} "
                             f"(metadata '{annotate.KIND_KEY}'), which the quantized simulator does not know "
                             f"(known: {sorted(_LOWERINGS)}); rebuild the model with this version of openrknn") from None


def registered_kinds() -> frozenset[str]:
    """The layer kinds that have a lowering."""
    return frozenset(_LOWERINGS)


class _Lowering(IntegerArithmetic):
    """One lowering run: walks the structural graph in order and emits executable nodes."""

    def __init__(self, model: RKNNModel, narrow_to: tuple[str, str], all_float: bool = False) -> None:
        self.src = model.graph
        self.records = model.quant_params
        self.dtypes = model.tensor_dtypes
        self.params = {n: QuantParams.from_dict(r) for n, r in model.quant_params.items() if r["dtype"] in NUMPY_TYPES}
        self.inits = {i.name: i for i in self.src.graph.initializer}
        self.all_float = all_float
        for name, params in list(self.params.items()):
            if name not in self.inits and params.dtype == "int8":
                # int8 activations are held as uint8 with z + 128: the same values, and onnxruntime's
                # u8·s8 kernels are an order of magnitude faster than its s8·s8 ones.
                self.params[name] = replace(params, dtype="uint8", zero_point=params.zero_point + 128)
        self.float_tensors = annotate.float_tensor_names(self.src)
        self.internal = npu_layers.internal_tensors(self.src.graph)   # never stored: no rounding
        self.pool_cascades = {out: stages for out, (_, stages) in npu_layers.global_pool_cascades(self.src).items()
                              if npu_layers.pool_stage_tensor(out, 0) in self.params}
        self.keep = {o.name for o in self.src.graph.output} | _outer_references(self.src.graph)
        self.opset = annotate.opset(self.src)
        self.nodes: list[onnx.NodeProto] = []
        self.new_inits: list[onnx.TensorProto] = []
        self.int_name: dict[str, str] = {}
        self.float_name: dict[str, str] = {}
        self.uses_ms = False
        self._consts: set[str] = set()
        self.narrow_to = narrow_to   # (dtype, qtype) 8-bit layers read 16-bit tensors as
        # float layers store float16 on the NPU; a model simulated as exported to TFLite runs them in
        # float32 (openrknn.export.tflite.target)
        self.half = onnx.TensorProto.FLOAT if model.metadata.get("float_layers_dtype") == "float32" \
            else onnx.TensorProto.FLOAT16

    # ------------------------------------------------------------------ driver
    def run(self) -> onnx.ModelProto:
        exact = _input_stage_constants(self.src.graph) | self._integer_layer_constants()
        for init in self.src.graph.initializer:
            if init.data_type == onnx.TensorProto.FLOAT and self.half == onnx.TensorProto.FLOAT16 \
                    and init.name not in exact:
                self.new_inits.append(numpy_helper.from_array(round_to_fp16(numpy_helper.to_array(init)), init.name))
            else:
                self.new_inits.append(init)
        for value in self.src.graph.input:
            self.float_name[value.name] = value.name
        for node in self.src.graph.node:
            kind = annotate.node_kind(node) or self._guess(node)
            lowering_for(kind, node.name)(self, self._narrow_inputs(node, kind))
        for out in self.src.graph.output:
            if out.name in self.float_tensors or out.name in self.int_name:
                self.need_float(out.name)
        if self.all_float:
            for tensor in list(self.int_name):
                self.need_float(tensor)
        return self._model()

    def _model(self) -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, self.src.graph.name, list(self.src.graph.input),
                                  list(self.src.graph.output), self.new_inits)
        opsets = [o for o in self.src.opset_import if o.domain != _MS_DOMAIN]
        if self.uses_ms:
            opsets.append(helper.make_opsetid(_MS_DOMAIN, 1))
        model = helper.make_model(graph, opset_imports=opsets, ir_version=self.src.ir_version)
        return model

    def _guess(self, node: onnx.NodeProto) -> str:
        """Kind of an unmarked node (e.g. a golden layer run alone by accuracy analysis)."""
        outs = [o for o in node.output if o in self.float_tensors or o in self.params]
        if not outs:
            return annotate.OTHER
        integer = all(o in self.params and self.dtypes.get(o, self.params[o].dtype) != "float16" for o in outs)
        return annotate.QFLOAT if integer else annotate.FLOAT

    def _narrow_inputs(self, node: onnx.NodeProto, kind: str) -> onnx.NodeProto:
        """An 8-bit layer reading a 16-bit tensor (the output of a hybrid int16 layer) reads it
        requantized to 8 bits over the range the 16-bit parameters cover (``quant.weights.narrowed``),
        the conversion the NPU inserts between the two."""
        outs = [o for o in node.output if o in self.params]
        if kind not in annotate.INTEGER_KINDS or not outs or not self.is_8bit(*outs):
            return node
        wide = [i for i in node.input if i and i not in self.inits and i in self.params
                and self.params[i].dtype == "int16"]
        if not wide:
            return node
        copy = onnx.NodeProto()
        copy.CopyFrom(node)
        for k, name in enumerate(copy.input):
            if name in wide:
                copy.input[k] = self._narrowed(name)
        return copy

    def _narrowed(self, tensor: str) -> str:
        alias = f"{tensor}__as8"
        if alias not in self.params:
            params = narrowed(self.params[tensor], *self.narrow_to)
            if params.dtype == "int8":   # held as uint8, like every int8 activation here
                params = replace(params, dtype="uint8", zero_point=params.zero_point + 128)
            self.params[alias] = params
            self.float_name[alias] = self.need_float(tensor)
        return alias

    # ------------------------------------------------------------------ tensor forms
    def _integer_layer_constants(self) -> set[str]:
        """Float constants read only by layers that store integers: kept at float32, not rounded to
        float16 (a float16 layer's constants are rounded as before).

        rknn-toolkit2 2.5.0 keeps an int8 layer's float constants at full precision: a stand-alone
        BatchNormalization runs on float32 ``γ/√(σ²+ε)`` and ``β − μ·γ/√(σ²+ε)``, and the constant of an
        ``Add`` (a ConvTranspose's bias) is stored as int32 with a scale of ~3e-12 (PP-OCRv3 det's head,
        read from its simulator). With float16 parameters, ``batch_norm_48.tmp_4`` differed from the
        vendor's on 0.22 % of values when fed the vendor's own input; with float32 ones on none.
        """
        integer_nodes: set[str] = set()   # first outputs (protobuf hands out new wrappers: no id())
        for group in npu_layers.layer_groups(self.src.graph):
            stored = [o for n in group.nodes for o in n.output if o in self.float_tensors and o not in self.internal]
            if stored and all(annotate.node_kind(n) in (annotate.QFLOAT, annotate.INTERNAL) for n in group.nodes) \
                    and all(o in self.params and self.dtypes.get(o, self.params[o].dtype) != "float16" for o in stored):
                integer_nodes.update(n.output[0] for n in group.nodes if n.output)
        readers: dict[str, list[bool]] = {}
        for node in self.src.graph.node:
            for name in node.input:
                readers.setdefault(name, []).append(bool(node.output) and node.output[0] in integer_nodes)
        return {init.name for init in self.src.graph.initializer
                if init.data_type == onnx.TensorProto.FLOAT and init.name not in self.records
                and readers.get(init.name) and all(readers[init.name])}

    def const(self, name: str, array: np.ndarray) -> str:
        self.new_inits.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def scale_zero(self, tensor: str) -> tuple[str, str]:
        params = self.params[tensor]
        s_name, z_name = tensor + SCALE_SUFFIX, tensor + ZERO_POINT_SUFFIX
        if s_name not in self._consts:
            self.const(s_name, np.float32(params.scale.ravel()[0]))
            self.const(z_name, np.array(params.zero_point.ravel()[0], NUMPY_TYPES[params.dtype]))
            self._consts.add(s_name)
        return s_name, z_name

    def _qdq_domain(self, dtype: str) -> str:
        if dtype in _EIGHT_BIT and self.opset >= 10:
            return ""
        self.uses_ms = True
        return _MS_DOMAIN

    def need_int(self, tensor: str) -> str | None:
        """Name of the integer form of ``tensor`` (QuantizeLinear of its float form if needed)."""
        if tensor in self.int_name:
            return self.int_name[tensor]
        if tensor not in self.params or self.params[tensor].dtype not in _ONNX_TYPES:
            return None
        source = self.need_float(tensor)
        s, z = self.scale_zero(tensor)
        name = int_form(tensor)
        self.nodes.append(helper.make_node("QuantizeLinear", [source, s, z], [name], name=f"{name}_quantize",
                                           domain=self._qdq_domain(self.params[tensor].dtype)))
        self.int_name[tensor] = name
        return name

    def need_float(self, tensor: str) -> str:
        """Name of the float form of ``tensor`` (DequantizeLinear of its integer form if needed)."""
        if tensor in self.float_name:
            return self.float_name[tensor]
        if tensor in self.int_name:
            name = tensor if tensor in self.keep else dequantized_form(tensor)
            s, z = self.scale_zero(tensor)
            self.nodes.append(helper.make_node("DequantizeLinear", [self.int_name[tensor], s, z], [name],
                                               name=f"{name}_dequantize",
                                               domain=self._qdq_domain(self.params[tensor].dtype)))
        elif tensor in self.inits and tensor in self.records and self.inits[tensor].data_type != onnx.TensorProto.FLOAT:
            name = self.const(dequantized_form(tensor), self._dequantized_init(tensor))
        else:
            return tensor
        self.float_name[tensor] = name
        return name

    def _dequantized_init(self, tensor: str) -> np.ndarray:
        array = numpy_helper.to_array(self.inits[tensor])
        record = self.records[tensor]
        if record["dtype"] == "int32":   # bias: s_x·s_w[c]·q
            scale = np.asarray(record["scale"], np.float32)
            return (array.astype(np.float64) * scale.reshape(array.shape if scale.size == array.size else -1)).astype(np.float32)
        return dequantize(array, QuantParams.from_dict(record))

    def set_int(self, tensor: str) -> str:
        self.int_name[tensor] = int_form(tensor)
        return self.int_name[tensor]

    def is_8bit(self, *tensors: str) -> bool:
        return all(t in self.params and self.params[t].dtype in _EIGHT_BIT for t in tensors)

    # ------------------------------------------------------------------ kinds
    @register_lowering(annotate.OTHER)
    def _lower_other(self, node: onnx.NodeProto) -> None:
        self._emit_float_inputs(node)

    def _emit_float_inputs(self, node: onnx.NodeProto) -> onnx.NodeProto:
        copy = onnx.NodeProto()
        copy.CopyFrom(node)
        del copy.metadata_props[:]
        for i, name in enumerate(copy.input):
            if name:
                copy.input[i] = self.need_float(name)
        for name in _outer_references_of(node):
            if name in self.int_name or name in self.float_name:
                self.need_float(name)
        if copy.op_type == "Sigmoid" and copy.domain in ("", "ai.onnx"):
            # onnxruntime's Sigmoid is off by up to 3e-8 (absolute): written out (sim/sigmoid.py)
            base = f"{node.output[0]}__sigmoid"
            one = self.const(f"{base}_one", np.float32(1.0)) if f"{base}_one" not in self._consts else f"{base}_one"
            self._consts.add(one)
            *steps, last = exact_sigmoid_nodes(copy.input[0], copy.output[0], base, one)
            self.nodes += steps
            copy.op_type, copy.input[0] = "Reciprocal", last.input[0]
        self.nodes.append(copy)
        return copy

    @register_lowering(annotate.FLOAT)
    def _lower_float(self, node: onnx.NodeProto) -> None:
        copy = self._emit_float_inputs(node)
        for i, out in enumerate(node.output):
            if out not in self.float_tensors:
                continue
            if out in self.internal and out not in self.keep:   # inside a float16 layer: not stored, not rounded
                copy.output[i] = f"{out}__f32"
                self.float_name[out] = copy.output[i]
                continue
            raw, half = f"{out}__raw", f"{out}__half"
            final = out if out in self.keep else float16_form(out)
            copy.output[i] = raw
            self.nodes += [helper.make_node("Cast", [raw], [half], to=self.half, name=f"{half}_cast"),
                           helper.make_node("Cast", [half], [final], to=onnx.TensorProto.FLOAT, name=f"{final}_cast")]
            self.float_name[out] = final

    @register_lowering(annotate.INTERNAL)
    def _lower_internal(self, node: onnx.NodeProto) -> None:
        """Inside a fused activation: float32, no rounding, no storage."""
        copy = self._emit_float_inputs(node)
        for i, out in enumerate(node.output):
            if out in self.float_tensors and out not in self.keep:
                copy.output[i] = f"{out}__f32"
                self.float_name[out] = copy.output[i]
            elif out:
                self.float_name[out] = out

    @register_lowering(annotate.QFLOAT)
    def _lower_qfloat(self, node: onnx.NodeProto) -> None:
        if not all(o in self.params for o in node.output if o in self.float_tensors):
            return self._lower_float(node)
        if node.op_type == "GlobalAveragePool" and node.output[0] in self.pool_cascades:
            node = self._lower_pool_stages(node)
        copy = self._emit_float_inputs(node)
        for i, out in enumerate(node.output):
            if out not in self.float_tensors:
                continue
            raw = f"{out}__raw"
            copy.output[i] = raw
            s, z = self.scale_zero(out)
            self.nodes.append(helper.make_node("QuantizeLinear", [raw, s, z], [self.set_int(out)],
                                               name=f"{out}__q_quantize",
                                               domain=self._qdq_domain(self.params[out].dtype)))
        return None

    def _lower_pool_stages(self, node: onnx.NodeProto) -> onnx.NodeProto:
        """A cascaded GlobalAveragePool (``npu_layers.global_average_pool_stages``): every stage but the
        last is computed from the previous one's integers and stored in int8; returns the last stage,
        which the caller quantizes to the pool's output."""
        stages = self.pool_cascades[node.output[0]]
        source = self.need_float(node.input[0])
        for j, stage in enumerate(stages[:-1]):
            target = npu_layers.pool_stage_tensor(node.output[0], j)
            nodes, inits = npu_layers.pool_stage_nodes(source, f"{target}__raw", stage)
            self.nodes += nodes
            self.new_inits += inits
            s, z = self.scale_zero(target)
            self.nodes.append(helper.make_node("QuantizeLinear", [f"{target}__raw", s, z], [self.set_int(target)],
                                               name=f"{target}__q_quantize",
                                               domain=self._qdq_domain(self.params[target].dtype)))
            source = self.need_float(target)
        last, gains = npu_layers.pool_stage_nodes(source, node.output[0], stages[-1])
        self.new_inits += gains
        self.nodes += last[:-1]
        return last[-1]

    @register_lowering(annotate.PASS)
    def _lower_pass(self, node: onnx.NodeProto) -> None:
        outs = [o for o in node.output if o]
        source = self.need_int(node.input[0]) if all(o in self.params for o in outs) else None
        if source is None:
            return self._lower_qfloat(node)
        copy = onnx.NodeProto()
        copy.CopyFrom(node)
        del copy.metadata_props[:]
        if node.op_type == "Dropout":
            copy = helper.make_node("Identity", [node.input[0]], [node.output[0]], name=node.name)
        copy.input[0] = source
        for i, out in enumerate(copy.output):
            if out:
                copy.output[i] = self.set_int(out)
        self.nodes.append(copy)
        return None

    @register_lowering(annotate.FUSED_ACT)
    def _lower_fused_act(self, node: onnx.NodeProto) -> None:
        src, out = node.input[0], node.output[0]
        same = (src in self.params and out in self.params
                and self.params[src].to_dict() == self.params[out].to_dict() and self._saturation_is(node, out))
        source = self.need_int(src) if same else None
        if source is None:
            return self._lower_qfloat(node)
        self.nodes.append(helper.make_node("Identity", [source], [self.set_int(out)], name=node.name or out))
        return None

    def _saturation_is(self, node: onnx.NodeProto, out: str) -> bool:
        """Whether saturating to ``out``'s integer range already applies the Relu/Clip ``node``
        (asymmetric parameters whose lowest value is 0, or above the clip's lower bound)."""
        params = self.params[out]
        low, high = annotate.clip_bounds(node, self.inits)
        storage_min = {"uint8": 0, "int8": -128, "int16": -32768}[params.dtype]
        storage_max = {"uint8": 255, "int8": 127, "int16": 32767}[params.dtype]
        scale, zero = float(params.scale.ravel()[0]), int(params.zero_point.ravel()[0])
        return scale * (storage_min - zero) >= low and scale * (storage_max - zero) <= high + 1e-6 * scale

    @register_lowering(annotate.QCONV)
    def _lower_qconv(self, node: onnx.NodeProto) -> None:
        x, w, y, bias = weighted_io(node)
        if self._lower_to_layer_float(node, out_axis=0):
            return None
        if not self._integer_layer(x, w, y, bias) or self.params[x].dtype != self.params[y].dtype:
            return self._lower_qfloat(node)
        if _is_large_depthwise(node, self.inits[w]) and self._lower_summed(node, out_axis=0):
            return None
        self._qlinear_conv(node)
        return None

    def _lower_summed(self, node: onnx.NodeProto, out_axis: int) -> bool:
        """The exact integer sum (:meth:`_exact_sum`), then the requantization to the stored output."""
        x, w, y, _ = weighted_io(node)
        summed = self._exact_sum(node, out_axis)
        if summed is None:
            return False
        acc, spatial = summed
        multiplier = requant_multiplier(self.params[x].scale.ravel()[0], self._w_scales(w, node, out_axis),
                                        self.params[y].scale.ravel()[0])
        self._requantize(acc, multiplier.reshape(-1, *spatial), y)
        return True

    @register_lowering(annotate.QCONVT)
    def _lower_qconvt(self, node: onnx.NodeProto) -> None:
        """Integer ConvTranspose: onnxruntime has no integer kernel for it (see :meth:`_exact_sum`)."""
        x, w, y, bias = weighted_io(node)
        if self._lower_to_layer_float(node, out_axis=1):
            return None
        if not self._integer_layer(x, w, y, bias) or not self._lower_summed(node, out_axis=1):
            return self._lower_qfloat(node)
        return None

    def _lower_to_layer_float(self, node: onnx.NodeProto, out_axis: int) -> bool:
        """A Conv/ConvTranspose/MatMul/Gemm whose output is not an integer tensor: inside its NPU layer
        (an activation or residual Add follows, ``openrknn.graph.npu_layers``) the real value
        ``float32(acc) · float32(s_x·s_w[c])`` goes on in float32, not stored; read only by float16
        layers it is stored as float16. Either way from the exact integer sum."""
        x, w, y, bias = weighted_io(node)
        if y in self.params or y not in self.float_tensors or not self.is_8bit(x):
            return False
        if not self._integer_weights(w, bias):
            return False
        summed = self._exact_sum(node, out_axis)
        if summed is None:
            return False
        acc, spatial = summed
        scale = (np.float32(self.params[x].scale.ravel()[0]) * self._w_scales(w, node, out_axis)).astype(np.float32)
        factor = self.const(f"{y}__acc_scale", scale.reshape(-1, *spatial))
        if y in self.internal:
            real = y if y in self.keep else f"{y}__f32"
            self.nodes.append(helper.make_node("Mul", [acc, factor], [real], name=f"{y}__real"))
        else:   # read by float16 layers only: stored as float16(s_x·s_w·acc)
            real = y if y in self.keep else float16_form(y)
            self.nodes += [helper.make_node("Mul", [acc, factor], [f"{y}__raw"], name=f"{y}__real"),
                           helper.make_node("Cast", [f"{y}__raw"], [f"{y}__half"], to=self.half,
                                            name=f"{y}__half_cast"),
                           helper.make_node("Cast", [f"{y}__half"], [real], to=onnx.TensorProto.FLOAT,
                                            name=f"{real}_cast")]
        self.float_name[y] = real
        return True

    def _integer_layer(self, x: str, w: str, y: str, bias: str | None) -> bool:
        return self.is_8bit(x, y) and self._integer_weights(w, bias)

    def _integer_weights(self, w: str, bias: str | None) -> bool:
        """8-bit integer weights (not grouped) and an int32 bias or none."""
        if w not in self.params or self.params[w].dtype not in _EIGHT_BIT:
            return False
        if self.params[w].group_size or self.inits[w].data_type == onnx.TensorProto.FLOAT:
            return False
        return bias is None or (bias in self.records and self.records[bias]["dtype"] == "int32")

    @register_lowering(annotate.QMATMUL)
    def _lower_qmatmul(self, node: onnx.NodeProto) -> None:
        x, w, y, bias = weighted_io(node)
        if self._lower_to_layer_float(node, out_axis=1):
            return None
        if not self._integer_layer(x, w, y, bias):
            return self._lower_qfloat(node)
        self._matmul_integer(node)
        return None

    @register_lowering(annotate.QMATMUL2)
    def _lower_qmatmul2(self, node: onnx.NodeProto) -> None:
        a, b, y = node.input[0], node.input[1], node.output[0]
        if not self.is_8bit(a, b, y):
            return self._lower_qfloat(node)
        self._matmul_integer2(node)
        return None


def _input_stage_constants(graph: onnx.GraphProto) -> set[str]:
    """Float constants read only by the input stage (mean/std): kept exact, not rounded to float16.

    The input stage turns the raw input into the first layer's integers in one step; rknn-toolkit2's
    simulator quantizes ``(x − mean) / std`` with the configured values, and rounding them to float16
    moved ~5 % of a picture's input integers by one step (bench/vendor_layers.py).
    """
    readers: dict[str, list[bool]] = {}
    for node in graph.node:
        stage = any(p.key == PREPROCESS_KEY for p in node.metadata_props)
        for name in node.input:
            readers.setdefault(name, []).append(stage)
    return {name for name, stages in readers.items() if all(stages)}


def _outer_references_of(node: onnx.NodeProto) -> set[str]:
    names: set[str] = set()
    for attr in node.attribute:
        subs = [attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs) \
            if attr.type == onnx.AttributeProto.GRAPHS else []
        for sub in subs:
            for inner in sub.node:
                names.update(inner.input)
            names |= _outer_references(sub)
    return names
