"""Mark step: decide how each layer of the structural graph executes once quantized.

Each node gets one *kind*, stored in its ``metadata_props`` under :data:`KIND_KEY` so the
simulator (and a reloaded ``.rknn``) lowers exactly what was decided here:

================  ===========================================================================
``qconv``         Conv with constant weights: integer inputs, weights and int32 bias
``qconvt``        ConvTranspose (group 1) with constant weights: the same, per-channel weights on axis 1
``qmatmul``       MatMul/Gemm with a constant 2-D weight: integer, int32 accumulation
``qmatmul2``      MatMul of two activations: integer, int32 accumulation
``pass``          moves values only (Reshape, Transpose, MaxPool, a strided Slice…): runs on the
                  integers, output shares the input's parameters (a channel piece of a Split or
                  Slice is ``qfloat``: calibrated on its own range, :func:`channel_piece`)
``fused_act``     Relu/Clip in the layer of the ``qconv``/``qmatmul`` before it (the layer record,
                  ``openrknn.graph.npu_layers``, says so): the producer writes the activation's parameters and the saturation implements the activation
``qfloat``        any other layer with integer tensors: dequantized inputs, float32 op,
                  quantized output
``internal``      a step inside an NPU layer (``openrknn.graph.npu_layers``: hard-swish
                  ``x·clip(x+3,0,6)/6``, swish ``x·sigmoid(x)``, ...): float32, never stored
``float``         runs in float16 even in a quantized model (:data:`FLOAT_OPS`, control flow,
                  custom ops, weight-only dtypes)
``other``         produces no float tensor (shape arithmetic…): untouched
================  ===========================================================================
"""
from __future__ import annotations

from dataclasses import dataclass, field

import onnx
from onnx import numpy_helper

from openrknn.errors import BuildError
from openrknn.graph import npu_layers

KIND_KEY = "openrknn.quant_kind"
QCONV, QCONVT, QMATMUL, QMATMUL2, PASS, FUSED_ACT, QFLOAT, FLOAT, OTHER, INTERNAL = (
    "qconv", "qconvt", "qmatmul", "qmatmul2", "pass", "fused_act", "qfloat", "float", "other", "internal")
# every kind this module writes: the quantized simulator has one lowering per kind (sim/quantized.py)
KINDS = frozenset({QCONV, QCONVT, QMATMUL, QMATMUL2, PASS, FUSED_ACT, QFLOAT, FLOAT, OTHER, INTERNAL})
INTEGER_KINDS = frozenset({QCONV, QCONVT, QMATMUL, QMATMUL2, PASS, FUSED_ACT, QFLOAT})
# Integer layers with a quantized weight (input 1) and an int32 bias (input 2).
WEIGHTED_KINDS = frozenset({QCONV, QCONVT, QMATMUL})

# Layers the NPU runs in float16 in quantized models: transcendental or normalising maths whose
# int8 outputs would lose most of their information (seed 002 §7: such layers are the usual
# hybrid-quantization candidates); recurrent and control-flow ops. (LayerNormalization and
# InstanceNormalization are not: the layer record's ``npu_layers.NORM_OPS`` read and store int8.)
FLOAT_OPS = frozenset({
    "Softmax", "LogSoftmax", "Exp", "Log", "Pow", "Sqrt", "Reciprocal", "Erf",
    "GroupNormalization", "Cast", "LSTM", "GRU", "RNN", "If", "Loop", "Scan",
    "ReduceL2", "ReduceLogSumExp", "CumSum",
}) - npu_layers.NORM_OPS
PASS_OPS = frozenset({"Reshape", "Flatten", "Transpose", "Squeeze", "Unsqueeze", "Identity", "Dropout", "Slice",
                      "Gather", "Split"})
PASS_OPS_OPSET12 = frozenset({"MaxPool"})


@dataclass
class Plan:
    """Result of :func:`mark`.

    Attributes:
        weights: weight initializer -> (channel axis, group axis) for quantized weights.
        biases: bias initializer -> (input activation, weight initializer).
        shared: (tensor, source) pairs: ``tensor`` takes the parameters of ``source``.
        float_tensors: every float tensor at the top level of the graph.
    """

    weights: dict[str, tuple[int, int]] = field(default_factory=dict)
    biases: dict[str, tuple[str, str]] = field(default_factory=dict)
    shared: list[tuple[str, str]] = field(default_factory=list)
    float_tensors: set[str] = field(default_factory=set)


