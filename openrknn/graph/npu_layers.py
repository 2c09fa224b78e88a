"""The NPU layer graph: which ONNX nodes the NPU executes as one layer, and which tensors it stores.

One pass (:func:`mark_layers`, ``optimization_level`` 3) groups the nodes of a built graph into
layers and writes the grouping onto the nodes (``openrknn.layer`` = the layer's name on every node
of a multi-node layer, ``openrknn.fused_activation`` = the activation's printed name on its main
node), so the grouping travels with the graph into the ``.rknn`` file. Every stage reads it back
with :func:`layer_groups`: quantization (no quantization point inside a layer), the simulators (no
fp16 rounding or requantization inside a layer), the cost model (one row per layer) and accuracy
analysis. A layer is:

* a producer — Conv, ConvTranspose, Gemm, MatMul with a constant weight, BatchNormalization, Add —
  with the activation that follows it, for a Conv a residual ``Add`` (+ activation), for a MatMul
  the ``Add`` of a constant bias (a Gemm);
* or an activation alone (when its input is stored anyway).

Activations are found as *closures*: starting from the producer's output ``t``, every element-wise
node whose inputs are ``t``, constants or tensors already in the closure joins it; the closure is an
activation when it has one exit tensor and contains a non-linearity. That one rule covers what
exporters emit: hard-swish as ``x·Clip(x+3,0,6)/6``, ``x·Clip(x+3,0,6)·(1/6)``, ``x·(Clip(..)/6)``
or ``x·HardSigmoid(x)``; SiLU ``x·Sigmoid(x)``; Mish ``x·Tanh(Softplus(x))``; GELU in its erf and
tanh forms; and the single-node activations (Relu, Clip, HardSigmoid, ...).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import numpy_helper

from openrknn import log

LAYER_KEY = "openrknn.layer"
FUSED_ACTIVATION_KEY = "openrknn.fused_activation"
LAYER_NORM = "LayerNorm"   # the function name of a decomposed-normalisation layer
ATTENTION = "SDPAttention"   # ... and of a scaled dot-product attention layer
# The products and the Softmax of an attention a chip does not fuse (rknn-toolkit2 on rk3566:
# ``exMatMul``, ``exSoftmax13 INT8``): layers of their own, integer in and out like the fused one.
ATTENTION_PRODUCT = "AttentionMatMul"
ATTENTION_SOFTMAX = "AttentionSoftmax"
FUNCTION_LAYERS = frozenset({LAYER_NORM, ATTENTION, ATTENTION_PRODUCT, ATTENTION_SOFTMAX})   # integer in and out, float32 inside
# Model metadata key: ``unfused`` when the target chip runs an attention's products apart
# (chip data ``lowering.fused_attention: false``; written at build time by ``compile``).
ATTENTION_LOWERING_KEY = "openrknn.attention_lowering"
# Normalisation ops rknn-toolkit2 2.5.0 runs as one ``exNorm`` layer that reads and stores the
# build's activation dtype (``exNorm INT8``), float inside — like a decomposed LayerNorm (measured:
# a transformer encoder's LayerNormalization, FPN's GroupNorm exported as InstanceNormalization).
NORM_OPS = frozenset({"LayerNormalization", "InstanceNormalization"})


def integer_power(node: onnx.NodeProto, initializers: dict[str, onnx.TensorProto]) -> bool:
    """A ``Pow`` by a constant whole number: rknn-toolkit2 runs it as an int8 layer (``Pow INT8``:
    yolov5's box decode ``(2·σ)² · anchor`` in the oracle corpus, probes with exponents 2 and 3);
    other powers (a square root ...) stay float16."""
    if node.op_type != "Pow" or len(node.input) != 2 or node.input[1] not in initializers:
        return False
    exponent = numpy_helper.to_array(initializers[node.input[1]])
    return exponent.size == 1 and float(exponent.ravel()[0]).is_integer() and float(exponent.ravel()[0]) >= 2

# Producers the NPU fuses a following activation into (seed 002 §8.4.2). A ReduceSum over the
# channels is lowered to a 1×1 convolution by rknn-toolkit2, which fuses the Clip after it
# (``ConvClip``, measured on a YOLO-style score sum).
FUSING_PRODUCERS = frozenset({"Conv", "ConvTranspose", "Gemm", "MatMul", "Add", "BatchNormalization", "ReduceSum"})
_NONLINEAR = frozenset({"Relu", "Clip", "LeakyRelu", "PRelu", "Sigmoid", "Tanh", "Elu", "Selu", "HardSwish",
                        "HardSigmoid", "Gelu", "Softplus", "Mish", "Erf", "Swish"})
_ARITHMETIC = frozenset({"Add", "Sub", "Mul", "Div", "Pow"})
_MAX_ACTIVATION_NODES = 10
# Printed names of single-node activations in the layer tables (the real tool's OpType suffixes).
PRINTED_ACTIVATION = {"Relu": "Relu", "Clip": "Clip", "LeakyRelu": "LeakyRelu", "PRelu": "PRelu",
                      "Sigmoid": "Sigmoid", "Tanh": "Tanh", "Elu": "Elu", "Selu": "Selu", "HardSwish": "HardSwish",
                      "HardSigmoid": "HardSigmoid", "Gelu": "Gelu", "Swish": "Swish", "Mish": "Mish",
                      "Softplus": "Softplus"}
# Suffix of a fused activation in the printed OpType (rknn-toolkit2 2.5.0 prints SiLU as
# ``ConvExSwish`` and GELU as ``ConvExGelu``: measured on YOLOv8 and ConvNeXt).
PRINTED_SUFFIX = {"Swish": "ExSwish", "Gelu": "ExGelu"}
# Printed OpType of a layer that is an activation or function of several ONNX nodes on its own.
PRINTED_ALONE = {"Swish": "exSwish", "LayerNorm": "exNorm", "SDPAttention": "exSDPAttention",
                 ATTENTION_PRODUCT: "exMatMul", ATTENTION_SOFTMAX: "exSoftmax13"}
# Printed OpType of single ops whose name differs in the real tool's tables.
PRINTED_NAME = {"Flatten": "Reshape", "Squeeze": "Reshape", "Unsqueeze": "Reshape", "Upsample": "Resize",
                "Gemm": "Conv", "GlobalAveragePool": "Conv"}
# ... and of a layer whose main node is one of these (the op it is lowered to).
PRINTED_LOWERED = {"ReduceSum": "Conv"}
# Activations a quantized producer applies by saturating to its output's integer range.
SATURATING_ACTIVATIONS = frozenset({"Relu", "Clip"})
TARGET_KEY = "openrknn.target"   # 'CPU' on a node op_target puts on the CPU


@dataclass
class LayerGroup:
    """One NPU layer: ``nodes[0]`` is the main node; ``internal`` tensors are never stored."""

    name: str
    nodes: list[onnx.NodeProto]
    activation: str | None = None                 # printed activation name, None without one
    internal: set[str] = field(default_factory=set)

    @property
    def main(self) -> onnx.NodeProto:
        return self.nodes[0]

    @property
    def outputs(self) -> list[str]:
        """The tensors the layer stores (its exits)."""
        return [o for n in self.nodes for o in n.output if o and o not in self.internal]


class _View:
    """Readers, producers and constants of one graph."""

    def __init__(self, graph: onnx.GraphProto) -> None:
        self.consts = {i.name for i in graph.initializer}
        self.consts |= {o for n in graph.node if n.op_type == "Constant" for o in n.output}
        self.scalars = {i.name: i for i in graph.initializer}
        self.scalars.update({n.output[0]: a.t for n in graph.node if n.op_type == "Constant"
                             for a in n.attribute if a.name == "value"})
        self.outputs = {o.name for o in graph.output}
        self.nodes = list(graph.node)   # nodes are referred to by their position in this list
        self.readers: dict[str, list[int]] = {}
        self.producer_index = {o: i for i, n in enumerate(self.nodes) for o in n.output}
        for index, node in enumerate(self.nodes):
            for name in node.input:
                if name:
                    self.readers.setdefault(name, []).append(index)

    def scalar(self, name: str) -> float | None:
        """The value of a one-element constant, None for anything else."""
        tensor = self.scalars.get(name)
        if tensor is None:
            return None
        array = numpy_helper.to_array(tensor)
        return float(array.ravel()[0]) if array.size == 1 else None

    def data_inputs(self, node: onnx.NodeProto) -> list[str]:
        return [i for i in node.input if i and i not in self.consts]

    def read_only_by(self, tensor: str, members: list[int]) -> bool:
        return tensor not in self.outputs and all(r in members for r in self.readers.get(tensor, []))


def _grow(view: _View, tensor: str, joins, limit: int) -> list[int]:
    """Positions of the nodes reachable from ``tensor`` whose inputs are ``tensor``, constants or
    outputs of nodes already taken and that ``joins(node)`` accepts, in order of discovery."""
    members: list[int] = []
    known = {tensor}
    grown = True
    while grown and len(members) < limit:
        grown = False
        for name in list(known):
            for index in view.readers.get(name, []):
                reader = view.nodes[index]
                if index in members or not joins(reader):
                    continue
                if all(i in known or i in view.consts for i in reader.input if i):
                    members.append(index)
                    known.update(o for o in reader.output if o)
                    grown = True
    return members


def _exits(view: _View, members: list[int]) -> list[str]:
    """Tensors of ``members`` read outside them (or graph outputs)."""
    return [o for m in members for o in view.nodes[m].output if o and not view.read_only_by(o, members)]


def _one_exit(view: _View, members: list[int], what: str, tensor: str) -> list[int] | None:
    """``members`` in graph order when only the last one's output leaves them, else None (logged)."""
    members = sorted(members)
    exits = _exits(view, members)
    if len(exits) == 1 and exits[0] == view.nodes[members[-1]].output[0]:
        return members
    log.debug(f"layer graph: {what} from '{tensor}' not fused: {len(exits)} of its tensors are read "
              f"outside it ({exits[:3]})")
    return None


def activation_closure(view: _View, tensor: str) -> tuple[list[int], str] | None:
    """The activation that starts at ``tensor``: its nodes (positions, in order of discovery) and
    its printed name, or None."""
    members = _grow(view, tensor, lambda n: n.domain in ("", "ai.onnx") and n.op_type in _NONLINEAR | _ARITHMETIC
                    and len(n.output) == 1, _MAX_ACTIVATION_NODES)
    name, unnamed = None, False
    while members:
        exits = _exits(view, members)
        if len(exits) == 1 and exits[0] == view.nodes[members[-1]].output[0] \
                and not (unnamed and view.nodes[members[-1]].op_type not in _NONLINEAR):
            name = _activation_name(view, [view.nodes[m] for m in members])
            if name:
                break
            unnamed = True   # two activations in a row (Relu → Add(c) → Relu): up to the first one
        members.pop()          # drop the last-discovered node and try the smaller closure
    if not members:
        return None
    if name == "HardSwish":
        members = _hardswish_only(view, members)
    elif name in _RELU_FAMILY:
        members = _without_trailing_affine(view, members)
    return (members, name) if name else None


_RELU_FAMILY = frozenset({"Relu", "LeakyRelu", "PRelu"})


def _without_trailing_affine(view: _View, members: list[int]) -> list[int]:
    """Drop a constant scale + offset (``Mul`` then ``Add``, either operand order) after a ReLU:
    rknn-toolkit2 stores the ReLU's output and runs them as layers of their own (``Mul FLOAT`` +
    ``Add`` for ``Mul(c, x)``, one ``BatchNormalization`` for ``Mul(x, c)``; measured on probe
    graphs). A lone scale stays in the layer (rknn-toolkit2 folds it away too)."""
    ordered = sorted(members)
    last = max(i for i in ordered if view.nodes[i].op_type in _NONLINEAR)
    rest = [view.nodes[i] for i in ordered if i > last]
    if [n.op_type for n in rest] != ["Mul", "Add"] or any(len(view.data_inputs(n)) != 1 for n in rest):
        return members
    keep = [i for i in ordered if i <= last]
    exits = _exits(view, keep)
    if len(exits) != 1 or exits[0] != view.nodes[keep[-1]].output[0]:
        return members
    return [m for m in members if m in keep]


def _hardswish_only(view: _View, members: list[int]) -> list[int]:
    """Drop the constant steps after a hard-swish's ``·(1/6)``: rknn-toolkit2 stores the hard-swish
    output and runs a learnable scale/offset after it as layers of their own (measured, PP-OCRv4 rec)."""
    ordered = sorted(members)
    core = [i for i in ordered if view.nodes[i].op_type in _NONLINEAR
            or (view.nodes[i].op_type == "Mul" and len(view.data_inputs(view.nodes[i])) == 2)]
    keep = [i for i in ordered if i <= core[-1]]
    rest = [i for i in ordered if i > core[-1]]
    if rest:
        step = view.nodes[rest[0]]
        value = next((view.scalar(i) for i in step.input if i in view.consts), None)
        if value is not None and ((step.op_type == "Div" and abs(value - 6.0) < 1e-4)
                                  or (step.op_type == "Mul" and abs(value - 1 / 6) < 1e-4)):
            keep.append(rest[0])
    exits = _exits(view, keep)
    if len(exits) != 1 or exits[0] != view.nodes[keep[-1]].output[0]:
        return members
    return [m for m in members if m in keep]


def _activation_name(view: _View, members: list[onnx.NodeProto]) -> str | None:
    ops = {m.op_type for m in members}
    if not ops & _NONLINEAR:
        return None
    data_products = any(m.op_type == "Mul" and len(view.data_inputs(m)) == 2 for m in members)
    if "Erf" in ops or ("Tanh" in ops and "Pow" in ops):
        return "Gelu"
    if {"Softplus", "Tanh"} <= ops and data_products:
        return "Mish"
    if "Sigmoid" in ops and data_products:
        return "Swish"
    if ops & {"Clip", "HardSigmoid", "Relu"} and data_products:
        return "HardSwish"
    nonlinear = [m for m in members if m.op_type in _NONLINEAR]
    if len(nonlinear) == 1 and not data_products:
        return PRINTED_ACTIVATION.get(nonlinear[0].op_type, nonlinear[0].op_type)
    return None


_NORM_OPS = frozenset({"ReduceMean", "Sub", "Pow", "Add", "Sqrt", "Div", "Mul", "Reciprocal"})


def norm_closure(view: _View, tensor: str) -> list[int] | None:
    """A normalisation decomposed into element-wise and mean steps (LayerNorm exported below
    opset 17: ReduceMean, Sub, Pow, ReduceMean, Add ε, Sqrt, Div, then the γ/β affine): its nodes,
    or None. It is one NPU layer (rknn-toolkit2 prints it as ``exNorm``)."""
    members = _grow(view, tensor, lambda n: n.op_type in _NORM_OPS and len(n.output) == 1, 12)
    ops = [view.nodes[m].op_type for m in members]
    if ops.count("ReduceMean") < 2 or not ({"Sqrt", "Reciprocal"} & set(ops) or "Pow" in ops[2:]):
        return None
    return _one_exit(view, members, "normalisation", tensor)


_ATTENTION_OPS = frozenset({"Reshape", "Transpose", "Slice", "Squeeze", "Unsqueeze", "Split", "Gather", "MatMul",
                            "Mul", "Div", "Add", "Softmax"})


def attention_closure(view: _View, tensor: str) -> list[int] | None:
    """Scaled dot-product attention from its fused q/k/v tensor: the head split (Reshape,
    Transpose, Slice/Split/Gather, Squeeze), the q scaling, ``Softmax(q·kᵀ)·v`` and the head merge,
    up to the projection (a MatMul with a constant weight is the next layer). One NPU layer
    (rknn-toolkit2 prints ``exSDPAttention``); None when ``tensor`` does not start one."""
    def joins(node: onnx.NodeProto) -> bool:   # a MatMul with a constant weight is the projection after
        return (node.op_type in _ATTENTION_OPS and node.domain in ("", "ai.onnx")
                and not (node.op_type == "MatMul" and any(i in view.consts for i in node.input)))
    members = _grow(view, tensor, joins, 40)
    products = [m for m in members if view.nodes[m].op_type == "MatMul"]
    if len(products) < 2 or not any(view.nodes[m].op_type == "Softmax" for m in members):
        return None
    return _one_exit(view, members, "attention", tensor)


_VIEW_OPS = frozenset({"Reshape", "Transpose", "Squeeze", "Unsqueeze", "Flatten"})
_HEAD_SPLIT_OPS = frozenset({"Slice", "Gather", "Split"})


def attention_parts(view: _View, members: list[int]) -> list[tuple[list[int], str | None]]:
    """An attention closure as rknn-toolkit2 2.5.0 lays it out (oracle: PP-OCRv4 rec's SVTR blocks
    and ``nn.MultiheadAttention``, rk3588/rk3576): a ``Reshape`` layer (the head reshape/transpose
    of the fused q/k/v tensor), a ``Split`` layer (the q/k/v pieces and their head views), the
    ``exSDPAttention`` layer (scale, q·kᵀ, Softmax, ·v) and a ``Reshape`` layer (the head merge).
    Each part with its activation mark; the closure whole when it has no such shape."""
    member_set = set(members)
    whole = [(members, ATTENTION)]

    def member_readers(tensor: str) -> list[int]:
        return [r for r in view.readers.get(tensor, []) if r in member_set]

    def op(i: int) -> str:
        return view.nodes[i].op_type

    pre: list[int] = []
    current = members[0]
    while op(current) in _VIEW_OPS:
        pre.append(current)
        readers = member_readers(view.nodes[current].output[0])
        if len(readers) != 1:
            break
        current = readers[0]
    if not pre or len(member_readers(view.nodes[pre[-1]].output[0])) < 2 and op(current) != "Split":
        return whole
    heads = member_readers(view.nodes[pre[-1]].output[0])
    if not heads or not all(op(h) in _HEAD_SPLIT_OPS for h in heads):
        return whole
    split = list(heads)   # the pieces alone: their head views run in the attention layer (PP-OCRv4 rec)
    last_product = max(m for m in members if op(m) == "MatMul")
    post, tensor = [], view.nodes[last_product].output[0]
    while True:
        readers = member_readers(tensor)
        if len(readers) != 1 or op(readers[0]) not in _VIEW_OPS:
            break
        post.append(readers[0])
        tensor = view.nodes[readers[0]].output[0]
    taken = set(pre) | set(split) | set(post)
    core = [m for m in members if m not in taken]
    if not post or not any(op(m) == "Softmax" for m in core) or sum(op(m) == "MatMul" for m in core) < 2:
        return whole
    return [(sorted(pre), None), (sorted(split), None), (sorted(core), ATTENTION), (sorted(post), None)]


def unfused_attention_parts(view: _View, core: list[int]) -> list[tuple[list[int], str | None]]:
    """The attention layer of a chip that does not fuse it (rknn-toolkit2 2.5.0 on rk3566, PP-OCRv4
    rec: ``Transpose``, ``exMatMul``, ``exSoftmax13``, ``exMatMul``): kᵀ a Transpose layer, each
    product a layer with the views and scale before it, the Softmax a layer."""
    core_set = set(core)
    owner: dict[int, int] = {}
    heads = [m for m in core if view.nodes[m].op_type in ("MatMul", "Softmax", "Transpose")]
    for head in heads:   # each head takes the other core nodes it alone is fed by
        owner[head] = head
        stack = [head]
        while stack:
            for name in view.data_inputs(view.nodes[stack.pop()]):
                source = view.producer_index.get(name)
                if source in core_set and source not in owner and view.nodes[source].op_type not in (
                        "MatMul", "Softmax", "Transpose"):
                    owner[source] = head
                    stack.append(source)
    if len(owner) != len(core):
        return [(core, ATTENTION)]
    names = {"MatMul": ATTENTION_PRODUCT, "Softmax": ATTENTION_SOFTMAX, "Transpose": None}
    return [(sorted(m for m, h in owner.items() if h == head), names[view.nodes[head].op_type]) for head in heads]


def _is_producer(view: _View, node: onnx.NodeProto) -> bool:
    if node.op_type not in FUSING_PRODUCERS or node.domain not in ("", "ai.onnx") or len(node.output) != 1:
        return False
    if node.op_type in ("Gemm", "MatMul"):
        return len(node.input) > 1 and node.input[1] in view.consts
    if node.op_type == "Add":   # an element-wise layer of two tensors; Add(x, constant) is an activation step
        return len(view.data_inputs(node)) == 2
    if node.op_type == "ReduceSum":
        return _channel_sum(view, node)
    return True


def _channel_sum(view: _View, node: onnx.NodeProto) -> bool:
    """A ReduceSum over axis 1 only, dimensions kept: a 1×1 convolution with all-ones weights."""
    keepdims = next((a.i for a in node.attribute if a.name == "keepdims"), 1)
    axes = next((list(a.ints) for a in node.attribute if a.name == "axes"), None)
    if axes is None and len(node.input) > 1 and node.input[1] in view.scalars:
        axes = [int(v) for v in numpy_helper.to_array(view.scalars[node.input[1]]).ravel()]
    return bool(keepdims) and axes == [1]


def find_layers(model: onnx.ModelProto, cpu_nodes: frozenset[str] = frozenset(),
                fuse_constant_steps: bool = False) -> list[LayerGroup]:
    """Group the nodes of ``model`` into NPU layers (graph order); ``cpu_nodes`` (``op_target``)
    are never fused with anything.

    By default the grouping is rknn-toolkit2 2.5.0's (measured with ``bench/compare_layers.py``):
    constant ``Mul``/``Add``/``Sub``/``Div`` steps after an element-wise layer are layers of their
    own — ``Mul(x, c) → Add(·, c)`` one ``BatchNormalization`` layer, a ``Mul(c, x)`` (constant
    first, as paddle2onnx exports PP-LCNetV3's learnable scale) a ``Mul`` layer and the ``Add``
    after it another (printed ``Mul FLOAT``: :attr:`LayerRecord.operand_dtype`; it reads and
    stores int8). ``fuse_constant_steps=True`` is openrknn's exact extra fusion
    (the steps join the layer before them: one int8 rounding fewer); never the default. The
    input stage's mean/std steps are always one layer with the input."""
    view = _View(model.graph)
    unfused_attention = any(p.key == ATTENTION_LOWERING_KEY and p.value == "unfused" for p in model.metadata_props)
    taken: set[int] = set()
    groups: list[LayerGroup] = []
    for index in range(len(view.nodes)):
        if index in taken:
            continue
        members, activation = _layer_from(view, index, taken, cpu_nodes)
        if activation == ATTENTION:
            parts = attention_parts(view, members)
            if unfused_attention:
                parts = [p for part in parts for p in (unfused_attention_parts(view, part[0]) if part[1] == ATTENTION
                                                       and len(parts) > 1 else [part])]
            for part, part_activation in parts:
                taken.update(part)
                groups.append(_group(view, part, part_activation))
            continue
        if fuse_constant_steps or _is_preprocess(view.nodes[members[0]]):
            members = _with_constant_steps(view, members, taken, cpu_nodes)
        elif len(members) == 1 and _is_affine_pair(view, members[0], taken, cpu_nodes):
            members = members + view.readers[view.nodes[members[0]].output[0]]
        taken.update(members)
        groups.append(_group(view, members, activation))
    return groups


def _is_preprocess(node: onnx.NodeProto) -> bool:
    return _mark(node, "openrknn.preprocess") is not None   # graph/preprocess.PREPROCESS_KEY


def _is_affine_pair(view: _View, index: int, taken: set[int], cpu_nodes: frozenset[str]) -> bool:
    """``Mul(x, c) → Add(·, c')`` (data first, constants second): rknn-toolkit2 runs the pair as one
    ``BatchNormalization`` layer."""
    mul = view.nodes[index]
    if mul.op_type != "Mul" or len(mul.input) != 2 or mul.input[0] in view.consts or mul.input[1] not in view.consts \
            or mul.output[0] in view.outputs or mul.name in cpu_nodes:
        return False
    readers = view.readers.get(mul.output[0], [])
    if len(readers) != 1 or readers[0] in taken:
        return False
    add = view.nodes[readers[0]]
    return add.op_type == "Add" and add.name not in cpu_nodes and len(add.input) == 2 and add.input[1] in view.consts \
        and _one_value_per_channel(view, add.input[1]) and _one_value_per_channel(view, mul.input[1])


def _one_value_per_channel(view: _View, name: str) -> bool:
    """A constant with at most one axis longer than 1 (a scale or offset a BatchNormalization can
    hold); a whole map (YOLOv5's ``Mul(σ, 2) → Add(grid)``) makes rknn-toolkit2 print ``Mul`` and
    ``Add`` apart (measured, yolov5n/s rk3588 int8)."""
    tensor = view.scalars.get(name)
    return tensor is not None and sum(d != 1 for d in tensor.dims) <= 1


def _layer_from(view: _View, index: int, taken: set[int], cpu_nodes: frozenset[str]) -> tuple[list[int], str | None]:
    node = view.nodes[index]
    name = node.name or (node.output[0] if node.output else "")
    if node.name in cpu_nodes or not node.output:
        return [index], None

    def free(found: list[int]) -> bool:
        return not any(m in taken or view.nodes[m].name in cpu_nodes for m in found)

    siblings = _sibling_channel_slices(view, index, taken, cpu_nodes)
    if siblings:
        return siblings, None
    if _is_producer(view, node):
        members, tensor = [index], node.output[0]
        bias = _bias_add(view, index, cpu_nodes)
        if bias is not None and bias not in taken:   # MatMul + Add(constant): a Gemm with its bias
            members.append(bias)
            tensor = view.nodes[bias].output[0]
        residual = _residual_add(view, index, members[-1], cpu_nodes)
        if residual is None:
            viewed = _residual_add_after_views(view, index, members[-1], cpu_nodes)
            if viewed is not None and not any(m in taken for m in viewed):
                members.extend(viewed[:-1])
                residual = viewed[-1]
        if residual is not None and residual not in taken:
            members.append(residual)
            tensor = view.nodes[residual].output[0]
        found = activation_closure(view, tensor)
        if found and found[1] == "Swish" and residual is not None and residual not in taken:
            found = None   # rknn-toolkit2 prints ConvAdd + exSwish, never ConvAddExSwish (measured: ReXNet)
        if found and _gemm_keeps_apart(node, found[1]):
            found = None
        if found and node.op_type == "ConvTranspose" and _is_constant_add(view, view.nodes[found[0][0]]):
            found = None   # its bias Add stays apart (_transposed_bias)
        if found and view.read_only_by(tensor, found[0]) and free(found[0]):
            return members + found[0], found[1]
        if found:
            log.debug(f"layer graph: {found[1]} after '{name}' not fused: its input '{tensor}' is read elsewhere")
        return members, None
    if node.op_type in ("Reshape", "Split", "Transpose"):
        source = next(iter(view.data_inputs(node)), None)
        found_attention = attention_closure(view, source) if source else None
        if found_attention and found_attention[0] == index and free(found_attention):
            return found_attention, ATTENTION
    if node.op_type == "ReduceMean":
        source = next(iter(view.data_inputs(node)), None)
        found_norm = norm_closure(view, source) if source else None
        if found_norm and found_norm[0] == index and free(found_norm):
            return found_norm, LAYER_NORM
    if node.op_type in _NONLINEAR | _ARITHMETIC:
        source = next(iter(view.data_inputs(node)), None)
        if source and _is_constant_add(view, node) and _transposed_bias(view, source):
            return [index], None
        found = activation_closure(view, source) if source else None
        if found and found[0][0] == index and len(found[0]) > 1 and free(found[0]):
            return found[0], found[1]
    return [index], None


def _transposed_bias(view: _View, tensor: str) -> bool:
    """A constant ``Add`` reading a ConvTranspose's output (paddle2onnx's bias) is a layer of its
    own, and the activation after it another: rknn-toolkit2 2.5.0 prints ``ConvTranspose``, ``Add``,
    ``Sigmoid`` (PP-OCRv3 det's head, rk3588 int8; ``Add`` + ``BatchNormalizationRelu`` for its first
    ConvTranspose). Other steps after a ConvTranspose fuse as before (not probed)."""
    producer = view.producer_index.get(tensor)
    return producer is not None and view.nodes[producer].op_type == "ConvTranspose"


def _is_constant_add(view: _View, node: onnx.NodeProto) -> bool:
    """``Add(x, c)``: one data input, the other a constant."""
    return node.op_type == "Add" and len(view.data_inputs(node)) == 1 and len([i for i in node.input if i]) == 2


def _gemm_keeps_apart(node: onnx.NodeProto, activation: str) -> bool:
    """A hard-swish after a ``Gemm`` is a layer of its own: rknn-toolkit2 2.5.0 runs the Gemm as a
    1×1 Conv, reshapes its output to 2-D and prints ``HardSwish`` alone (measured on probe heads,
    rk3588 int8, and MobileNetV3's classifier), while it fuses a ReLU or a Sigmoid (``ConvRelu``,
    ``ConvSigmoid``)."""
    return node.op_type == "Gemm" and activation == "HardSwish"


def _channel_slice(view: _View, node: onnx.NodeProto) -> bool:
    """A Slice along the channel axis only, step 1 (constant starts/ends/axes/steps)."""
    if node.op_type != "Slice" or node.domain not in ("", "ai.onnx") or len(node.input) < 4 or len(node.output) != 1:
        return False
    if any(i not in view.scalars for i in node.input[1:] if i):
        return False
    axes = numpy_helper.to_array(view.scalars[node.input[3]]).ravel().tolist() if node.input[3] else [0]
    steps = numpy_helper.to_array(view.scalars[node.input[4]]).ravel().tolist() \
        if len(node.input) > 4 and node.input[4] else [1]
    return axes in ([1], [-3]) and steps == [1]


def _sibling_channel_slices(view: _View, index: int, taken: set[int], cpu_nodes: frozenset[str]) -> list[int] | None:
    """Channel Slices of one tensor, from its first one: rknn-toolkit2 runs them as one ``Split``
    layer (measured: ``Conv+Relu`` → two channel Slices prints one ``Split`` row)."""
    node = view.nodes[index]
    if node.name in cpu_nodes or not _channel_slice(view, node):
        return None
    siblings = [r for r in view.readers.get(node.input[0], []) if r not in taken and view.nodes[r].name not in cpu_nodes
                and _channel_slice(view, view.nodes[r])]
    return siblings if len(siblings) > 1 and siblings[0] == index else None


_CONSTANT_STEPS = frozenset({"Mul", "Add", "Sub", "Div"})
_WEIGHTED = frozenset({"Conv", "ConvTranspose", "Gemm", "MatMul"})


def _with_constant_steps(view: _View, members: list[int], taken: set[int], cpu_nodes: frozenset[str]) -> list[int]:
    """An element-wise layer followed by constant Mul/Add/Sub/Div steps (a scale, an offset) is one
    layer: the NPU applies them in the same pass, its result is not stored in between."""
    members = list(members)
    while True:
        last = view.nodes[max(members)]
        if last.op_type in _WEIGHTED or len(last.output) != 1 or last.output[0] in view.outputs \
                or last.name in cpu_nodes:
            return members
        readers = view.readers.get(last.output[0], [])
        if len(readers) != 1 or readers[0] in taken or readers[0] in members:
            return members
        step = view.nodes[readers[0]]
        if step.op_type not in _CONSTANT_STEPS or step.name in cpu_nodes or len(step.input) != 2 \
                or sum(i in view.consts for i in step.input) != 1:
            return members
        members.append(readers[0])


def _sole_add(view: _View, producer: int, op_type: str, cpu_nodes: frozenset[str]) -> int | None:
    """The position of the two-input ``Add`` that alone reads the output of ``producer`` (an
    ``op_type`` node), or None."""
    node = view.nodes[producer]
    if node.op_type != op_type:
        return None
    readers = view.readers.get(node.output[0], [])
    if len(readers) != 1 or node.output[0] in view.outputs:
        return None
    add = view.nodes[readers[0]]
    return readers[0] if add.op_type == "Add" and add.name not in cpu_nodes and len(add.input) == 2 else None


def _bias_add(view: _View, matmul: int, cpu_nodes: frozenset[str]) -> int | None:
    """``MatMul(x, W) → Add(·, b)`` with a constant ``b``: the NPU runs it as one Gemm with a bias."""
    add = _sole_add(view, matmul, "MatMul", cpu_nodes)
    return add if add is not None and sum(i in view.consts for i in view.nodes[add].input) == 1 else None


def _residual_add(view: _View, conv: int, tail: int, cpu_nodes: frozenset[str], after_views: bool = False) -> int | None:
    """``Conv → Add(conv, other)`` where ``other`` is another stored activation: ConvAdd. A MatMul
    or Gemm with a constant weight (and its bias ``tail``) takes the residual ``Add`` after it the same way:
    rknn-toolkit2 lowers it to a 1×1 Conv and prints ``ConvAdd`` (measured: the attention and MLP
    projections of PP-OCRv4 rec's SVTR blocks and of a transformer encoder). A depthwise Conv never
    takes one: rknn-toolkit2 runs the ``Add`` as a layer of its own (measured: mobileone_s0's strided
    depthwise branches, probes of depthwise 3×3 + 1×1 pairs at stride 1 and 2)."""
    producer = view.nodes[conv]
    if _is_depthwise(view, producer):
        return None
    if producer.op_type != "Conv" and not (producer.op_type in ("MatMul", "Gemm") and len(producer.input) > 1
                                           and producer.input[1] in view.consts):
        return None
    add = _sole_add(view, tail, view.nodes[tail].op_type, cpu_nodes)
    if add is None or (after_views and len(view.data_inputs(view.nodes[add])) != 2):
        return None
    other = [i for i in view.nodes[add].input if i != view.nodes[tail].output[0]]
    if len(other) != 1 or other[0] in view.consts:
        return None
    # the NPU reads the other operand from memory: it must exist before this Conv runs (the Add
    # of two branches goes with the Conv that finishes last)
    if view.producer_index.get(other[0], -1) < conv:
        return add
    log.debug(f"layer graph: Add '{view.nodes[add].name}' not fused into Conv '{view.nodes[conv].name}': its other "
              f"operand '{other[0]}' is computed after that Conv")
    return None


def _is_depthwise(view: _View, node: onnx.NodeProto) -> bool:
    """A grouped Conv with one input channel per group (constant weights)."""
    weight = view.scalars.get(node.input[1]) if node.op_type == "Conv" and len(node.input) > 1 else None
    group = next((a.i for a in node.attribute if a.name == "group"), 1)
    return weight is not None and group > 1 and len(weight.dims) == 4 and weight.dims[1] == 1


def _same_bytes_views(view: _View, tail: int, cpu_nodes: frozenset[str]) -> list[int]:
    """The Reshapes — and Transposes that move only size-1 axes — that alone read ``tail``'s
    output one after the other: views of the same bytes in the same order (the first must be a
    Reshape to a constant shape, from which the Transposes' axes are known)."""
    chain: list[int] = []
    shape: list[int] | None = None
    current = tail
    while True:
        out = view.nodes[current].output[0]
        readers = view.readers.get(out, [])
        if len(readers) != 1 or out in view.outputs:
            return chain
        node = view.nodes[readers[0]]
        if node.name in cpu_nodes or node.domain not in ("", "ai.onnx"):
            return chain
        if node.op_type == "Reshape" and len(node.input) > 1 and node.input[1] in view.scalars:
            target = numpy_helper.to_array(view.scalars[node.input[1]]).ravel().tolist()
            if any(d <= 0 for d in target):
                return chain
            shape = [int(d) for d in target]
        elif node.op_type == "Transpose" and shape is not None:
            perm = next((list(a.ints) for a in node.attribute if a.name == "perm"), None)
            if perm is None or sorted(perm) != list(range(len(shape))) \
                    or [p for p in perm if shape[p] != 1] != [k for k in range(len(shape)) if shape[k] != 1]:
                return chain
            shape = [shape[p] for p in perm]
        else:
            return chain
        chain.append(readers[0])
        current = readers[0]


def _residual_add_after_views(view: _View, producer: int, tail: int, cpu_nodes: frozenset[str]) -> list[int] | None:
    """``Gemm/MatMul(x, W) [+ b] → Reshape → Transpose(size-1 axes) → Add(residual)``
    (``nn.MultiheadAttention``'s out-projection, batch 1): rknn-toolkit2 drops the views and prints
    ``ConvAdd`` (oracle: its transformer encoder). The views and the Add, in order, or None."""
    if view.nodes[producer].op_type not in ("MatMul", "Gemm"):
        return None
    chain = _same_bytes_views(view, tail, cpu_nodes)
    if not chain:
        return None
    add = _residual_add(view, producer, chain[-1], cpu_nodes, after_views=True)
    return chain + [add] if add is not None else None


def _group(view: _View, members: list[int], activation: str | None) -> LayerGroup:
    nodes = [view.nodes[m] for m in sorted(members)]
    main = view.nodes[members[0]]
    group = LayerGroup(main.name or (main.output[0] if main.output else ""), nodes, activation)
    if len(nodes) > 1:
        group.internal = {o for n in nodes for o in n.output if o and view.read_only_by(o, members)}
    return group


# ----------------------------------------------------------------------------- persisted form
def mark_layers(model: onnx.ModelProto, cpu_nodes: frozenset[str] | None = None) -> bool:
    """Write the layer grouping onto the nodes (``openrknn.layer``, ``openrknn.fused_activation``,
    ``openrknn.target``; stale marks removed); True when a mark changed. ``cpu_nodes`` are the
    nodes ``op_target`` puts on the CPU (None: keep the targets already marked)."""
    if cpu_nodes is None:
        cpu_nodes = frozenset(n.name for n in model.graph.node if _mark(n, TARGET_KEY) == "CPU")
    wanted: dict[str, dict[str, str]] = {}   # by a node's first output (unique in a graph)
    for node in model.graph.node:
        if node.name in cpu_nodes and node.output:
            wanted.setdefault(node.output[0], {})[TARGET_KEY] = "CPU"
    for group in find_layers(model, cpu_nodes):
        if len(group.nodes) == 1 and group.activation not in FUNCTION_LAYERS:
            continue
        for node in group.nodes:
            wanted.setdefault(node.output[0], {})[LAYER_KEY] = group.name
        if group.activation:
            wanted[group.main.output[0]][FUSED_ACTIVATION_KEY] = group.activation
    modified = False
    for node in model.graph.node:
        marks = wanted.get(node.output[0], {}) if node.output else {}
        for key in (LAYER_KEY, FUSED_ACTIVATION_KEY, TARGET_KEY):
            if _mark(node, key) == marks.get(key):
                continue
            modified = True
            if key in marks:
                _set_mark(node, key, marks[key])
            else:
                keep = [p for p in node.metadata_props if p.key != key]
                del node.metadata_props[:]
                node.metadata_props.extend(keep)
    return modified


def layer_groups(graph: onnx.GraphProto) -> list[LayerGroup]:
    """The layers written by :func:`mark_layers`, in graph order (unmarked nodes are layers of one)."""
    groups: dict[str, LayerGroup] = {}
    order: list[LayerGroup] = []
    for node in graph.node:
        layer = _mark(node, LAYER_KEY)
        if layer is None:
            order.append(LayerGroup(node.name or node.output[0], [node]))
            continue
        if layer not in groups:
            groups[layer] = LayerGroup(layer, [])
            order.append(groups[layer])
        groups[layer].nodes.append(node)
    reading_layers: dict[str, set[str | None]] = {}   # tensor -> the layers (None: unmarked) that read it
    for node in graph.node:
        for name in node.input:
            reading_layers.setdefault(name, set()).add(_mark(node, LAYER_KEY))
    outputs = {o.name for o in graph.output}
    for group in groups.values():
        group.activation = _mark(group.main, FUSED_ACTIVATION_KEY)
        group.internal = {o for n in group.nodes for o in n.output if o and o not in outputs
                          and reading_layers.get(o, set()) <= {group.name}}
    return order


def same_layer_pairs(graph: onnx.GraphProto) -> set[str]:
    """First outputs of the nodes that run in the same layer as the producer of their first input
    (a Relu fused into its Conv): what quantization needs to share one set of parameters."""
    layer_of = {n.output[0]: _mark(n, LAYER_KEY) for n in graph.node if n.output}
    return {n.output[0] for n in graph.node if n.output and n.input and _mark(n, LAYER_KEY) is not None
            and layer_of.get(n.input[0]) == _mark(n, LAYER_KEY)}


def internal_tensors(graph: onnx.GraphProto) -> set[str]:
    """Tensors computed inside a layer and never stored."""
    return {t for g in layer_groups(graph) for t in g.internal}


def fused_activation(node: onnx.NodeProto) -> str | None:
    """Printed name of the activation fused into ``node``'s layer, if ``node`` is a layer's main node."""
    return _mark(node, FUSED_ACTIVATION_KEY)


def _mark(node: onnx.NodeProto, key: str) -> str | None:
    return next((p.value for p in node.metadata_props if p.key == key), None)


def _set_mark(node: onnx.NodeProto, key: str, value: str) -> None:
    for prop in node.metadata_props:
        if prop.key == key:
            prop.value = value
            return
    node.metadata_props.add(key=key, value=value)


# ----------------------------------------------------------------------------- the typed record
ALIAS_OPS = frozenset({"Identity", "Dropout"})   # vanish in the compiled model (rknn-toolkit2: no layer)
_WEIGHTED_KINDS = {"Conv": "conv", "ConvTranspose": "conv", "Gemm": "gemm", "MatMul": "gemm"}
_ELEMENTWISE = frozenset({"Add", "Sub", "Mul", "Div", "Max", "Min", "Sum", "Mean", "Pow", "Where", "Equal",
                          "Less", "Greater", "And", "Or"})
_DATA = frozenset({"Concat", "Split", "Slice", "Transpose", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Pad",
                   "Tile", "DepthToSpace", "SpaceToDepth", "Expand", "Gather", "GatherElements", "GatherND",
                   "ScatterND", "ScatterElements", "Resize", "Upsample"})


@dataclass(frozen=True)
class LayerRecord:
    """What the chip executes as one layer.

    Attributes:
        name: the layer's name (its main node's).
        nodes: its member ONNX nodes by name (an unnamed node by its first output), in graph
            order, the main node first.
        kind: ``conv``, ``conv+add``, ``gemm``, ``activation``, ``elementwise``, ``function``
            (LayerNorm, attention: integer in and out, float32 inside), ``data``, ``alias``
            (Identity/Dropout: no layer) or ``other``.
        op_name: the OpType rknn-toolkit2 prints (``ConvHardSwish``, ``ConvAdd``, ``exSwish`` ...).
        target: ``NPU`` or ``CPU``: ``op_target`` here; ``graph/placement.executed_layers`` places
            the records for a chip (op lists, NPU limits, dtypes) and is the one place that decides.
        stored: the tensors the layer writes to memory.
        dtype: the dtype of its first stored tensor (``tensor_dtypes``, else the default given).
        node_outputs: the first output of each member node (what identifies a node in a graph).
        operand_dtype: the DataType rknn-toolkit2 prints for the layer when its main node's first
            input is a constant (None otherwise: the activations' dtype is printed). It prints the
            type it stores that constant in — ``float`` for the one scale of a ``Mul(c, x)``
            (paddle2onnx's learnable scale: ``Mul FLOAT``), ``int16`` for per-channel scales,
            ``int32`` for an ``Add(c, x)`` offset (measured, rknn-toolkit2 2.5.0, int8) — while the
            layer reads and stores int8 like its neighbours: the scale multiplies in float, the
            result is requantized (``qfloat``, what both simulators run).
    """

    name: str
    nodes: tuple[str, ...]
    kind: str
    op_name: str
    target: str
    stored: tuple[str, ...]
    dtype: str
    node_outputs: tuple[str, ...] = ()
    operand_dtype: str | None = None


def _weighted(node: onnx.NodeProto, consts: set[str]) -> bool:
    if node.op_type in ("Conv", "ConvTranspose"):
        return True
    return node.op_type in ("Gemm", "MatMul") and len(node.input) > 1 and node.input[1] in consts


def group_kind_and_name(group: LayerGroup, consts: set[str],
                        constant_shapes: dict[str, tuple[int, ...]] | None = None) -> tuple[str, str]:
    """(kind, printed OpType) of one layer (``constant_shapes``: the dims of its constants, when known)."""
    main = group.main
    activation = group.activation if len(group.nodes) > 1 or group.activation in FUNCTION_LAYERS else None
    if activation in FUNCTION_LAYERS:
        return "function", PRINTED_ALONE[activation]
    if main.op_type in NORM_OPS and main.domain in ("", "ai.onnx"):
        return "function", PRINTED_ALONE[LAYER_NORM]
    suffix = PRINTED_SUFFIX.get(activation, activation) if activation else ""
    if not _weighted(main, consts):
        if activation and constant_shapes and _affine_then_activation(group.nodes, constant_shapes):
            return "activation", "BatchNormalization" + suffix
        if len(group.nodes) > 1 and main.op_type not in FUSING_PRODUCERS and activation:
            return "activation", PRINTED_ALONE.get(activation, activation)   # several ONNX nodes, alone
        op = main.op_type
        if op in PRINTED_LOWERED and activation:   # ReduceSum + Clip: ConvClip
            return "conv", PRINTED_LOWERED[op] + suffix
        if op in _HEAD_SPLIT_OPS and len(group.nodes) > 1:
            return "data", "Split"   # sibling channel Slices, an attention's q/k/v pieces: one Split layer
        if op in _VIEW_OPS and len(group.nodes) > 1 and all(n.op_type in _VIEW_OPS for n in group.nodes):
            if op in ("Squeeze", "Unsqueeze") and any(n.op_type == "Transpose" for n in group.nodes):
                return "data", "Transpose"   # an unfused attention's kᵀ after its piece's squeeze (rk3566)
            return "data", "Reshape"   # an attention's head reshape / merge (rknn-toolkit2 prints Reshape)
        if op == "Mul" and [n.op_type for n in group.nodes] == ["Mul", "Add"]:
            return "elementwise", "BatchNormalization"   # Mul(x, c) → Add(·, c'): rknn-toolkit2's name
        kind = ("alias" if op in ALIAS_OPS else "activation" if op in _NONLINEAR else
                "elementwise" if op in _ELEMENTWISE else "data" if op in _DATA else "other")
        return kind, PRINTED_NAME.get(op, op) + suffix
    name, kind = ("ConvTranspose" if main.op_type == "ConvTranspose" else "Conv"), _WEIGHTED_KINDS[main.op_type]
    after = list(group.nodes[1:])
    if main.op_type in ("MatMul", "Gemm"):   # views of the projection's bytes before its residual Add
        after = [n for n in after if n.op_type not in ("Reshape", "Transpose")]
    if main.op_type in ("MatMul", "Gemm") and after and after[0].op_type == "Add" \
            and len([i for i in after[0].input if i not in consts]) == 1:
        after = after[1:]   # the MatMul's bias: the residual Add comes next
    if (main.op_type in ("Conv", "MatMul", "Gemm") and after and after[0].op_type == "Add"
            and len([i for i in after[0].input if i not in consts]) == 2):   # a residual Add
        name, kind = name + "Add", "conv+add"
    return kind, name + suffix


def _affine_then_activation(nodes: list[onnx.NodeProto], constant_shapes: dict[str, tuple[int, ...]]) -> bool:
    """``Mul(x, c) → Add(·, c') → activation`` with one value per channel (data first): rknn-toolkit2
    makes the pair a BatchNormalization and fuses the activation (``BatchNormalizationRelu``,
    measured: a trained GroupNorm's affine before a ReLU, rk3588 int8)."""
    if [n.op_type for n in nodes[:2]] != ["Mul", "Add"] or len(nodes) != 3 or nodes[2].op_type not in PRINTED_ACTIVATION:
        return False
    for step in nodes[:2]:
        if len(step.input) != 2 or step.input[0] in constant_shapes or step.input[1] not in constant_shapes \
                or sum(d != 1 for d in constant_shapes[step.input[1]]) > 1:
            return False
    return nodes[1].input[0] == nodes[0].output[0] and nodes[2].input[0] == nodes[1].output[0]


_INTEGER_DTYPES = frozenset({"int8", "uint8", "int16", "uint16", "int4"})


def constant_operand_dtype(group: LayerGroup, constant_shapes: dict[str, tuple[int, ...]],
                           quantized: bool) -> str | None:
    """The type rknn-toolkit2 prints for a layer whose main node reads a constant first (see
    :attr:`LayerRecord.operand_dtype`), None for any other layer. Measured on probe graphs: int8
    builds print ``Mul FLOAT`` (one value), ``Mul INT16`` (per channel), ``Add INT32``; float16
    builds ``Mul FLOAT`` / ``Add FLOAT`` for one value and FLOAT16 per channel. A constant that
    varies along more than one axis (a whole ``N×C×H×W`` map) is an int8 operand like an
    activation: ``Add(c, x)`` prints ``Add INT8`` then (measured)."""
    main = group.main
    if main.domain not in ("", "ai.onnx") or main.op_type not in ("Mul", "Add") or len(main.input) != 2 \
            or main.input[0] not in constant_shapes or main.input[1] in constant_shapes:
        return None
    shape = constant_shapes[main.input[0]]
    if sum(d != 1 for d in shape) > 1:
        return None
    one_value = math.prod(shape) == 1
    if quantized:
        return "int32" if main.op_type == "Add" else "float" if one_value else "int16"
    return "float" if one_value else None


def target_for(node: onnx.NodeProto, chip: object | None = None) -> str | None:
    """Where ``node`` runs when that is decided by the model alone: ``'CPU'`` for an ``op_target``
    node, else None (``graph/placement`` then decides from the chip's data)."""
    return "CPU" if _mark(node, TARGET_KEY) == "CPU" else None


def cpu_nodes(graph: onnx.GraphProto, op_target: dict[str, str] | None) -> frozenset[str]:
    """Names of the nodes ``op_target`` puts on the CPU (named by node or by output tensor)."""
    wanted = {k for k, v in (op_target or {}).items() if str(v).lower() == "cpu"}
    return frozenset(n.name for n in graph.node if n.name in wanted or any(o in wanted for o in n.output))


def layer_records(graph: onnx.GraphProto, tensor_dtypes: dict[str, str] | None = None,
                  default_dtype: str = "float16") -> list[LayerRecord]:
    """The typed layer list of a marked graph, in graph order (see :class:`LayerRecord`)."""
    shapes = {i.name: tuple(i.dims) for i in graph.initializer}
    shapes.update({n.output[0]: tuple(a.t.dims) for n in graph.node if n.op_type == "Constant" and n.output
                   for a in n.attribute if a.name == "value"})
    consts = set(shapes) | {o for n in graph.node if n.op_type == "Constant" for o in n.output}
    dtypes = tensor_dtypes or {}
    records = []
    for group in layer_groups(graph):
        if all(n.op_type == "Constant" for n in group.nodes):
            continue
        kind, op_name = group_kind_and_name(group, consts, shapes)
        cpu = any(target_for(n) == "CPU" for n in group.nodes)
        stored = tuple(group.outputs)
        dtype = dtypes.get(stored[0], default_dtype) if stored else default_dtype
        records.append(LayerRecord(group.name, tuple(n.name or n.output[0] for n in group.nodes), kind, op_name,
                                   "CPU" if cpu else "NPU", stored, dtype,
                                   tuple(n.output[0] if n.output else "" for n in group.nodes),
                                   constant_operand_dtype(group, shapes, dtype in _INTEGER_DTYPES)))
    return records


def model_records(model, default_dtype: str = "float16") -> list[LayerRecord]:
    """The layer records of a built model (an ``RKNNModel``), its ``op_target`` applied: a model
    whose metadata names CPU nodes its marks do not have yet (an older file) is re-marked on a copy."""
    graph = model.graph
    wanted = cpu_nodes(graph.graph, (model.metadata or {}).get("op_target"))
    marked = frozenset(n.name for n in graph.graph.node if _mark(n, TARGET_KEY) == "CPU")
    if not wanted <= marked:
        copy = onnx.ModelProto()
        copy.CopyFrom(graph)
        mark_layers(copy, wanted | marked)
        graph = copy
    return layer_records(graph.graph, model.tensor_dtypes, default_dtype)


# ----------------------------------------------------------------------------- global average pooling
GLOBAL_POOL_LIMIT = 7   # the largest H, W a global pool (and a pooling kernel) takes on the NPU


@dataclass(frozen=True)
class PoolStage:
    """One stage of a lowered GlobalAveragePool: the zero-padded sum over ``kernel`` windows (stride =
    kernel), times ``factor``. Pads are (top, left, bottom, right)."""

    kernel: tuple[int, int]
    pads: tuple[int, int, int, int]
    factor: float


def global_average_pool_stages(height: int, width: int) -> list[PoolStage]:
    """How rknn-toolkit2 2.5.0 runs a GlobalAveragePool over ``height × width``: none (one pooling
    layer) when both are at most 7, else a cascade of pooling stages, each stored in int8.

    Measured on its simulator (PP-OCR classifier, ten pools 12×96, 3×96, 2×96, 1×48; every stage
    equal integer for integer; PP-OCRv3 det's 15×15 and 120×120 → 18×18 → 3×3 pools, read from its
    per-layer sessions; a probe over 48², 24², 16², 12², 10² pools whose first stages' calibrated
    ranges in the ``hybrid_quantization_step1`` config are the ones this plan computes, to 7 digits):
    each dimension shrinks per stage from ``n`` to ``out = ceil(n/7)`` with a
    kernel (and stride) of 7 — ``n`` itself on the last stage — and the missing ``7·out − n`` positions
    as zero padding, the smaller half before (15 → 3 pools the windows 4, 7, 4 wide, not 5, 5, 5;
    18 → 3 the windows 6, 7, 5); a dimension already at 1 takes kernel 1; every stage multiplies its window sum by
    the same ``(H·W)^(−1/stages)``. The vendor names the stored stages ``{node}_2convJ`` (J counts all
    but the last stage, which is the output; an unnamed node is ``GlobalAveragePool@K``, K counting
    the graph's GlobalAveragePool nodes)."""
    if height <= GLOBAL_POOL_LIMIT and width <= GLOBAL_POOL_LIMIT:
        return []

    def steps(n: int) -> list[tuple[int, int]]:   # (kernel, padding) per stage
        out: list[tuple[int, int]] = []
        while n > 1:
            size = math.ceil(n / GLOBAL_POOL_LIMIT)
            kernel = GLOBAL_POOL_LIMIT if size > 1 else n
            out.append((kernel, size * kernel - n))
            n = size
        return out

    rows, cols = steps(height), steps(width)
    count = max(len(rows), len(cols))
    rows += [(1, 0)] * (count - len(rows))
    cols += [(1, 0)] * (count - len(cols))
    factor = float(height * width) ** (-1.0 / count)
    return [PoolStage((kh, kw), (ph // 2, pw // 2, ph - ph // 2, pw - pw // 2), factor)
            for (kh, ph), (kw, pw) in zip(rows, cols)]


def pool_stage_tensor(output: str, index: int) -> str:
    """The stored tensor of stage ``index`` (all but the last) of the pool writing ``output``."""
    return f"{output}__pool_stage{index}"


def is_pool_stage(tensor: str) -> bool:
    """Whether ``tensor`` names a stored stage of a cascaded global pool (:func:`pool_stage_tensor`)."""
    return "__pool_stage" in tensor


def pool_output_of(stage_tensor: str) -> str:
    """The pool output a :func:`pool_stage_tensor` name belongs to."""
    return stage_tensor.rsplit("__pool_stage", 1)[0]


def global_pool_cascades(model: onnx.ModelProto) -> dict[str, tuple[str, list[PoolStage]]]:
    """Every GlobalAveragePool run as a cascade: its output → (its input, its stages). Reads the
    input's shape from the graph's value infos (inferred when absent)."""
    pools = [n for n in model.graph.node if n.op_type == "GlobalAveragePool" and n.domain in ("", "ai.onnx")]
    if not pools:
        return {}
    shapes = _known_shapes(model)
    if any(n.input[0] not in shapes for n in pools):
        try:
            shapes.update(_known_shapes(onnx.shape_inference.infer_shapes(model)))
        except Exception as error:   # noqa: BLE001 - a shape we cannot infer: that pool stays one layer
            log.debug(f"layer graph: shapes of the global pools not inferred ({error})")
    found: dict[str, tuple[str, list[PoolStage]]] = {}
    for node in pools:
        shape = shapes.get(node.input[0])
        if shape is None or len(shape) != 4 or any(d <= 0 for d in shape[2:]):
            continue
        stages = global_average_pool_stages(shape[2], shape[3])
        if stages:
            found[node.output[0]] = (node.input[0], stages)
    return found


def vendor_pool_stage_names(model: onnx.ModelProto) -> dict[str, str]:
    """openrknn's stored pool stage tensors → rknn-toolkit2's names for them (see
    :func:`global_average_pool_stages`)."""
    names: dict[str, str] = {}
    cascades = global_pool_cascades(model)
    pools = [n for n in model.graph.node if n.op_type == "GlobalAveragePool" and n.domain in ("", "ai.onnx")]
    for k, node in enumerate(pools):
        for j in range(len(cascades.get(node.output[0], ("", []))[1]) - 1):
            names[pool_stage_tensor(node.output[0], j)] = f"{node.name or f'GlobalAveragePool@{k}'}_2conv{j}"
    return names


def _known_shapes(model: onnx.ModelProto) -> dict[str, list[int]]:
    shapes: dict[str, list[int]] = {}
    for value in list(model.graph.value_info) + list(model.graph.input) + list(model.graph.output):
        dims = value.type.tensor_type.shape.dim
        if value.type.tensor_type.HasField("shape") and all(d.HasField("dim_value") for d in dims):
            shapes[value.name] = [d.dim_value for d in dims]
    return shapes


def pool_stage_nodes(source: str, target: str, stage: PoolStage) -> tuple[list[onnx.NodeProto], list[onnx.TensorProto]]:
    """ONNX nodes computing one pool stage in float: ``target = factor · windowsum(source)`` (an
    AveragePool counting the zero padding, times kernel area · factor)."""
    kh, kw = stage.kernel
    top, left, bottom, right = stage.pads
    gain = numpy_helper.from_array(np.float32(kh * kw * stage.factor), f"{target}__gain")
    nodes = [onnx.helper.make_node("AveragePool", [source], [f"{target}__mean"], name=f"{target}__mean",
                                   kernel_shape=[kh, kw], strides=[kh, kw], pads=[top, left, bottom, right],
                                   count_include_pad=1),
             onnx.helper.make_node("Mul", [f"{target}__mean", gain.name], [target], name=f"{target}__gain")]
    return nodes, [gain]


def with_pool_stages(model: onnx.ModelProto) -> tuple[onnx.ModelProto, list[str]]:
    """A copy of ``model`` that also computes, in float, the stored stages of every cascaded global
    pool (what calibration measures), and those stage tensors' names."""
    cascades = global_pool_cascades(model)
    if not cascades:
        return model, []
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    names: list[str] = []
    for output, (source, stages) in cascades.items():
        for j, stage in enumerate(stages[:-1]):
            target = pool_stage_tensor(output, j)
            nodes, inits = pool_stage_nodes(source, target, stage)
            copy.graph.node.extend(nodes)
            copy.graph.initializer.extend(inits)
            names.append(target)
            source = target
    return copy, names
