"""Turn a built model's structural ONNX graph into the layer list the NPU would execute.

One :class:`Layer` per row of the real tool's "Network Layer Information Table": an
``InputOperator`` per input, one layer per NPU/CPU op after the hardware fusions of seed 002
§8.4.2 (Conv+BatchNorm, Conv+activation, Conv+Add(+activation), Conv+Sigmoid·Mul = ConvExSwish),
and an ``OutputOperator`` per output. Shapes come from ONNX shape inference (all static).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import onnx
from onnx import TensorProto, helper

from openrknn import chips, log
from openrknn.errors import ModelLoadError
from openrknn.graph import npu_layers
from openrknn.graph.preprocess import PREPROCESS_KEY
from openrknn.graph.rknn_model import RKNNModel
from openrknn.profile import op_support
from openrknn.profile.cost_table import CostTable, cost_table
from openrknn.quant.settings import DTYPES, canonical_dtype

_ONNX_INT_TYPES = {TensorProto.INT64: "int64", TensorProto.INT32: "int32", TensorProto.BOOL: "bool",
                   TensorProto.UINT8: "uint8", TensorProto.INT8: "int8", TensorProto.INT16: "int16"}

@dataclass(frozen=True)
class TensorInfo:
    """A tensor as one layer sees it."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    const: bool = False

    @property
    def elements(self) -> int:
        return math.prod(self.shape) if self.shape else 1


@dataclass(frozen=True)
class ConvGeometry:
    """Sizes of a convolution-like layer (FC and MatMul are 1x1 convolutions over ``rows`` pixels)."""

    rows: int               # N·OH·OW output pixels (for ConvTranspose: input pixels)
    kh: int
    kw: int
    cin: int                # input channels per group
    cout: int               # output channels per group
    groups: int
    width: int = 0          # output width of a convolution (0: not a spatial convolution)

    @property
    def depthwise(self) -> bool:
        return self.groups > 1 and self.cin == 1

    @property
    def macs(self) -> int:
        return self.rows * self.kh * self.kw * self.cin * self.cout * self.groups


@dataclass
class Layer:
    """One row of the per-layer table, before costing."""

    op_type: str                  # printed OpType (fused name, e.g. ConvRelu)
    onnx_op: str                  # ONNX op of the main node
    name: str                     # main node (or tensor) name
    kind: str                     # conv/depthwise/fc/matmul/pool/eltwise/activation/data/... /input/output
    target: str                   # 'NPU' or 'CPU'
    dtype: str                    # input data type (DataType column)
    inputs: list[TensorInfo] = field(default_factory=list)   # activations, then weights/bias
    outputs: list[TensorInfo] = field(default_factory=list)
    conv: ConvGeometry | None = None
    nodes: tuple[str, ...] = ()
    low_efficiency: bool = False

    @property
    def full_name(self) -> str:
        return f"{self.onnx_op}:{self.name}"

    @property
    def macs(self) -> int:
        return self.conv.macs if self.conv else 0


def default_dtypes(quantized_dtype: str | None) -> tuple[str, str]:
    """``(activation dtype, weight dtype)`` of a model built with ``quantized_dtype``: the
    quantizer's own table (w8a16 and w4a16 keep float16 activations, per the API reference)."""
    if quantized_dtype is None:
        return "float16", "float16"
    try:
        spec = DTYPES[canonical_dtype(quantized_dtype)]
    except (KeyError, Exception):   # noqa: BLE001 - an unknown name in an old file: the default
        return "int8", "int8"
    return spec.act_dtype or "float16", spec.weight_dtype


class _Graph:
    """Shape-inferred view of the structural graph with constants resolved."""

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
            if n.op_type in op_support.SHAPE_OPS or (ins and all(i in self.consts for i in ins)):
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


