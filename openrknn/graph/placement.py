"""Where each layer of a built model runs on one chip: the ``target`` of its :class:`LayerRecord`.

The layer record (:mod:`openrknn.graph.npu_layers`) knows the model-only placement (``op_target``).
This module adds what depends on the chip, and is the one place that decides NPU or CPU:

* ``op_target`` and the layers the chip's NPU limits move to the CPU (``build`` records them in
  ``metadata['npu_limit_cpu_layers']``, see :mod:`openrknn.graph.npu_limits`);
* ops with no NPU kernel (:data:`CPU_OPS`, ops outside :data:`NPU_OPS`; a chip table's
  ``cost.cpu_ops`` / ``cost.npu_ops`` adjust both);
* a layer reading an int64 tensor (seed 002 §4.1.3's final Reshape after an ArgMax), a final
  ``Reshape`` to one axis and, on RK3566, a ``Reshape`` that changes the channel count (chip data
  ``lowering.channel_reshape_on_cpu``) on RKNPU2, and a float layer on a chip without float on its NPU.

It also owns the *live* view of a built graph the layers are read from (:class:`LiveGraph`:
constants folded, aliases and the input stage removed, shapes and element types inferred), so
``profile/`` and every other reader take the executed layers and their targets from here.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import onnx
from onnx import TensorProto, helper

from openrknn import log
from openrknn.errors import ModelLoadError
from openrknn.graph import npu_layers
from openrknn.graph.preprocess import PREPROCESS_KEY
from openrknn.graph.rknn_model import RKNNModel

# Ops the RKNPU2 compiler maps to NPU layers (the OpList of the SDK, common subset).
NPU_OPS = frozenset({
    "Conv", "ConvTranspose", "Gemm", "MatMul", "Add", "Sub", "Mul", "Div", "Max", "Min", "Sum", "Mean",
    "Relu", "Clip", "LeakyRelu", "PRelu", "Sigmoid", "Tanh", "Elu", "Selu", "HardSwish", "HardSigmoid",
    "Softplus", "Gelu", "Erf", "Exp", "Sqrt", "Pow", "Neg", "Abs", "Reciprocal", "Log", "Sin", "Cos",
    "MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool", "LpNormalization",
    "Concat", "Split", "Slice", "Transpose", "Reshape", "Flatten", "Squeeze", "Unsqueeze",
    "Resize", "Upsample", "Pad", "Tile", "DepthToSpace", "SpaceToDepth", "Expand",
    "Softmax", "LogSoftmax", "ReduceMean", "ReduceSum", "ReduceMin", "ReduceL2",
    "LayerNormalization", "InstanceNormalization", "BatchNormalization", "Gather", "Cast",
    "LSTM", "GRU", "Swish", "Mish", "ThresholdedRelu", "Celu", "Shrink",
})

# Ops that always run on the CPU (seed 002 fig 8-4/8-5: ReduceMax, ArgMax on CPU; control flow,
# index and dynamic-shape ops have no NPU kernel).
CPU_OPS = frozenset({
    "ArgMax", "ArgMin", "ReduceMax", "ReduceProd", "TopK", "NonMaxSuppression", "NonZero", "Where",
    "ScatterND", "ScatterElements", "GatherND", "GatherElements", "Loop", "If", "Scan", "Range",
    "Einsum", "Mod", "Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "Not", "And", "Or",
    "Xor", "CumSum", "RoiAlign", "GridSample", "ConstantOfShape", "OneHot", "Round", "Floor", "Ceil",
    "RandomNormal", "RandomUniform", "Multinomial", "Unique", "Trilu", "Compress",
})

# Ops evaluated at build time: their outputs are constants when shapes are static.
SHAPE_OPS = frozenset({"Constant", "Shape", "Size"})

LIMIT_CPU_KEY = "npu_limit_cpu_layers"   # metadata: node names the chip's NPU limits put on the CPU

_ONNX_INT_TYPES = {TensorProto.INT64: "int64", TensorProto.INT32: "int32", TensorProto.BOOL: "bool",
                   TensorProto.UINT8: "uint8", TensorProto.INT8: "int8", TensorProto.INT16: "int16"}


@dataclass(frozen=True)
class ChipRules:
    """What of a chip's table decides placement."""

    toolkit: int
    float_on_npu: bool
    cpu_ops: frozenset[str] = frozenset()   # the chip table's ``cost.cpu_ops``: forced onto the CPU
    npu_ops: frozenset[str] = frozenset()   # ... and ``cost.npu_ops``: extra NPU ops
    channel_reshape_on_cpu: bool = False    # ``lowering.channel_reshape_on_cpu``: see _moves_channels

    @classmethod
    def of(cls, chip, float_on_npu: bool | None = None) -> "ChipRules":
        """The rules of a :class:`openrknn.chips.Chip` (``float_on_npu`` overrides the table's)."""
        cost = chip.cost or {}
        return cls(chip.toolkit, chip.float_on_npu if float_on_npu is None else float_on_npu,
                   frozenset(cost.get("cpu_ops") or ()), frozenset(cost.get("npu_ops") or ()),
                   bool((getattr(chip, "lowering", None) or {}).get("channel_reshape_on_cpu")))