def node_kind(node: onnx.NodeProto) -> str | None:
    for prop in node.metadata_props:
        if prop.key == KIND_KEY:
            return prop.value
    return None


def set_kind(node: onnx.NodeProto, kind: str) -> None:
    for prop in node.metadata_props:
        if prop.key == KIND_KEY:
            prop.value = kind
            return
    entry = node.metadata_props.add()
    entry.key, entry.value = KIND_KEY, kind


def float_tensor_names(model: onnx.ModelProto) -> set[str]:
    """Float32 tensors of the top-level graph (inputs, node outputs with inferred types)."""
    typed = list(model.graph.value_info) + list(model.graph.input) + list(model.graph.output)
    return {v.name for v in typed if v.type.tensor_type.elem_type == onnx.TensorProto.FLOAT}


def opset(model: onnx.ModelProto) -> int:
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 13)


def mark(model: onnx.ModelProto, integer_activations: bool, float_layers: frozenset[str] = frozenset(),
         average_pool_shares_input: bool = True) -> Plan:
    """Give every node of ``model`` a kind (in place) and return what must be quantized.

    ``float_layers`` (hybrid quantization) names nodes forced to float16: their weights stay float.
    ``average_pool_shares_input``: an AveragePool's output takes its input's parameters, as
    rknn-toolkit2 2.5.0 calibrates it (the default; False keeps the pool's own range, see
    :func:`_share_like_rknn`).
    """
    plan = Plan(float_tensors=float_tensor_names(model))
    inits = {i.name: i for i in model.graph.initializer}
    # a layer forced to float16 is the whole NPU layer: every node the layer graph put in it
    forced = _forced_float_nodes(model, float_layers)
    same_layer = npu_layers.same_layer_pairs(model.graph)
    kinds: dict[str, str] = {}
    pass_ops = PASS_OPS | (PASS_OPS_OPSET12 if opset(model) >= 12 else frozenset())
    for node in model.graph.node:
        if _key(node) in forced:
            set_kind(node, FLOAT)
            kinds.update({out: FLOAT for out in node.output})
            continue
        kind = _classify(node, plan, inits, integer_activations, pass_ops)
        # the layer record decides the fusion; the saturation implements it when the bounds are constants
        if kind == FUSED_ACT and not (kinds.get(node.input[0]) in WEIGHTED_KINDS and _key(node) in same_layer
                                      and _clip_bounds_known(node, inits)):
            kind = QFLOAT
        set_kind(node, kind)
        for out in node.output:
            kinds[out] = kind
        _record(node, kind, plan, inits)
    if integer_activations:
        groups = npu_layers.layer_groups(model.graph)
        internal = {t for g in groups for t in g.internal}
        for node in model.graph.node:   # steps inside an NPU layer: float32, never stored
            outs = [o for o in node.output if o]
            if outs and all(o in internal for o in outs) and node_kind(node) in (QFLOAT, FUSED_ACT, PASS):
                set_kind(node, INTERNAL)
        for group in groups:   # normalisation and attention layers read and write integers, float32 inside
            if group.activation in npu_layers.FUNCTION_LAYERS and all(
                    node_kind(n) in (FLOAT, QFLOAT, INTERNAL, PASS, QMATMUL2) for n in group.nodes):
                for node in group.nodes:
                    set_kind(node, INTERNAL if all(o in group.internal for o in node.output if o) else QFLOAT)
        for node in model.graph.node:   # the rules above must not pull a forced float layer back
            if _key(node) in forced:
                set_kind(node, FLOAT)
        _share_like_rknn(model, plan, inits, average_pool_shares_input)
    return plan


def _key(node: onnx.NodeProto) -> str:
    return node.output[0] if node.output else node.name


def _forced_float_nodes(model: onnx.ModelProto, float_layers: frozenset[str]) -> set[str]:
    """Nodes (by first output) of the layers ``float_layers`` names: a layer forced to float16 is
    the whole NPU layer."""
    return {_key(n) for n in layer_member_nodes(model, float_layers)}


def layer_member_nodes(model: onnx.ModelProto, names: frozenset[str] | set[str]) -> list[onnx.NodeProto]:
    """Every node of the NPU layers that ``names`` names — by layer-graph name, node name or
    (unnamed nodes) output tensor. Hybrid choices apply to whole layers, as the NPU runs them."""
    if not names:
        return []
    members: list[onnx.NodeProto] = []
    for group in npu_layers.layer_groups(model.graph):
        if group.name in names or any(n.name in names or _key(n) in names for n in group.nodes):
            members.extend(group.nodes)
    return members


