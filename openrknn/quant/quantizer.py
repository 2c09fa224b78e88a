"""``quantize_model``: mark layers, calibrate activations, quantize weights, record everything.

Steps: constants become initializers and BatchNorms fold into their Conv (:mod:`.fold`); every
layer gets a kind (:mod:`.annotate`); one or two passes over the calibration samples give each
float tensor its statistics and the algorithm its range; parameters are shared where a layer only
moves values; weights (and int32 biases) replace the float initializers of the structural graph.
"""
from __future__ import annotations

import copy
import time
from dataclasses import replace
from typing import Callable, Sequence

import numpy as np
import onnx
from onnx import numpy_helper

from openrknn import log
from openrknn.errors import QuantizationError
from openrknn.graph import npu_layers
from openrknn.graph.custom_ops import CustomOpRegistry
from openrknn.graph.rknn_model import RKNNModel
from openrknn.graph.preprocess import PREPROCESS_KEY
from openrknn.quant import annotate, numerics
from openrknn.quant.adaround import WeightRounder
from openrknn.quant.algorithms import get_algorithm
from openrknn.quant.calibrate import CalibrationCache, collect_stats
from openrknn.graph.passes.affine_folding import fold_channel_affine
from openrknn.graph.passes.batchnorm_folding import fold_batchnorm
from openrknn.graph.passes.wide_pads import CONV_PADDING_KEY
from openrknn.quant.fold import constants_to_initializers, equalize_depthwise, held_out_indices, unshare_parameters
from openrknn.quant.numerics import QuantParams
from openrknn.quant.overrides import QuantOverrides
from openrknn.quant.settings import (CORRECTED_EVERY_LAYER, CORRECTED_PICTURE_LAYERS, DTYPES, DtypeSpec,
                                     QuantSettings)
from openrknn.quant.weights import bias_safe, narrowed, params_from_range, quantize_bias, quantize_weight, weight_integers


# Scores two candidate models on samples (graph layout): their mean output cosines against the float
# model, or None when the outputs cannot tell them apart (too few values). The build passes one that
# runs the simulator (the quantization stage does not run models).
CorrectionJudge = Callable[[RKNNModel, RKNNModel, list], "tuple[float, float] | None"]
# At most this many samples in each test of _correct_every_layer (evenly spread), so a large
# calibration set does not make the build run the simulator for long
IN_SAMPLE_LIMIT = 16