class LiveGraph:
    """Shape-inferred view of a built model's structural graph: constants resolved, aliases
    (Identity/Dropout) and the input stage's preprocessing removed; ``nodes`` are what executes."""

    def __init__(self, model: RKNNModel) -> None:
        try:
            inferred = onnx.shape_inference.infer_shapes(model.graph, strict_mode=False, data_prop=True)
        except Exception as e:  # noqa: BLE001 - onnx raises several types; we only need a clear message
            raise ModelLoadError(f"shape inference of the built model failed ({e}); eval_perf/eval_memory need "
                                 f"static shapes: fix the input shapes with load_onnx(inputs=..., input_size_list=...)") from e
        g = inferred.graph
        self.graph = g
        self.elem_type: dict[str, int] = {}
        self.shapes: dict[str, tuple[int, ...]] = {}
        for vi in list(g.input) + list(g.output) + list(g.value_info):
            t = vi.type.tensor_type
            self.elem_type[vi.name] = t.elem_type
            if t.HasField("shape"):
                self.shapes[vi.name] = tuple(max(int(d.dim_value), 1) if d.HasField("dim_value") else 1
                                             for d in t.shape.dim)
        self.consts: set[str] = set()
        for init in g.initializer:
            self.consts.add(init.name)
            self.shapes[init.name] = tuple(int(d) for d in init.dims)
            self.elem_type[init.name] = init.data_type
        self.inputs = [vi.name for vi in g.input if vi.name not in self.consts]
        self.outputs = [vi.name for vi in g.output]
        self.nodes = self._live_nodes(g)
        self.consumers: dict[str, list[onnx.NodeProto]] = {}
        for n in self.nodes:
            for i in n.input:
                if i:
                    self.consumers.setdefault(i, []).append(n)
        self.producer = {o: n for n in self.nodes for o in n.output}

    def _live_nodes(self, g: onnx.GraphProto) -> list[onnx.NodeProto]:
        """Nodes left after constant folding and alias removal, in topological order."""
        self.alias: dict[str, str] = {}
        self.converted: dict[str, str] = {}   # graph input -> the tensor its input stage writes
        live = []
        for n in g.node:
            ins = [self.alias.get(i, i) for i in n.input if i]
            if n.op_type in SHAPE_OPS or (ins and all(i in self.consts for i in ins)):
                self.consts.update(n.output)
                if n.op_type == "Constant":
                    for a in n.attribute:
                        if a.name == "value":
                            self.shapes[n.output[0]] = tuple(int(d) for d in a.t.dims)
                continue
            if (n.op_type in npu_layers.ALIAS_OPS or _is_preprocess(n)) and ins:
                self.alias[n.output[0]] = ins[0]   # preprocessing runs in the NPU's input stage
                if _is_preprocess(n):
                    self.converted[ins[0]] = n.output[0]
                continue
            node = helper.make_node(n.op_type, [self.alias.get(i, i) for i in n.input], list(n.output),
                                    name=n.name or f"{n.op_type}_{len(live)}", domain=n.domain)
            node.attribute.extend(n.attribute)
            node.metadata_props.extend(n.metadata_props)   # the NPU layer marks (graph.npu_layers)
            live.append(node)
        self.outputs_resolved = [self.alias.get(o, o) for o in [vi.name for vi in g.output]]
        return live

    def shape(self, name: str) -> tuple[int, ...]:
        return self.shapes.get(self.alias.get(name, name), ())

    def single_consumer(self, name: str) -> onnx.NodeProto | None:
        users = self.consumers.get(name, [])
        if len(users) == 1 and name not in self.outputs_resolved:
            return users[0]
        return None

    def is_weighted(self, node: onnx.NodeProto) -> bool:
        """A Conv/ConvTranspose, or a Gemm/MatMul with a constant weight."""
        if node.op_type in ("Conv", "ConvTranspose"):
            return True
        return node.op_type in ("Gemm", "MatMul") and len(node.input) > 1 and node.input[1] in self.consts

    def tensor_dtype(self, model: RKNNModel, name: str, act_dtype: str, weight_dtype: str) -> str:
        """The dtype the chip holds ``name`` in (``act_dtype``/``weight_dtype``: the build's defaults)."""
        written = self.converted.get(name)
        if written in model.tensor_dtypes:   # the input stage converts to what the layers read
            return model.tensor_dtypes[written]
        if name in model.tensor_dtypes:
            return model.tensor_dtypes[name]
        et = self.elem_type.get(name)
        if et in _ONNX_INT_TYPES and not (name in self.consts and et in (TensorProto.INT8, TensorProto.UINT8)):
            return _ONNX_INT_TYPES[et]
        if name in self.inputs and model.is_quantized and len(self.shape(name)) == 4:
            return "uint8"          # image inputs of quantized models are fed as UINT8 (seed 002 §4.1.3)
        if name in self.consts:
            return weight_dtype
        return act_dtype

    def layer_input_dtypes(self, model: RKNNModel, group: list[onnx.NodeProto], act_dtype: str,
                           weight_dtype: str) -> list[str]:
        """The dtypes of :meth:`layer_inputs`. A weight or bias the quantizer left unquantized (a layer
        hybrid quantization puts in float16) is stored in float16; a model the quantizer did not
        produce (the cost model's reference networks) keeps the build's weight dtype, and an int16
        layer's float bias does not make the layer float16."""
        names = self.layer_inputs(group)
        weights = [n for n in names if n in self.consts]
        out = []
        for name in names:
            if (name in weights and model.is_quantized and "quantization" in (model.metadata or {})
                    and weights[0] not in model.quant_params and self.elem_type.get(name) == TensorProto.FLOAT):
                out.append("float16")
            else:
                out.append(self.tensor_dtype(model, name, act_dtype, weight_dtype))
        return out

    def layer_inputs(self, group: list[onnx.NodeProto]) -> list[str]:
        """The tensors a layer of live nodes reads: its activations (in order, once), then the main
        node's weights and bias."""
        produced = {o for m in group for o in m.output}
        acts = [i for n in group for i in n.input if i and i not in self.consts and i not in produced]
        main = group[0]
        weights = [i for i in main.input[1:] if i in self.consts] if self.is_weighted(main) else []
        return list(dict.fromkeys(acts)) + weights