def unstored_fused_outputs(model: onnx.ModelProto) -> set[str]:
    """Tensors inside an NPU layer (``openrknn.graph.npu_layers``) that get no quantization point:
    all of them but a Conv/MatMul output read only by a ``fused_act`` Relu/Clip, which the
    saturation implements (the two share parameters), and the int8 step before a HardSigmoid
    (:func:`requantized_before_activation`)."""
    kinds: dict[str, list[str | None]] = {}
    for node in model.graph.node:
        for name in node.input:
            kinds.setdefault(name, []).append(node_kind(node))
    requantized = requantized_before_activation(model)
    return {t for t in npu_layers.internal_tensors(model.graph) if kinds.get(t) != [FUSED_ACT] and t not in requantized}


def requantized_before_activation(model: onnx.ModelProto) -> dict[str, tuple[float, float]]:
    """Tensors the NPU stores in int8 on a clamped range, with the range they are clamped to (bounds
    ``±inf`` where the calibrated range is kept): the union of :func:`_requantized_before_hardsigmoid`
    and :func:`_requantized_before_depthwise_hardswish` (weighted-layer outputs requantized inside their
    layer) and :func:`_clamped_before_sigmoid` (a stand-alone Sigmoid layer's input)."""
    readers: dict[str, list[onnx.NodeProto]] = {}
    for node in model.graph.node:
        for name in node.input:
            readers.setdefault(name, []).append(node)
    found = _requantized_before_hardsigmoid(model, readers)
    found.update(_requantized_before_depthwise_hardswish(model, readers))
    found.update(_clamped_before_sigmoid(model, readers))
    return found


_SIGMOID_INPUT_BOUND = 7.0   # sigmoid(±7) is within 0.001 of 0 and 1: wider inputs only coarsen the grid


def _clamped_before_sigmoid(model: onnx.ModelProto,
                            readers: dict[str, list[onnx.NodeProto]]) -> dict[str, tuple[float, float]]:
    """A stored tensor read only by a Sigmoid that is a layer of its own, clamped to ``[−7, 7]``.

    rknn-toolkit2 2.5.0's config gives a Sigmoid's input its calibrated range clamped to ``[−7, 7]``
    (probe Conv → Add → Sigmoid: ``[−34.1, 21.1]`` becomes ``[−7, 7]``, ``[−1.90, 0.92]`` stays), and it
    clamps a range handed in the config the same way. Where the Sigmoid is a layer of its own, its
    simulator quantizes the input on that range: PP-OCRv3 det's output ``ConvTranspose → Add → Sigmoid``
    reads ``elementwise_add_11`` on the grid of ``[−7, 7]`` (step 0.055) where the calibrated
    ``[−190, 90]`` gives steps of 1.1. A Sigmoid fused into the layer before it (``ConvSigmoid``, the
    probe) reads the exact sum: the clamped range is never used there, and openrknn stores nothing."""
    same_layer = npu_layers.same_layer_pairs(model.graph)
    internal = npu_layers.internal_tensors(model.graph)
    produced = {o for node in model.graph.node for o in node.output}
    found: dict[str, tuple[float, float]] = {}
    for node in model.graph.node:
        if node.op_type != "Sigmoid" or not node.input or _key(node) in same_layer:
            continue
        source = node.input[0]
        if source in produced and source not in internal and len(readers.get(source, [])) == 1:
            found[source] = (-_SIGMOID_INPUT_BOUND, _SIGMOID_INPUT_BOUND)
    return found


