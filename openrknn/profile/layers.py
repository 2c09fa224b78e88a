"""Turn a built model's structural ONNX graph into the layer list the NPU would execute.

One :class:`Layer` per row of the real tool's "Network Layer Information Table": an
``InputOperator`` per input, one layer per NPU/CPU op after the hardware fusions of seed 002
§8.4.2 (Conv+BatchNorm, Conv+activation, Conv+Add(+activation), Conv+Sigmoid·Mul = ConvExSwish),
and an ``OutputOperator`` per output. Shapes come from ONNX shape inference (all static).
The grouping, the printed OpType and where each layer runs come from the layer record
(``graph/placement.executed_layers``); this module sizes and costs the rows and decides no target.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import onnx

from openrknn import chips
from openrknn.graph import npu_layers, placement
from openrknn.graph.rknn_model import RKNNModel
from openrknn.profile import op_support
from openrknn.profile.cost_table import CostTable, cost_table
from openrknn.quant.settings import DTYPES, canonical_dtype

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
    dilation: int = 1       # the largest of the kernel's dilations

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


class LayerBuilder:
    """Builds the layer list of one model for one chip (see module docstring)."""

    def __init__(self, model: RKNNModel, cost: CostTable, float_on_npu: bool = True) -> None:
        self.model = model
        self.cost = cost
        self.float_on_npu = float_on_npu
        self.g = placement.LiveGraph(model)
        self.act_dtype, self.weight_dtype = default_dtypes(model.quantized_dtype)

    # --- dtypes -----------------------------------------------------------------------------
    def dtype(self, name: str) -> str:
        return self.g.tensor_dtype(self.model, name, self.act_dtype, self.weight_dtype)

    def info(self, name: str) -> TensorInfo:
        return TensorInfo(name, self.g.shape(name), self.dtype(name), name in self.g.consts)

    # --- build ------------------------------------------------------------------------------
    def build(self) -> list[Layer]:
        # the layer records (graph/): grouping, printed OpType and the target on this chip
        executed = placement.executed_layers(self.model, self.g, chips.get_chip(self.cost.chip), self.act_dtype,
                                             self.weight_dtype, self.float_on_npu)
        layers = [Layer("InputOperator", "InputOperator", name, "input", "CPU", self.dtype(name),
                        outputs=[self.info(name)]) for name in self.g.inputs]
        for layer in executed:
            row = self._layer(layer.nodes, layer.record)
            layers.extend(_pooling_cascade(row) if self.cost.toolkit == 2 else [row])
        for name in self.g.outputs_resolved:
            t = self.info(name)
            layers.append(Layer("OutputOperator", "OutputOperator", name, "output", "CPU", t.dtype, inputs=[t]))
        return layers

    def _layer(self, group: list[onnx.NodeProto], record: npu_layers.LayerRecord) -> Layer:
        main, last = group[0], group[-1]
        names = self.g.layer_inputs(group)
        dtypes = self.g.layer_input_dtypes(self.model, group, self.act_dtype, self.weight_dtype)
        inputs = [TensorInfo(name, self.g.shape(name), dtype, name in self.g.consts) for name, dtype in zip(names, dtypes)]
        outputs = [self.info(o) for o in last.output if o]
        kind, conv = self._kind(main)
        if len(group) > 1 and record.op_name == npu_layers.PRINTED_ALONE[npu_layers.ATTENTION]:
            kind, conv = self._attention_kind(group)
        elif len(group) > 1 and record.op_name == npu_layers.PRINTED_ALONE[npu_layers.ATTENTION_PRODUCT]:
            kind, conv = self._kind(next(n for n in group if n.op_type == "MatMul"))   # views and scale before it
        return Layer(record.op_name, main.op_type, main.name, kind, record.target,
                     placement.layer_dtype(record, dtypes, self.act_dtype), inputs, outputs, conv,
                     tuple(n.name for n in group),
                     low_efficiency=len(group) == 1 and main.op_type in op_support.LOW_EFFICIENCY_OPS)

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
        dilation = max(next((list(a.ints) for a in node.attribute if a.name == "dilations"), None) or [1])
        kh, kw = (w[2], w[3]) if len(w) == 4 else (1, w[2])
        if node.op_type == "ConvTranspose":
            rows = math.prod(x) // max(x[1], 1)
            geo = ConvGeometry(rows, kh, kw, x[1] // groups, w[1], groups, x[-1])
        else:
            rows = math.prod(y) // max(y[1], 1)
            geo = ConvGeometry(rows, kh, kw, w[1], w[0] // groups, groups, y[-1], dilation)
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


def _pooling_cascade(layer: Layer) -> list[Layer]:
    """On RKNPU2, a GlobalAveragePool over more than 7×7 runs as a cascade of depthwise convolutions,
    one row each, with the stages the layer record plans (``npu_layers.global_average_pool_stages``):
    rknn-toolkit2's layer tables show e.g. 12×96 → 2×14 → 1×2 → 1×1 as three ``Conv`` layers
    (``…_2conv0/1/2``)."""
    if layer.onnx_op != "GlobalAveragePool" or layer.target != "NPU" or layer.conv is None or not layer.inputs:
        return [layer]
    source = layer.inputs[0]
    if len(source.shape) != 4:
        return [layer]
    n, c, h, w = source.shape
    plan = npu_layers.global_average_pool_stages(h, w)
    if not plan:
        return [layer]
    stages, current = [], source
    for k, stage in enumerate(plan):
        (kh, kw), (top, left, bottom, right) = stage.kernel, stage.pads
        h, w = (h + top + bottom) // kh, (w + left + right) // kw
        last = k == len(plan) - 1
        out = layer.outputs[0] if last and layer.outputs else TensorInfo(f"{layer.name}_2conv{k}", (n, c, h, w),
                                                                          source.dtype)
        stages.append(Layer(layer.op_type, layer.onnx_op, f"{layer.name}_2conv{k}", layer.kind, layer.target,
                            layer.dtype, [current], [out], ConvGeometry(n * h * w, kh, kw, 1, 1, c, w), layer.nodes))
        current = out
    return stages


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