@dataclass(frozen=True)
class ExecutedLayer:
    """One executed layer: its record (``target`` placed for the chip) and its live member nodes."""

    record: npu_layers.LayerRecord
    nodes: list[onnx.NodeProto]


def executed_layers(model: RKNNModel, view: LiveGraph, chip, act_dtype: str, weight_dtype: str,
                    float_on_npu: bool | None = None) -> list[ExecutedLayer]:
    """The layers ``chip`` executes for ``model``, in graph order, each record's ``target`` placed
    (module docstring). ``view`` is ``LiveGraph(model)``; ``act_dtype``/``weight_dtype`` are the
    build's default dtypes (what a tensor without its own dtype is held in)."""
    rules = ChipRules.of(chip, float_on_npu)
    record_of = {out: record for record in npu_layers.model_records(model) for out in record.node_outputs if out}
    by_layer: dict[str, list[onnx.NodeProto]] = {}
    for node in view.nodes:
        record = record_of.get(node.output[0]) if node.output else None
        by_layer.setdefault(record.name if record else node.name, []).append(node)
    groups = {node.name: members for members in by_layer.values() for node in members}
    limit_cpu = frozenset((model.metadata or {}).get(LIMIT_CPU_KEY) or ())
    layers: list[ExecutedLayer] = []
    used: set[str] = set()
    cpu_written: dict[str, bool] = {}   # tensor -> whether a CPU layer writes it
    for node in view.nodes:
        if node.name in used:
            continue
        group = groups.get(node.name, [node])
        used.update(n.name for n in group)
        record = record_of.get(group[0].output[0]) if group[0].output else None
        record = record or _single_node_record(group[0], act_dtype)
        if len(group) > 1 and record.op_name != _SOFTMAX_ALONE and any(_on_cpu(member, limit_cpu) for member in group[1:]):
            # a fused block the chip has no NPU entry for (attention on RK3566) runs node by node,
            # its CPU members on the CPU: rknn-toolkit2 prints exMatMul, exSoftmax13 (CPU), ...
            for member in group:
                single = _single_node_record(member, record.dtype)
                single = dataclasses.replace(single, op_name=_PRINTED_ALONE.get(member.op_type, single.op_name))
                target = _target(model, view, [member], single, rules, limit_cpu, act_dtype, weight_dtype)
                layers.append(ExecutedLayer(dataclasses.replace(single, target=target), [member]))
                cpu_written.update({o: target == "CPU" for o in member.output if o})
            continue
        target = _target(model, view, group, record, rules, limit_cpu, act_dtype, weight_dtype)
        if target == "NPU" and record.op_name == "Reshape" and rules.toolkit == 2 and \
                any(cpu_written.get(i) for i in view.layer_inputs(group)):
            target = "CPU"    # a Reshape of a CPU layer's output stays on the CPU (RK3566: RetinaFace heads, MobileSAM attention)
        layers.append(ExecutedLayer(dataclasses.replace(record, target=target), group))
        cpu_written.update({o: target == "CPU" for o in group[-1].output if o})
    return layers