def _requantized_before_hardsigmoid(model: onnx.ModelProto,
                                    readers: dict[str, list[onnx.NodeProto]]) -> dict[str, tuple[float, float]]:
    """A Conv/MatMul output read only by the HardSigmoid fused after it, clamped to the HardSigmoid's
    linear part ``[−β/α, (1−β)/α]``.

    rknn-toolkit2 2.5.0 runs ``ConvHardSigmoid`` as the Conv's int8 output and the HardSigmoid on
    those integers; a ``ConvSigmoid`` reads the exact sum (both measured on its simulator). The
    squeeze-and-excitation scales of MobileNetV3 and LR-ASPP go through this step. Measured for
    PyTorch's HardSigmoid (α = 1/6: ±3) and Paddle's (α = 0.2: ±2.5, PP-OCR's classifier, whose
    ``conv2d_56.tmp_1`` the vendor dumps on the grid of ``[−2.5, 0]``; with the step the two simulators
    are equal integer for integer through its first SE block)."""
    same_layer = npu_layers.same_layer_pairs(model.graph)
    found: dict[str, tuple[float, float]] = {}
    for node in model.graph.node:
        if node_kind(node) not in WEIGHTED_KINDS or not node.output:
            continue
        users = readers.get(node.output[0], [])
        if len(users) == 1 and users[0].op_type == "HardSigmoid" and _key(users[0]) in same_layer:
            alpha, beta = _attr(users[0], "alpha", 0.2), _attr(users[0], "beta", 0.5)
            if alpha > 0:
                found[node.output[0]] = (-beta / alpha, (1.0 - beta) / alpha)
    return found


_HARDSWISH_ZERO_BELOW = -3.0   # x·relu6(x + 3)/6 is 0 for every x ≤ −3


def _requantized_before_depthwise_hardswish(model: onnx.ModelProto,
                                            readers: dict[str, list[onnx.NodeProto]]) -> dict[str, tuple[float, float]]:
    """A depthwise Conv's output read only by the HardSwish fused after it, its minimum raised to −3.

    rknn-toolkit2 2.5.0 stores that sum as int8 on ``[max(min, −3), max]`` inside the
    ``ConvHardSwish`` layer and runs the HardSwish on those integers; a dense Conv's (1×1 or k×k)
    HardSwish reads the exact sum. Measured on PP-OCR's classifier: the depthwise outputs
    ``batch_norm_11/14.tmp_2`` dumped by its simulator lie on the grid of ``[−3, max]``, the 1×1
    ``batch_norm_10/13.tmp_2`` and the first 3×3 ``batch_norm_0.tmp_2`` on no int8 grid."""
    inits = {i.name for i in model.graph.initializer}
    found: dict[str, tuple[float, float]] = {}
    for group in npu_layers.layer_groups(model.graph):
        main = group.main
        if group.activation != "HardSwish" or main.op_type != "Conv" or not _is_depthwise(main, model):
            continue
        members = {id(n) for n in group.nodes}
        users = readers.get(main.output[0], [])
        if users and all(id(u) in members for u in users) and main.input[1] in inits:
            found[main.output[0]] = (_HARDSWISH_ZERO_BELOW, float("inf"))
    return found


def _is_depthwise(conv: onnx.NodeProto, model: onnx.ModelProto) -> bool:
    """One filter per input channel (``group`` equal to the input and output channel counts, > 1)."""
    group = _attr(conv, "group", 1)
    weight = next((i for i in model.graph.initializer if i.name == conv.input[1]), None)
    return group > 1 and weight is not None and weight.dims[0] == group and weight.dims[1] == 1


def _classify(node: onnx.NodeProto, plan: Plan, inits, integer: bool, pass_ops: frozenset) -> str:
    f_in = [i for i in node.input if i in plan.float_tensors and i not in inits]
    f_out = [o for o in node.output if o in plan.float_tensors]
    if not f_out:
        return OTHER
    if (not integer or not f_in or node.domain not in ("", "ai.onnx")
            or (node.op_type in FLOAT_OPS and not npu_layers.integer_power(node, inits))
            or any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute)):
        return FLOAT
    if node.op_type == "Div" and len(node.input) > 1 and node.input[1] not in inits:
        return FLOAT
    if node.op_type == "Conv" and node.input[1] in inits and (len(node.input) < 3 or not node.input[2]
                                                            or node.input[2] in inits):
        return QCONV
    if (node.op_type == "ConvTranspose" and node.input[1] in inits and _attr(node, "group", 1) == 1
            and (len(node.input) < 3 or not node.input[2] or node.input[2] in inits)):
        return QCONVT
    if _is_const_matmul(node, inits):
        return QMATMUL
    if node.op_type == "MatMul" and len(f_in) == 2:
        return QMATMUL2
    if node.op_type in pass_ops and node.input[0] in f_in and len(f_out) == len([o for o in node.output if o]):
        return QFLOAT if channel_piece(node, inits) else PASS
    if node.op_type in npu_layers.SATURATING_ACTIVATIONS:   # fused only where the layer record says (mark)
        return FUSED_ACT
    return QFLOAT