class LayerBuilder:
    """Builds the layer list of one model for one chip (see module docstring)."""

    def __init__(self, model: RKNNModel, cost: CostTable, float_on_npu: bool = True) -> None:
        self.model = model
        self.cost = cost
        self.float_on_npu = float_on_npu
        self.g = _Graph(model)
        self.act_dtype, self.weight_dtype = default_dtypes(model.quantized_dtype)
        # the layer record (graph/npu_layers): grouping, printed OpType, op_target; by node output
        self.record_of = {out: record for record in npu_layers.model_records(model)
                          for out in record.node_outputs if out}
        # layers the chip's NPU limits put on the CPU (profile/limits.check_build, issue 32), by node name
        self.limit_cpu = set((model.metadata or {}).get("npu_limit_cpu_layers") or ())

    # --- dtypes -----------------------------------------------------------------------------
    def dtype(self, name: str) -> str:
        written = self.g.converted.get(name)
        if written in self.model.tensor_dtypes:   # the input stage converts to what the layers read
            return self.model.tensor_dtypes[written]
        if name in self.model.tensor_dtypes:
            return self.model.tensor_dtypes[name]
        et = self.g.elem_type.get(name)
        if et in _ONNX_INT_TYPES and not (name in self.g.consts and et in (TensorProto.INT8, TensorProto.UINT8)):
            return _ONNX_INT_TYPES[et]
        if name in self.g.inputs and self.model.is_quantized and len(self.g.shape(name)) == 4:
            return "uint8"          # image inputs of quantized models are fed as UINT8 (seed 002 §4.1.3)
        if name in self.g.consts:
            return self.weight_dtype
        return self.act_dtype

    def info(self, name: str) -> TensorInfo:
        return TensorInfo(name, self.g.shape(name), self.dtype(name), name in self.g.consts)

    def _weight_info(self, name: str, weight: str) -> TensorInfo:
        """A weight or bias of the layer whose weight is ``weight``: when the quantizer left that weight
        unquantized (a layer hybrid quantization puts in float16), its float initializers are stored in
        float16. (A model the quantizer did not produce — the cost model's reference networks — keeps the
        build's weight dtype; an int16 layer's float bias does not make the layer float16.)"""
        info = self.info(name)
        if (self.model.is_quantized and "quantization" in (self.model.metadata or {})
                and weight not in self.model.quant_params
                and self.g.elem_type.get(name) == TensorProto.FLOAT):
            return TensorInfo(name, info.shape, "float16", True)
        return info

    # --- build ------------------------------------------------------------------------------
    def build(self) -> list[Layer]:
        self._groups = {}
        by_layer: dict[str, list[onnx.NodeProto]] = {}
        for node in self.g.nodes:
            record = self.record_of.get(node.output[0]) if node.output else None
            by_layer.setdefault(record.name if record else node.name, []).append(node)
        for members in by_layer.values():
            for node in members:
                self._groups[node.name] = members
        layers = [Layer("InputOperator", "InputOperator", name, "input", "CPU", self.dtype(name),
                        outputs=[self.info(name)]) for name in self.g.inputs]
        used: set[str] = set()
        self._done: set[str] = set(self.g.inputs) | self.g.consts
        for node in self.g.nodes:
            if node.name in used:
                continue
            group = self._groups.get(node.name, [node])
            self._done.update(o for n in group for o in n.output)
            used.update(n.name for n in group)
            layer = self._layer(group)
            layers.extend(_pooling_cascade(layer) if self.cost.toolkit == 2 else [layer])
        for name in self.g.outputs_resolved:
            t = self.info(name)
            layers.append(Layer("OutputOperator", "OutputOperator", name, "output", "CPU", t.dtype, inputs=[t]))
        return layers

    def _is_weighted(self, node: onnx.NodeProto) -> bool:
        if node.op_type in ("Conv", "ConvTranspose"):
            return True
        return node.op_type in ("Gemm", "MatMul") and len(node.input) > 1 and node.input[1] in self.g.consts

    def _record(self, group: list[onnx.NodeProto]) -> npu_layers.LayerRecord | None:
        return self.record_of.get(group[0].output[0]) if group[0].output else None

    def _printed(self, group: list[onnx.NodeProto]) -> str:
        record = self._record(group)
        if record is not None:
            return record.op_name
        main = group[0]
        return npu_layers.PRINTED_NAME.get(main.op_type, main.op_type)

    def _layer(self, group: list[onnx.NodeProto]) -> Layer:
        main, last = group[0], group[-1]
        acts = [i for n in group for i in n.input if i and i not in self.g.consts
                and i not in {o for m in group for o in m.output}]
        weights = [i for i in main.input[1:] if i in self.g.consts] if self._is_weighted(main) else []
        inputs = [self.info(i) for i in dict.fromkeys(acts)] + [self._weight_info(w, weights[0]) for w in weights]
        outputs = [self.info(o) for o in last.output if o]
        kind, conv = self._kind(main)
        record = self._record(group)
        if len(group) > 1 and record is not None and record.op_name == npu_layers.PRINTED_ALONE[npu_layers.ATTENTION]:
            kind, conv = self._attention_kind(group)
        printed_dtype = (record.operand_dtype if record is not None else None) or (
            inputs[0].dtype if inputs else self.act_dtype)
        layer = Layer(self._printed(group), main.op_type, main.name, kind, "NPU", printed_dtype, inputs, outputs, conv,
                      tuple(n.name for n in group),
                      low_efficiency=len(group) == 1 and main.op_type in op_support.LOW_EFFICIENCY_OPS)
        layer.target = self._target(main, layer, record)
        return layer

    def _target(self, node: onnx.NodeProto, layer: Layer, record: npu_layers.LayerRecord | None) -> str:
        op = node.op_type
        if (record is not None and record.target == "CPU") or node.name in self.limit_cpu \
                or any(o in self.limit_cpu for o in node.output) \
                or op in op_support.CPU_OPS or op in self.cost.cpu_ops:
            return "CPU"
        if op not in op_support.NPU_OPS and op not in self.cost.npu_ops:
            log.debug(f"eval_perf: op {op} ({node.name}) has no NPU kernel in the cost model; costed on the CPU")
            return "CPU"
        if any(t.dtype == "int64" for t in layer.inputs if not t.const):
            return "CPU"
        if layer.op_type == "Reshape" and self.cost.toolkit == 2 and \
                any(o.name in self.g.outputs_resolved for o in layer.outputs):
            return "CPU"            # a final Reshape is done by the CPU (seed 002 §4.1.3 example)
        if layer.dtype in ("float16", "float32") and not self.float_on_npu:
            return "CPU"
        return "NPU"

    def _attention_kind(self, group: list[onnx.NodeProto]) -> tuple[str, ConvGeometry | None]:
        """An attention layer costs its two products, q·kᵀ and softmax·v: the geometry of the first
        with twice its output width (per head: T·d·T MACs each)."""
        product = next((n for n in group if n.op_type == "MatMul"), None)
        kind, geo = self._kind(product) if product is not None else ("matmul", None)
        if geo is None:
            return "matmul", None
        return "matmul", ConvGeometry(geo.rows, 1, 1, geo.cin, 2 * geo.cout, geo.groups)

    def _kind(self, node: onnx.NodeProto) -> tuple[str, ConvGeometry | None]:
        op = node.op_type
        if op in ("Conv", "ConvTranspose"):
            return self._conv_kind(node)
        if op in ("Gemm", "MatMul"):
            a, b = self.g.shape(node.input[0]), self.g.shape(node.input[1])
            if not a or not b:
                return "fc", None
            trans_b = any(x.name == "transB" and x.i for x in node.attribute)
            k = a[-1] if not any(x.name == "transA" and x.i for x in node.attribute) else a[0]
            n_out = b[-2] if trans_b else b[-1]
            batch = math.prod(b[:-2]) if len(b) > 2 else 1
            rows = math.prod(a) // max(k, 1)
            geo = ConvGeometry(rows=rows, kh=1, kw=1, cin=k, cout=n_out, groups=1)
            if batch > 1:
                geo = ConvGeometry(rows=rows // batch, kh=1, kw=1, cin=k, cout=n_out, groups=batch)
            return ("fc" if node.input[1] in self.g.consts else "matmul"), geo
        if op == "GlobalAveragePool":
            s = self.g.shape(node.input[0])
            if len(s) == 4:
                return "depthwise", ConvGeometry(s[0], s[2], s[3], 1, 1, s[1], 1)
        return _SIMPLE_KIND.get(op, "other"), None

    def _conv_kind(self, node: onnx.NodeProto) -> tuple[str, ConvGeometry | None]:
        x, w = self.g.shape(node.input[0]), self.g.shape(node.input[1])
        y = self.g.shape(node.output[0])
        if len(w) < 3 or not x or not y:
            return "conv", None
        groups = next((a.i for a in node.attribute if a.name == "group"), 1)
        kh, kw = (w[2], w[3]) if len(w) == 4 else (1, w[2])
        if node.op_type == "ConvTranspose":
            rows = math.prod(x) // max(x[1], 1)
            geo = ConvGeometry(rows, kh, kw, x[1] // groups, w[1], groups, x[-1])
        else:
            rows = math.prod(y) // max(y[1], 1)
            geo = ConvGeometry(rows, kh, kw, w[1], w[0] // groups, groups, y[-1])
        if geo.depthwise:
            return "depthwise", geo
        fc = kh == kw == 1 and geo.groups == 1 and math.prod(y[2:]) == 1 and node.op_type == "Conv"
        return ("fc" if fc else "conv"), geo     # a 1x1 conv on a 1x1 map is a fully connected layer


_SIMPLE_KIND = {
    **{op: "eltwise" for op in ("Add", "Sub", "Mul", "Div", "Max", "Min", "Sum", "Mean", "Pow", "Where",
                                 "Equal", "Less", "Greater", "And", "Or")},
    **{op: "activation" for op in ("Relu", "Clip", "LeakyRelu", "PRelu", "Sigmoid", "Tanh", "Elu", "Selu",
                                    "HardSwish", "HardSigmoid", "Softplus", "Gelu", "Erf", "Exp", "Sqrt",
                                    "Neg", "Abs", "Reciprocal", "Log", "Sin", "Cos", "Cast", "Swish", "Mish",
                                    "ThresholdedRelu", "Celu", "Round", "Floor", "Ceil", "Not")},
    **{op: "pool" for op in ("MaxPool", "AveragePool", "GlobalMaxPool", "LpPool")},
    **{op: "data" for op in ("Concat", "Split", "Slice", "Transpose", "Reshape", "Flatten", "Squeeze",
                              "Unsqueeze", "Pad", "Tile", "DepthToSpace", "SpaceToDepth", "Expand", "Gather",
                              "GatherElements", "GatherND", "ScatterND", "ScatterElements")},
    **{op: "resize" for op in ("Resize", "Upsample")},
    **{op: "softmax" for op in ("Softmax", "LogSoftmax")},
    **{op: "reduce" for op in ("ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL2",
                                "ArgMax", "ArgMin", "TopK", "CumSum")},
    **{op: "norm" for op in ("LayerNormalization", "InstanceNormalization", "BatchNormalization",
                              "LpNormalization")},
}


_POOL_STAGE = 7   # the largest window one depthwise stage of a global pooling covers per axis


def _pooling_cascade(layer: Layer) -> list[Layer]:
    """On RKNPU2, a GlobalAveragePool over more than 7×7 runs as a cascade of depthwise convolutions,
    each reducing every axis by up to 7 (kernel min(d, 7), stride 7): rknn-toolkit2's layer tables show
    e.g. 12×96 → 2×14 → 1×2 → 1×1 as three ``Conv`` layers (``…_2conv0/1/2``)."""
    if layer.onnx_op != "GlobalAveragePool" or layer.target != "NPU" or layer.conv is None or not layer.inputs:
        return [layer]
    source = layer.inputs[0]
    if len(source.shape) != 4 or max(source.shape[2:]) <= _POOL_STAGE:
        return [layer]
    n, c, h, w = source.shape
    stages, current = [], source
    k = 0
    while h > 1 or w > 1:
        kh, kw = min(h, _POOL_STAGE), min(w, _POOL_STAGE)
        h, w = -(-h // _POOL_STAGE), -(-w // _POOL_STAGE)
        last = h == 1 and w == 1
        out = layer.outputs[0] if last and layer.outputs else TensorInfo(f"{layer.name}_2conv{k}", (n, c, h, w),
                                                                          source.dtype)
        stages.append(Layer(layer.op_type, layer.onnx_op, f"{layer.name}_2conv{k}", layer.kind, layer.target,
                            layer.dtype, [current], [out], ConvGeometry(n * h * w, kh, kw, 1, 1, c, w), layer.nodes))
        current, k = out, k + 1
    return stages


def _is_preprocess(node: onnx.NodeProto) -> bool:
    return any(p.key == PREPROCESS_KEY for p in node.metadata_props)


def build_layers(model: RKNNModel, cost: CostTable, float_on_npu: bool = True) -> list[Layer]:
    """The executed layer list of ``model`` (see :class:`LayerBuilder`)."""
    return LayerBuilder(model, cost, float_on_npu).build()


def layer_count(model: RKNNModel, platform: str | None = None) -> int:
    """How many layers the chip executes for a built model, as rknn-toolkit2's layer table and
    ``eval_perf`` count them (InputOperator/OutputOperator rows included). ``openrknn info``, the
    build log and the workbench all print this number."""
    chip = chips.get_chip(platform or (model.platforms[0] if model.platforms else "rk3588"))
    return len(build_layers(model, cost_table(chip), chip.float_on_npu))


def weight_tensors(model: RKNNModel) -> dict[str, tuple[tuple[int, ...], int]]:
    """Initializers of the structural graph: ``name -> (shape, onnx elem type)``."""
    out: dict[str, tuple[tuple[int, ...], int]] = {}
    for init in model.graph.graph.initializer:
        out[init.name] = (tuple(int(d) for d in init.dims), init.data_type)
    for n in model.graph.graph.node:
        if n.op_type == "Constant":
            for a in n.attribute:
                if a.name == "value":
                    out[n.output[0]] = (tuple(int(d) for d in a.t.dims), a.t.data_type)
    return out


__all__ = ["Layer", "TensorInfo", "ConvGeometry", "build_layers", "default_dtypes", "layer_count", "weight_tensors"]