# what rknn-toolkit2 prints for the members of an attention block it runs node by node (RK3566)
_PRINTED_ALONE = {"MatMul": "exMatMul", "Softmax": "exSoftmax13"}
# the Softmax layer of an attention the chip lowers unfused (npu_layers.unfused_attention_parts):
# one layer with the score steps before it, on the CPU whole when its Softmax is (rknn-toolkit2 on
# RK3566 prints one exSoftmax13 CPU row per MobileSAM window attention, PP-OCRv4 rec's INT8 too)
_SOFTMAX_ALONE = npu_layers.PRINTED_ALONE[npu_layers.ATTENTION_SOFTMAX]


def _on_cpu(node: onnx.NodeProto, limit_cpu: frozenset[str]) -> bool:
    return node.name in limit_cpu or any(o in limit_cpu for o in node.output)


def _single_node_record(node: onnx.NodeProto, dtype: str) -> npu_layers.LayerRecord:
    """The record of a live node the marked graph has none for (a node without outputs)."""
    return npu_layers.LayerRecord(node.name, (node.name,), "other", npu_layers.PRINTED_NAME.get(node.op_type, node.op_type),
                                  "NPU", tuple(o for o in node.output if o), dtype)


def _target(model: RKNNModel, view: LiveGraph, group: list[onnx.NodeProto], record: npu_layers.LayerRecord,
            rules: ChipRules, limit_cpu: frozenset[str], act_dtype: str, weight_dtype: str) -> str:
    """NPU or CPU for one layer (module docstring); ``record.target`` is the model-only placement."""
    main = group[0]
    op = main.op_type
    if record.target == "CPU" or any(_on_cpu(member, limit_cpu) for member in group) \
            or (op in CPU_OPS and op not in rules.npu_ops) or op in rules.cpu_ops:
        return "CPU"
    if op not in NPU_OPS and op not in rules.npu_ops:
        log.debug(f"eval_perf: op {op} ({main.name}) has no NPU kernel in the cost model; costed on the CPU")
        return "CPU"
    inputs = view.layer_inputs(group)
    dtypes = view.layer_input_dtypes(model, group, act_dtype, weight_dtype)
    if any(d == "int64" for name, d in zip(inputs, dtypes) if name not in view.consts):
        return "CPU"
    if record.op_name == "Reshape" and rules.toolkit == 2:
        source, shape = view.shape(inputs[0]) if inputs else (), view.shape(group[-1].output[0])
        if len(shape) < 2 and any(o in view.outputs_resolved for o in group[-1].output if o):
            return "CPU"        # a final Reshape to one axis (rknn-toolkit2 2.5.0: a whole-tensor mean's (1,1,1,1) → (1))
        if rules.channel_reshape_on_cpu and _moves_channels(source, shape):
            return "CPU"
    if layer_dtype(record, dtypes, act_dtype) in ("float16", "float32") and not rules.float_on_npu:
        return "CPU"
    return "NPU"


def _moves_channels(source: tuple[int, ...], shape: tuple[int, ...]) -> bool:
    """A Reshape whose second axis (the channels of NC1HWC2) changes length: elements move between
    the channel and spatial positions. RK3566 runs those on the CPU (rknn-toolkit2 2.5.0, probe graphs
    int8 and float16: (1,64,4,18) → (1,4608,1,1), (1,1,68,18) → (1,68,18) on the CPU; (1,128,16,16)
    → (1,128,1,256) and (1,64,1,1) → (1,64) on the NPU), the other RKNPU2 chips on the NPU."""
    return len(source) >= 2 and (len(shape) < 2 or source[1] != shape[1])


def layer_dtype(record: npu_layers.LayerRecord, input_dtypes: list[str], act_dtype: str) -> str:
    """The DataType of a layer (its table column): what the record says it reads when that is not
    its first input's (``operand_dtype``), else its first input's dtype, else ``act_dtype``."""
    return record.operand_dtype or (input_dtypes[0] if input_dtypes else act_dtype)


def _is_preprocess(node: onnx.NodeProto) -> bool:
    return any(p.key == PREPROCESS_KEY for p in node.metadata_props)


__all__ = ["NPU_OPS", "CPU_OPS", "SHAPE_OPS", "LIMIT_CPU_KEY", "ChipRules", "LiveGraph", "ExecutedLayer",
           "executed_layers", "layer_dtype"]