def channel_piece(node: onnx.NodeProto, inits) -> bool:
    """Whether ``node`` cuts a piece out of a tensor that rknn-toolkit2 2.5.0 calibrates on its own
    range: a Split on any axis, or a Slice with step 1 on axis 1 (channels) or axis 0. Probe graphs:
    a Split on axis 1, two sibling Slices and a C2f-style Slice of a ConvRelu each store the piece's
    own maximum, and so do the deep Conv split's ``x_split``/``x_split_o1`` in resnet18; a Split on
    axis 2 (H) of a ConvRelu (piece 0.008842 where the parent is 0.009092) and on the last axis of a
    5-D Sigmoid output, yolov5's decode (pieces 0.003272 and 0.003349, the parent 0.003480) too; PP-OCRv4
    rec's q/k/v Slices on axis 0, which it runs as one ``Split`` (oracle corpus). A Slice along H or W —
    strided (yolox's Focus) or not (probe: a W slice keeps 0.007058, its own range would be 0.006055) —
    keeps its input's parameters."""
    if node.op_type == "Split":
        return True
    if node.op_type != "Slice" or len(node.input) < 4 or not node.input[3] or node.input[3] not in inits:
        return False
    axes = numpy_helper.to_array(inits[node.input[3]]).reshape(-1).tolist()
    steps = ([1] * len(axes) if len(node.input) < 5 or not node.input[4]
             else numpy_helper.to_array(inits[node.input[4]]).reshape(-1).tolist() if node.input[4] in inits else None)
    return axes in ([0], [1], [-3]) and steps == [1]


# Layers that move values without widening them and share one quantization with their input
# (rknn-toolkit2 2.5.0, probe graphs): a Resize's input takes the Resize's output parameters when
# nothing else reads it, else the output takes the input's; an AveragePool's output always takes
# its input's (optional here, see _share_like_rknn).
_BACKWARD_SHARED = frozenset({"Resize", "Upsample"})
_AVERAGE_POOL = "AveragePool"


def _share_like_rknn(model: onnx.ModelProto, plan: Plan, inits, average_pool_shares_input: bool = True) -> None:
    """Add the parameter sharing rknn-toolkit2's calibration applies between separate integer layers
    to ``plan.shared`` (measured, rknn-toolkit2 2.5.0, rk3588, probe graphs):

    * a Relu/Clip (constant bounds) that is a layer of its own — after a ``Mul``, a ``Concat``, a
      per-group Conv's ``Concat`` — gives its input its own parameters, as a fused one does: the
      producer saturates (rexnet's SE ``Mul`` → ReLU6, regnet's grouped ``Concat`` → ReLU);
    * :data:`_BACKWARD_SHARED` (an FPN's ``Relu`` → ``Resize``: the Relu stores the Resize's
      narrower range), also through Reshapes between them (the FPN's GroupNorm ``Relu → Reshape →
      Resize``, oracle corpus: the Relu, and the ``exNorm`` before it, store the Resize's range);
    * with ``average_pool_shares_input`` (the default), an AveragePool's output takes its input's
      parameters, whatever its kernel, stride, padding, ``ceil_mode`` or ``count_include_pad`` and
      whatever else reads the input (probes: kernel 2/3/5, 3×2, padded with and without
      ``count_include_pad``, after a Relu or a bare Conv; resnet-d shortcuts, PP-OCRv4 rec's pool).
      The pooled range is narrower, so the input's coarser step costs a little accuracy
      (docs/fidelity.md) — as on the board.

    Only between tensors an integer layer writes, and only into a tensor this layer alone reads
    (no other data reader, not a graph output) that no rule has already tied to another."""
    kind_of = {o: node_kind(n) for n in model.graph.node for o in n.output if o}
    readers: dict[str, int] = {}
    for node in model.graph.node:
        if node_kind(node) != OTHER:   # Shape & co. read no values
            for name in set(node.input):
                readers[name] = readers.get(name, 0) + 1
    outputs = {o.name for o in model.graph.output}
    tied = {tensor for tensor, _ in plan.shared}
    producer = {o: n for n in model.graph.node for o in n.output if o}

    def before_reshapes(tensor: str) -> str:
        """The tensor a chain of value-preserving Reshapes, each its input's only reader, copies."""
        while True:
            node = producer.get(tensor)
            if node is None or node.op_type != "Reshape" or node_kind(node) != PASS or not node.input \
                    or readers.get(node.input[0]) != 1 or node.input[0] in outputs:
                return tensor
            tensor = node.input[0]

    def private(tensor: str) -> bool:
        return (kind_of.get(tensor) in INTEGER_KINDS and readers.get(tensor) == 1 and tensor not in outputs
                and tensor not in tied)

    for node in model.graph.node:
        if node_kind(node) != QFLOAT or not node.input or not node.output or not node.output[0]:
            continue
        source, out = node.input[0], node.output[0]
        if node.op_type in npu_layers.SATURATING_ACTIVATIONS and _clip_bounds_known(node, inits) and private(source):
            plan.shared.append((source, out))
        elif node.op_type in _BACKWARD_SHARED and private(source):
            plan.shared.append((source, out))
        elif node.op_type in _BACKWARD_SHARED and readers.get(source) == 1 and before_reshapes(source) != source \
                and private(before_reshapes(source)):
            plan.shared.append((before_reshapes(source), out))   # the Reshapes pass it on (``pass``)
        elif (node.op_type in _BACKWARD_SHARED or (average_pool_shares_input and node.op_type == _AVERAGE_POOL)) \
                and source in plan.float_tensors:
            plan.shared.append((out, source))
        else:
            continue
        tied.add(plan.shared[-1][0])