def quantize_model(rknn_model: RKNNModel, samples: Sequence[Sequence[np.ndarray]],
                   settings: QuantSettings, overrides: QuantOverrides | None = None,
                   custom_ops: CustomOpRegistry | None = None, cache: CalibrationCache | None = None,
                   correction_judge: CorrectionJudge | None = None) -> RKNNModel:
    """Quantize a built float model with calibration ``samples`` (raw inputs, graph layout).

    ``overrides`` (hybrid quantization) moves layers to float16 or int16 and fixes tensor parameters.
    ``custom_ops`` runs the model's custom-op layers (float32, on the CPU) during calibration.
    ``cache`` (automatic mixed precision: the same model, samples and settings in every trial)
    keeps the prepared graph and the tensor statistics, so a trial only calibrates tensors it has
    not seen yet. ``correction_judge`` (with ``settings.bias_correction_check``) decides whether the
    layers after the picture-reading ones keep their bias correction (:func:`_correct_every_layer`;
    the decision is kept in ``cache``).

    Returns:
        A new :class:`RKNNModel` whose graph holds integer weights and whose ``quant_params`` /
        ``tensor_dtypes`` describe every tensor.

    Raises:
        QuantizationError: no usable sample, or the float model fails on one.

    Example:
        >>> # q = quantize_model(model, load_dataset('dataset.txt', model.inputs), QuantSettings())
    """
    started = time.perf_counter()
    spec = settings.spec
    if not samples:
        raise QuantizationError("the calibration dataset has no sample")
    overrides = overrides or QuantOverrides()
    used = list(samples[:settings.sample_count(len(samples))])
    if cache is not None and cache.prepared is not None:
        graph = onnx.ModelProto()
        graph.CopyFrom(cache.prepared)
    else:
        graph = _prepare(rknn_model.graph)
        if spec.act_dtype is not None and settings.equalize_depthwise:
            equalize_depthwise(graph, used, settings.method, custom_ops)
        if cache is not None:
            cache.prepared = onnx.ModelProto()
            cache.prepared.CopyFrom(graph)
    # The float graph the quantized one is compared with: folded and equalized the same way, so
    # every intermediate tensor means the same thing in both (equalization rescales channels).
    golden = onnx.ModelProto()
    golden.CopyFrom(graph)
    overrides = overrides.resolved(graph)
    overrides.check_layers(graph)
    plan = annotate.mark(graph, spec.act_dtype is not None, overrides.float_layers,
                         average_pool_shares_input=settings.average_pool_shares_input)
    algorithm = get_algorithm(settings.algorithm)
    inits = {i.name for i in graph.graph.initializer}
    act_params: dict[str, QuantParams] = {}
    stats: dict = {}
    sixteen, wide = _int16_plan(graph, plan, overrides, settings)
    if spec.act_dtype is not None:
        # every candidate is observed first: a tail too small for float16 stays integer (_float_outputs)
        tensors = sorted(_needs_params(graph, plan, inits) - _internal_tensors(graph)
                         - annotate.unstored_fused_outputs(graph))
        staged, stage_tensors = (_pool_stages_of(graph, tensors) if settings.toolkit != 1   # RKNPU2's pool cascade
                                 else (graph, []))
        tensors = tensors + stage_tensors
        if cache is None:
            stats = collect_stats(staged, tensors, used, algorithm.needs_histogram, custom_ops)
        else:
            missing = [t for t in tensors if t not in cache.stats]
            if missing:
                cache.stats.update(collect_stats(staged, missing, used, algorithm.needs_histogram, custom_ops))
            stats = {t: cache.stats[t] for t in tensors}
        outside_fp16 = {t for t, st in stats.items() if st.seen and not _float16_safe(max(abs(st.min), abs(st.max)))}
        unstored = _float_outputs(graph, outside_fp16) | _internal_tensors(graph) | annotate.unstored_fused_outputs(graph)
        stats = {t: st for t, st in stats.items() if t not in unstored}
        keep_range = _unclipped(graph)
        clamped = annotate.requantized_before_activation(graph)   # int8 steps inside ConvHardSigmoid/ConvHardSwish
        for name, st in stats.items():
            if st.seen:
                dtype, qtype = (wide.act_dtype, wide.act_qtype) if name in sixteen else (spec.act_dtype, spec.act_qtype)
                low_q, high_q = numerics.qrange(dtype, qtype)
                lo, hi = (st.min, st.max) if name in keep_range else algorithm.activation_range(st, high_q - low_q)
                if name in clamped:
                    bottom, top = clamped[name]
                    lo, hi = min(max(lo, bottom), top), min(max(hi, bottom), top)
                act_params[name] = params_from_range(lo, hi, dtype, qtype)
        act_params.update(shared_params(plan.shared, act_params))
        for tensor in unstored:
            act_params.pop(tensor, None)
        _drop_orphan_pool_stages(graph, act_params)
        act_params.update(overrides.activation_params(act_params))
    quant_params = {name: p.to_dict() for name, p in act_params.items()}
    rounder = None
    if settings.algorithm == "adaround":   # opt-in: learned weight rounding (torch)
        rounder = WeightRounder(graph, plan.weights, act_params, used, custom_ops)
    int16_weights = _int16_weights(graph, plan, overrides)
    rounded: dict = {}   # each weight's integers, computed once for the trials and the real quantization

    def assembled(with_settings: QuantSettings, fit_only: bool = False, picture_only: bool = False) -> RKNNModel:
        """The model quantized from the same ranges with ``with_settings`` (a trial: nothing shared is changed)."""
        trial_graph, trial_plan, trial_params = onnx.ModelProto(), copy.deepcopy(plan), dict(quant_params)
        trial_graph.CopyFrom(graph)
        with log.muted():   # the lines of the real quantization follow
            _quantize_weights(trial_graph, trial_plan, with_settings, algorithm, act_params, trial_params, stats,
                              overrides, int16_weights, wide, None, fit_only, picture_only, rounded)
        return replace(rknn_model, graph=trial_graph, quantized_dtype=settings.canonical, quant_params=trial_params,
                       tensor_dtypes=_tensor_dtypes(trial_graph, act_params, trial_params), golden=golden)

    picture_only = False
    if (settings.bias_correction and settings.bias_correction_check and held_out_indices(len(used))
            and rounder is None and spec.act_dtype in ("int8", "uint8")):
        every_layer = cache.every_layer_corrected if cache is not None else None   # a trial of auto_hybrid: as decided
        if every_layer is None and correction_judge is not None:
            every_layer = _correct_every_layer(assembled, settings, used, correction_judge)
            if cache is not None:
                cache.every_layer_corrected = every_layer
        picture_only = every_layer is False
    _quantize_weights(graph, plan, settings, algorithm, act_params, quant_params, stats, overrides,
                      int16_weights, wide, rounder, picture_only=picture_only, rounded=rounded)
    if rounder is not None:
        log.info(f"quantize: {rounder.summary()}")
    model = replace(rknn_model, graph=graph, quantized_dtype=settings.canonical, quant_params=quant_params,
                    tensor_dtypes=_tensor_dtypes(graph, act_params, quant_params), golden=golden)
    model.metadata = dict(rknn_model.metadata, quantization={
        "algorithm": settings.algorithm, "method": settings.method, "samples": len(used),
        "float_layers": sorted(overrides.float_layers), "int16_layers": sorted(overrides.int16_layers),
        "fixed_parameters": sorted(overrides.params),
        "bias_correction": ("off" if not settings.bias_correction else
                            CORRECTED_PICTURE_LAYERS if picture_only else CORRECTED_EVERY_LAYER),
    })   # no duration: same inputs, same .rknn bytes
    log.info(f"quantize: {settings.canonical} {settings.method} {settings.algorithm}: {len(act_params)} activation "
             f"tensors, {len(plan.weights)} weights, {len(used)} samples, {time.perf_counter() - started:.2f} s")
    return model


def _correct_every_layer(assembled, settings: QuantSettings, used: list, judge: CorrectionJudge) -> bool:
    """Whether every layer keeps its bias correction, or only the picture-reading layers do.

    Each layer's correction passed its own check (:func:`_correct_biases`), yet a network can lose
    by them together: they remove offsets that the quantized activations partly cancelled
    (RepVGG-A0 with randomised BatchNorm: 0.0028 of output cosine on 30 unseen pictures). Two
    tests of the model's outputs, both needed to leave the corrections out, because one can
    mislead with few samples: corrected every layer, the model has a lower mean output cosine
    than corrected only at the picture (1) on the held-out calibration samples, the corrections
    estimated without them, and (2) on the calibration samples they were estimated from (each at
    most ``IN_SAMPLE_LIMIT``). Measured with 10 calibration pictures: (2) alone would drop PP-OCR
    rec's and lose 0.0019 on unseen text; (1) alone would drop RexNet-100's and DeepLabV3+'s in the
    oracle corpus, where (2) keeps them. Only outputs of 16 values or more are judged (the judge
    returns None without one: every layer stays corrected). The picture-reading layers stay
    corrected: there the correction pays most (PP-OCR cls loses 0.006 without it).
    """
    held = [used[i] for i in sorted(held_out_indices(len(used)))]
    try:
        unseen = judge(assembled(settings, fit_only=True), assembled(settings, fit_only=True, picture_only=True),
                       _spread(held, IN_SAMPLE_LIMIT))
        if unseen is None:
            log.debug("quantize: bias correction kept on every layer (no output large enough to judge it by)")
            return True
        seen = None
        if unseen[0] < unseen[1]:
            seen = judge(assembled(settings), assembled(settings, picture_only=True), _spread(used, IN_SAMPLE_LIMIT))
    except Exception as e:   # a check only: whatever stops the candidates from running, the build goes on
        log.debug(f"quantize: bias correction kept on every layer (its output check could not run: {e})")
        return True
    every_layer = seen is None or seen[0] >= seen[1]
    text = (f"held-out samples {unseen[0]:.5f} correcting every layer, {unseen[1]:.5f} the picture-reading ones"
            + (f"; calibration samples {seen[0]:.5f} / {seen[1]:.5f}" if seen else ""))
    kept = "every layer" if every_layer else "the picture-reading layers only"
    log.info(f"quantize: bias correction kept on {kept} (output cosine on {text})")
    return every_layer