def _attr(node: onnx.NodeProto, name: str, default):
    for a in node.attribute:
        if a.name == name:
            return onnx.helper.get_attribute_value(a)
    return default


def _is_const_matmul(node: onnx.NodeProto, inits) -> bool:
    if node.op_type == "MatMul":
        return node.input[1] in inits and len(inits[node.input[1]].dims) == 2
    if node.op_type != "Gemm" or node.input[1] not in inits:
        return False
    if _attr(node, "transA", 0) or _attr(node, "alpha", 1.0) != 1.0 or _attr(node, "beta", 1.0) != 1.0:
        return False
    return len(node.input) < 3 or not node.input[2] or (node.input[2] in inits and len(inits[node.input[2]].dims) <= 1)


def weight_axes(node: onnx.NodeProto) -> tuple[int, int]:
    """(output-channel axis, reduction axis) of the node's weight (input 1)."""
    if node.op_type == "Conv":
        return 0, 1
    if node.op_type == "ConvTranspose":   # weight [C_in, C_out, kh, kw]
        return 1, 0
    if node.op_type == "Gemm" and _attr(node, "transB", 0):
        return 0, 1
    return 1, 0


def _clip_bounds_known(node: onnx.NodeProto, inits) -> bool:
    return node.op_type == "Relu" or all(not name or name in inits for name in node.input[1:])


def clip_bounds(node: onnx.NodeProto, inits) -> tuple[float, float]:
    """The (low, high) of a Relu/Clip activation."""
    if node.op_type == "Relu":
        return 0.0, float("inf")
    lo, hi = _attr(node, "min", float("-inf")), _attr(node, "max", float("inf"))
    if len(node.input) > 1 and node.input[1]:
        lo = _scalar(inits[node.input[1]])
    if len(node.input) > 2 and node.input[2]:
        hi = _scalar(inits[node.input[2]])
    return lo, hi


def _scalar(init: onnx.TensorProto) -> float:
    """A Clip bound: a scalar, or a 1-element tensor as the TensorFlow and TFLite frontends store Relu6."""
    values = numpy_helper.to_array(init).reshape(-1)
    if values.size != 1:
        raise BuildError(f"Clip bound '{init.name}' has {values.size} values; ONNX requires a scalar")
    return float(values[0])


def _record(node: onnx.NodeProto, kind: str, plan: Plan, inits) -> None:
    if kind in WEIGHTED_KINDS or (kind == FLOAT and (node.op_type == "Conv" or _is_const_matmul(node, inits))
                                  and node.input[1] in inits):
        weight = node.input[1]
        if inits[weight].data_type == onnx.TensorProto.FLOAT:
            plan.weights[weight] = weight_axes(node)
        if kind in WEIGHTED_KINDS and len(node.input) > 2 and node.input[2]:
            plan.biases[node.input[2]] = (node.input[0], weight)
    if kind == PASS:
        for out in node.output:
            if out:
                plan.shared.append((out, node.input[0]))
    if kind == FUSED_ACT:
        plan.shared.append((node.input[0], node.output[0]))