def _spread(samples: list, limit: int) -> list:
    """At most ``limit`` of ``samples``, evenly spread."""
    return samples[::max(1, -(-len(samples) // limit))][:limit]


def shared_params(shared: list[tuple[str, str]], params: dict[str, QuantParams]) -> dict[str, QuantParams]:
    """The parameters each ``(tensor, source)`` pair of :attr:`annotate.Plan.shared` gives ``tensor``:
    its source's once that source is resolved — chains (a Conv's ``fused_act`` Relu whose output a
    Resize ties to its own) resolve to their end in any order; a source without parameters leaves
    the tensor its own."""
    source_of = dict(shared)
    resolved: dict[str, QuantParams | None] = {}

    def resolve(tensor: str, seen: frozenset[str]) -> QuantParams | None:
        if tensor in resolved:
            return resolved[tensor]
        source = source_of.get(tensor)
        found = resolve(source, seen | {tensor}) if source is not None and source not in seen else None
        resolved[tensor] = found if found is not None else params.get(tensor)
        return resolved[tensor]

    return {tensor: p for tensor in source_of if (p := resolve(tensor, frozenset())) is not None}


# Layers whose extreme input values carry the answer: their inputs are never clipped.
_RANGE_SENSITIVE = frozenset({"Softmax", "LogSoftmax", "ArgMax", "ArgMin", "TopK", "ReduceMax"})


def _unclipped(graph: onnx.ModelProto) -> set[str]:
    """Graph outputs and inputs of range-sensitive layers keep their observed min/max."""
    names = {o.name for o in graph.graph.output}
    for node in graph.graph.node:
        if node.op_type in _RANGE_SENSITIVE:
            names.update(node.input)
    return names


# Smallest normal float16 (2^-14): below it float16 keeps fewer bits than an int8 tensor would.
FLOAT16_NORMAL_MIN = 2.0 ** -14
# Largest magnitude a float16 tail may calibrate to: half of float16's 65504, because inputs the
# calibration did not see go past its range (attention scores q·kᵀ of randomised networks reach 1e6,
# which float16 stores as inf and Softmax turns into NaN); an int8 tensor saturates instead.
FLOAT16_SAFE_MAX = 65504.0 / 2


def _float16_safe(magnitude: float) -> bool:
    """Whether calibrated values up to ``magnitude`` (not all zero) keep their value in float16."""
    return magnitude == 0 or FLOAT16_NORMAL_MIN <= magnitude <= FLOAT16_SAFE_MAX


USER_INTEGER = "user"   # the reader kind of a graph output the user receives as the integers the NPU stores


def _float_computed(tensor: str, producer_kind: dict[str, str | None], producers: dict[str, onnx.NodeProto]) -> bool:
    """Whether ``tensor`` comes from a float16 layer, directly or through data-movement layers."""
    seen = set()
    while tensor in producers and tensor not in seen:
        seen.add(tensor)
        kind = producer_kind.get(tensor)
        if kind != annotate.PASS:
            return kind in (annotate.FLOAT, annotate.OTHER)
        tensor = producers[tensor].input[0]
    return False


def _float_outputs(graph: onnx.ModelProto, keep_integer: set[str] = frozenset()) -> set[str]:
    """Tensors left in float16 because only float16 layers read them.

    An integer Conv/MatMul read only by float layers writes float16 (``s_x·s_w·acc + b``) instead
    of requantizing; an element-wise integer layer (``qfloat``) or a data-movement layer (``pass``:
    Reshape, Slice, Transpose, ...) in that position becomes a float16 layer, which can in turn
    free its producer — repeated until nothing changes, so what follows a float16 layer (Softmax →
    Reshape, a Conv → Slice → Pow spectrum) stays in float16.
    The user reads a graph output as rknn-toolkit2 2.5.0 stores it (measured on 30 architectures:
    ``OutputOperator INT8`` unless a float16 layer computes it): int8 when an integer layer writes
    it — a Conv/Sigmoid/Concat tail stays integer — float16 when a float16 layer does, directly or
    through data-movement layers (Softmax → Reshape: ``OutputOperator FLOAT16``).
    Tensors in ``keep_integer`` (calibrated magnitudes outside float16's range: outputs of
    1e-9 … 1e-14 would underflow to 0, scores of 1e5 overflow to inf) stay integer, with the scale
    their range needs.
    """
    outputs = {o.name for o in graph.graph.output}
    float_readers = (annotate.FLOAT, annotate.OTHER, annotate.INTERNAL)
    producers = {o: n for n in graph.graph.node for o in n.output if o}
    # a step inside an NPU layer reads as its layer does: integer when the layer's output is
    exit_of: dict[str, onnx.NodeProto] = {}
    for group in npu_layers.layer_groups(graph.graph):
        exits = [n for n in group.nodes if any(o and o not in group.internal for o in n.output)]
        for node in group.nodes:
            if exits and node.output:
                exit_of[node.output[0]] = exits[-1]
    result: set[str] = set()
    changed = True
    while changed:
        changed = False
        readers: dict[str, list[str]] = {}
        for node in graph.graph.node:
            kind = annotate.node_kind(node)
            if kind == annotate.INTERNAL and node.output and node.output[0] in exit_of:
                kind = annotate.node_kind(exit_of[node.output[0]])
            for name in node.input:
                readers.setdefault(name, []).append(kind)
        producer_kind = {o: annotate.node_kind(n) for n in graph.graph.node for o in n.output if o}
        for name in outputs:   # the user reads an output in the dtype its layer computes in (see above)
            readers.setdefault(name, []).append(annotate.FLOAT if _float_computed(name, producer_kind, producers)
                                                else USER_INTEGER)
        for node in graph.graph.node:
            kind = annotate.node_kind(node)
            if kind not in annotate.WEIGHTED_KINDS | {annotate.QMATMUL2, annotate.QFLOAT, annotate.PASS}:
                continue
            outs = [o for o in node.output if o]
            if any(o in keep_integer for o in outs):
                continue
            if not all(all(k in float_readers for k in readers.get(o, [])) for o in outs):
                continue
            if kind in (annotate.QFLOAT, annotate.PASS):
                annotate.set_kind(node, annotate.FLOAT)
                changed = True
            elif not set(outs) <= result:
                changed = True
            result.update(outs)
    return result | (outputs & result)


def _pool_stages_of(graph: onnx.ModelProto, tensors: list[str]) -> tuple[onnx.ModelProto, list[str]]:
    """The graph calibration runs (``graph`` plus the float stages of every cascaded global pool whose
    output is quantized, ``npu_layers.global_average_pool_stages``) and those stage tensors."""
    staged, stages = npu_layers.with_pool_stages(graph)
    wanted = set(tensors)
    cascades = npu_layers.global_pool_cascades(graph)
    keep = {npu_layers.pool_stage_tensor(out, j) for out, (_, st) in cascades.items() if out in wanted
            for j in range(len(st) - 1)}
    return staged, [t for t in stages if t in keep]


def _drop_orphan_pool_stages(graph: onnx.ModelProto, act_params: dict[str, QuantParams]) -> None:
    """A pool stage is stored only while its pool's output is an 8-bit integer (a float16 pool runs whole)."""
    for out, (_, stages) in npu_layers.global_pool_cascades(graph).items():
        integer = out in act_params and act_params[out].dtype in ("int8", "uint8")
        for j in range(len(stages) - 1):
            if not integer:
                act_params.pop(npu_layers.pool_stage_tensor(out, j), None)


def _needs_params(graph: onnx.ModelProto, plan: annotate.Plan, inits: set[str]) -> set[str]:
    """Float tensors an integer layer writes or reads (everything else needs no statistics)."""
    names: set[str] = set()
    for node in graph.graph.node:
        if annotate.node_kind(node) in annotate.INTEGER_KINDS:
            names.update(t for t in list(node.input) + list(node.output)
                         if t and t in plan.float_tensors and t not in inits)
    return names


def _internal_tensors(graph: onnx.ModelProto) -> set[str]:
    return {o for n in graph.graph.node if annotate.node_kind(n) == annotate.INTERNAL for o in n.output}


def _prepare(source: onnx.ModelProto) -> onnx.ModelProto:
    graph = onnx.ModelProto()
    graph.CopyFrom(source)
    constants_to_initializers(graph)
    unshare_parameters(graph)
    while fold_batchnorm(graph).modified | fold_channel_affine(graph).modified:   # the graph passes' folding
        pass
    del graph.graph.value_info[:]
    try:
        return onnx.shape_inference.infer_shapes(graph, data_prop=True)
    except Exception as e:  # shape inference raises onnx's own error types
        raise QuantizationError(f"shape inference failed on the graph to quantize: {e}") from e


def _int16_plan(graph: onnx.ModelProto, plan: annotate.Plan, overrides: QuantOverrides,
                settings: QuantSettings) -> tuple[set[str], DtypeSpec | None]:
    """Activation tensors of the hybrid int16 layers, and the 16-bit dtype they use.

    A named layer is its whole NPU layer (``annotate.layer_member_nodes``): the tensor the layer
    stores is 16-bit — not only the output of the node named, which may be internal (a Conv whose
    hard-swish follows) — and so is every tensor that shares its parameters (Reshapes after it). Toolkit 1 models use ``dynamic_fixed_point-i16``,
    Toolkit 2 models ``w16a16i`` (asymmetric activations, symmetric weights).

    Raises:
        QuantizationError: int16 layers in a model whose activations are not 8-bit.
    """
    if not overrides.int16_layers:
        return set(), None
    if settings.spec.act_dtype not in ("int8", "uint8"):
        raise QuantizationError(f"int16 layers {sorted(overrides.int16_layers)[:4]} need an 8-bit model; "
                                f"{settings.canonical} activations are not 8-bit")
    wide = DTYPES["dynamic_fixed_point-i16" if settings.toolkit == 1 else "w16a16i"]
    tensors = {o for n in annotate.layer_member_nodes(graph, overrides.int16_layers) for o in n.output if o}
    links: dict[str, set[str]] = {}
    for tensor, source in plan.shared:
        links.setdefault(tensor, set()).add(source)
        links.setdefault(source, set()).add(tensor)
    stack = list(tensors)
    while stack:
        for other in links.get(stack.pop(), ()):
            if other not in tensors:
                tensors.add(other)
                stack.append(other)
    return tensors, wide


def _int16_weights(graph: onnx.ModelProto, plan: annotate.Plan, overrides: QuantOverrides) -> set[str]:
    return {n.input[1] for n in annotate.layer_member_nodes(graph, overrides.int16_layers)
            if len(n.input) > 1 and n.input[1] in plan.weights}


def _quantize_weights(graph: onnx.ModelProto, plan: annotate.Plan, settings: QuantSettings, algorithm,
                      act_params: dict[str, QuantParams], quant_params: dict[str, dict], stats: dict,
                      overrides: QuantOverrides, int16_weights: set[str] = frozenset(),
                      wide: DtypeSpec | None = None, rounder=None, fit_only: bool = False,
                      picture_only: bool = False, rounded: dict | None = None) -> None:
    """Integer weights and int32 biases into ``graph``, their parameters into ``quant_params``.

    ``rounded`` (name → integers and parameters before any bias widening) saves the rounding of a
    weight already quantized from the same ranges (the bias-correction trials of ``quantize_model``).
    """
    spec = settings.spec
    inits = {i.name: i for i in graph.graph.initializer}
    weight_params: dict[str, QuantParams] = {}
    errors: dict[str, np.ndarray] = {}
    integer_bias = spec.act_dtype in ("int8", "uint8")   # 16-bit and weight-only layers add their bias in float
    bias_of = {weight: (bias, x) for bias, (x, weight) in plan.biases.items()}
    layer_of = {n.input[1]: n.name or n.output[0] for n in graph.graph.node if len(n.input) > 1}
    widened: list[str] = []
    for name, (axis, group_axis) in plan.weights.items():
        array = numpy_helper.to_array(inits[name]).astype(np.float32)
        if rounded is not None and name in rounded:
            q, params = rounded[name]
        elif name in int16_weights:   # a hybrid int16 layer: 16-bit weights, one scale per output channel
            method = "layer" if settings.method == "layer" else "channel"
            q, params = quantize_weight(array, axis, group_axis, wide.weight_dtype, wide.weight_qtype, method, None,
                                        algorithm)
        else:
            q, params = quantize_weight(array, axis, group_axis, spec.weight_dtype, spec.weight_qtype,
                                        settings.method, settings.group_size, algorithm, settings.conv_weight_rounding)
        if rounded is not None:
            rounded[name] = (q, params)
        if integer_bias and name in bias_of and name not in int16_weights and name not in overrides.params:
            params, count = _bias_safe(params, inits, *bias_of[name], act_params, spec)
            if count:
                q = weight_integers(array, params, settings.conv_weight_rounding)
                widened.append(f"{layer_of.get(name, name)} ({count} of {params.scale.size} channels)"
                               if params.scale.size > 1 else f"{layer_of.get(name, name)} (per layer)")
        if name in overrides.params:   # hybrid config: the user's parameters for this weight
            params = overrides.weight_params(name, params)
            q = weight_integers(array, params, settings.conv_weight_rounding)
        elif rounder is not None and name not in int16_weights:
            q = rounder.round(name, array, q, params)   # learned rounding, same scales
        inits[name].CopyFrom(numpy_helper.from_array(q, name))
        weight_params[name] = params
        quant_params[name] = params.to_dict()
        errors[name] = array - numerics.dequantize(q, params)
    if widened:
        log.warning(f"quantize: {len(widened)} layer(s) have a bias too large for int32 in units of s_x*s_w; "
                    f"their weight scale was raised on those channels so the bias stays exact: "
                    f"{', '.join(widened[:8])}{' ...' if len(widened) > 8 else ''}")
    if settings.bias_correction:
        _correct_biases(graph, plan, errors, stats, settings.bias_correction_check, fit_only, picture_only)
    inits = {i.name: i for i in graph.graph.initializer}
    if spec.act_dtype not in ("int8", "uint8"):
        return   # 16-bit and weight-only layers add their bias in float
    for name, (x, weight) in plan.biases.items():
        if x not in act_params or weight not in weight_params or weight in int16_weights:
            continue   # an int16 layer adds its bias in float: in units of two 16-bit scales it overflows int32
        x_params = act_params[x]
        if x_params.dtype == "int16" and weight not in int16_weights:   # an 8-bit layer reading a 16-bit tensor
            x_params = narrowed(x_params, spec.act_dtype, spec.act_qtype)
        q, record = quantize_bias(numpy_helper.to_array(inits[name]).astype(np.float32), x_params,
                                  weight_params[weight])
        inits[name].CopyFrom(numpy_helper.from_array(q, name))
        quant_params[name] = record


def _bias_safe(params: QuantParams, inits: dict, bias: str, x: str, act_params: dict[str, QuantParams],
               spec: DtypeSpec) -> tuple[QuantParams, int]:
    """``weights.bias_safe`` for the layer reading ``x`` with ``bias`` (the input scale the int32 bias uses)."""
    if x not in act_params or bias not in inits:
        return params, 0
    x_params = act_params[x]
    if x_params.dtype == "int16":   # an 8-bit layer reading a 16-bit tensor: its narrowed scale
        x_params = narrowed(x_params, spec.act_dtype, spec.act_qtype)
    return bias_safe(params, numpy_helper.to_array(inits[bias]), float(x_params.scale.ravel()[0]))


def _correct_biases(graph: onnx.ModelProto, plan: annotate.Plan, errors: dict[str, np.ndarray], stats: dict,
                    held_out_check: bool = True, fit_only: bool = False, picture_only: bool = False) -> None:
    """Bias correction: ``b' = b + (W − Ŵ)·E[x]`` per output channel, ``E[x]`` the calibration mean of
    each input channel, so the weight rounding adds no systematic offset (Conv and Gemm).

    ``held_out_check``: each layer's correction is first checked on held-out calibration samples
    (``fold.held_out_indices``, the ones depthwise equalization is checked on). Estimated from the
    other samples, it must lower the held-out samples' weight-rounding error, each sample weighed by
    its input's power (the error relative to the signal); where it does not (channel means that change
    from picture to picture), the layer keeps its bias. Layers that read the picture itself are
    always corrected: there the check mispredicts (PP-OCR cls and rec lose 0.006 / 0.0008 of held-out
    cosine without their first layer's correction, docs/quantization.md). One ``I`` line says how
    many layers kept the correction. ``fit_only``: the means leave the held-out samples out (the
    trial that ``quantize_model``'s correction judge scores on them); ``picture_only``: only the
    picture-reading layers are corrected (the judge found the others' corrections lower the output cosine).
    """
    inits = {i.name: i for i in graph.graph.initializer}
    picture = {i.name for i in graph.graph.input}
    for node in graph.graph.node:
        if any(p.key == PREPROCESS_KEY for p in node.metadata_props):
            picture.update(node.output)
    # a Conv reading a Pad layer (``wide_pads``: the padding the Conv had) takes the means of the
    # unpadded tensor, as when it padded inside: the same correction, the same outputs
    padded_from = {n.output[0]: n.input[0] for n in graph.graph.node
                   if n.op_type == "Pad" and any(p.key == CONV_PADDING_KEY for p in n.metadata_props)}
    corrected, kept_plain = [], []
    for node in graph.graph.node:
        source = padded_from.get(node.input[0], node.input[0]) if node.op_type == "Conv" else node.input[0]
        if node.op_type not in ("Conv", "Gemm") or node.input[1] not in errors or source not in stats:
            continue
        if picture_only and source not in picture:
            continue
        st = stats[source]
        error = errors[node.input[1]]
        delta = _output_shift(node, error, _fit_mean(st) if fit_only else st.channel_mean())
        if delta is None:
            continue
        if held_out_check and source not in picture and not _correction_holds(node, error, st):
            kept_plain.append(node.name or node.output[0])
            continue
        corrected.append(node.name or node.output[0])
        if len(node.input) > 2 and node.input[2]:
            bias = numpy_helper.to_array(inits[node.input[2]]).astype(np.float64)
            inits[node.input[2]].CopyFrom(numpy_helper.from_array((bias + delta).astype(np.float32), node.input[2]))
        else:
            name = f"{node.output[0]}__corrected_bias"
            graph.graph.initializer.append(numpy_helper.from_array(delta.astype(np.float32), name))
            while len(node.input) < 3:
                node.input.append("")
            node.input[2] = name
            if annotate.node_kind(node) in (annotate.QCONV, annotate.QMATMUL):
                plan.biases[name] = (node.input[0], node.input[1])
    if kept_plain:
        log.info(f"quantize: bias correction applied to {len(corrected)} of {len(corrected) + len(kept_plain)} "
                 f"layer(s); {len(kept_plain)} kept their bias (no lower weight-rounding error on held-out "
                 f"calibration samples): {', '.join(kept_plain[:6])}{' …' if len(kept_plain) > 6 else ''}")


def _correction_holds(node: onnx.NodeProto, error: np.ndarray, st) -> bool:
    """Whether the correction estimated without the held-out samples lowers their error.

    A sample's output error from weight rounding is ``(W − Ŵ)·x``; subtracting a constant ``δ``
    changes its squared sum over the pixels only through the sample's channel means ``m``, so the
    test compares ``Σ ‖Ê·m − δ‖² / P`` with ``Σ ‖Ê·m‖² / P`` over the held-out samples (``P`` the
    sample's input power; padding ignored). Too few samples to hold some out: the correction stays."""
    count = len(st.sample_means)
    held = held_out_indices(count)
    if not held or len(held) == count:
        return True
    delta = _output_shift(node, error, _fit_mean(st))
    if delta is None:
        return True
    plain = with_correction = 0.0
    for i in sorted(held):
        shift = _output_shift(node, error, st.sample_means[i])
        weight = 1.0 / max(st.sample_power[i], 1e-300)
        plain += weight * float(np.sum(np.square(shift)))
        with_correction += weight * float(np.sum(np.square(shift - delta)))
    return with_correction < plain


def _fit_mean(st) -> np.ndarray | None:
    """Each channel's mean over the calibration samples that are not held out."""
    held = held_out_indices(len(st.sample_means))
    fit = [m for i, m in enumerate(st.sample_means) if i not in held]
    return np.mean(fit, axis=0) if fit else st.channel_mean()


def _output_shift(node: onnx.NodeProto, error: np.ndarray, mean: np.ndarray | None) -> np.ndarray | None:
    if mean is None:
        return None
    if node.op_type == "Conv":
        out_c, group_c = error.shape[0], error.shape[1]
        if mean.size % group_c or out_c % (mean.size // group_c):
            return None
        groups = mean.size // group_c
        per_out = mean.reshape(groups, group_c)[np.arange(out_c) // (out_c // groups)]
        return np.einsum("oc,oc->o", error.astype(np.float64).reshape(out_c, group_c, -1).sum(axis=2), per_out)
    trans_b = any(a.name == "transB" and a.i for a in node.attribute)
    matrix = error if trans_b else error.T            # [N, K]
    return matrix.astype(np.float64) @ mean if matrix.shape[1] == mean.size else None


def _tensor_dtypes(graph: onnx.ModelProto, act_params: dict[str, QuantParams],
                   quant_params: dict[str, dict]) -> dict[str, str]:
    dtypes: dict[str, str] = {}
    floats = annotate.float_tensor_names(graph)
    stored_integer = set()
    # The NPU's input conversion (mean/std, layout) writes the integers integer layers read: the
    # graph inputs and the normalised inputs they read are stored in the activation dtype.
    converted_on_input = {i.name for i in graph.graph.input}
    for node in graph.graph.node:
        if annotate.node_kind(node) in annotate.INTEGER_KINDS:
            stored_integer.update(node.output)
            stored_integer.update(i for i in node.input if i in converted_on_input)
        if any(p.key == PREPROCESS_KEY for p in node.metadata_props):
            converted_on_input.update(node.output)
    for name in floats:
        dtypes[name] = act_params[name].dtype if name in stored_integer and name in act_params else "float16"
    for name, record in quant_params.items():
        if name not in act_params:
            dtypes[name] = record["dtype"]
    return dtypes
