"""Graph passes, chosen by ``config(optimization_level=...)`` (seed 002 §3.1.2).

======  ==============================================================================
level   passes
======  ==============================================================================
0       the graph runs as loaded (the NPU layer graph is still marked: rknn-toolkit2
        2.5.0 fuses Conv+Relu, Conv+hard-swish ... at every level — measured), but for what
        rknn-toolkit2's loader does at every level (measured, exact): all-zero-weight Convs are
        constants and the zero Adds after them go (``zero_weights``), ``Relu(Relu(x))`` is one
        Relu (``repeated_relus``); a residual block's projection shortcut Conv runs after the long
        branch and takes the Add (``shortcut_order``, every level)
1       lossless clean-up: Identity/Dropout removal, constant folding (Shape/Size of
        static tensors and the Gather/Concat/Unsqueeze chains after them), ``If`` with a
        constant condition replaced by the branch it takes, dead nodes
2       level 1 + BatchNormalizations with default parameters dropped (γ=1, β=0, μ=0, σ²=1:
        ``identity_batchnorm``, as rknn-toolkit2; off by the factor √(1+ε)), so is a
        ``Mul(x, 1) → Add(·, 0)`` pair (an untrained GroupNorm's affine: ``identity_affine``), the others
        folded into Conv/ConvTranspose/Gemm, per-channel
        constant Mul/Add/Sub after a Conv folded into its weights (unfused Keras batch norms),
        same-input Conv (+ identity BatchNorm) branches summed by an Add merged into one Conv
        (RepVGG / MobileOne training form, as rknn-toolkit2 does), channel Slices and shuffles
        lowered as rknn-toolkit2 does (a Conv split per Slice, a shuffle as a gather Conv,
        full-range Slices dropped: ``channel_slices``), channels-last regions between a
        ``Transpose`` pair (ConvNeXt's LayerNorm/Linear blocks) run channel-first
        (``channels_last``), a Concat read only by a Conv run as one
        Conv per Concat input summed (``wide_convs.split_concat_convs``),
        a Sigmoid read through a Conv's Reshape/Transpose moved next to the Conv
        (``activation_hoisting``: YOLOv5's head, ``ConvSigmoid`` as rknn-toolkit2), a Relu/Clip
        read through Reshapes moved before them (a GroupNorm's ``exNorm → Relu → Reshape``),
        Transpose pairs merged or cancelled, Reshape/Flatten/Squeeze/Unsqueeze chains merged
        (or dropped when they keep the shape)
3       level 2 (the default). Every level ends with the NPU layer graph
        (``openrknn.graph.npu_layers``): which nodes run as one layer (Conv/Gemm/MatMul/Add/
        BatchNorm + activation, Conv + residual Add, decomposed hard-swish / SiLU / Mish / GELU) and which tensors are stored
======  ==============================================================================

Levels 1–2 change values only by float rounding (BN folding re-associates a product); the guide's
"lower levels may keep accuracy" refers to exactly such rewrites.
"""
from __future__ import annotations

from collections.abc import Callable

import onnx

from openrknn import log
from openrknn.graph.passes.activation_hoisting import hoist_activations_over_reshapes, hoist_sigmoids
from openrknn.graph.passes.affine_folding import fold_channel_affine
from openrknn.graph.passes.base import PassResult
from openrknn.graph.passes.batchnorm_folding import fold_batchnorm
from openrknn.graph.passes.branch_merging import merge_parallel_branches
from openrknn.graph.passes.branches import inline_constant_branches
from openrknn.graph.passes.channel_slices import lower_channel_slices
from openrknn.graph.passes.channels_last import lower_channels_last
from openrknn.graph.passes.constant_folding import fold_constants
from openrknn.graph.passes.eliminate import remove_aliases, remove_dead_nodes
from openrknn.graph.passes.identity_affine import remove_identity_affines
from openrknn.graph.passes.identity_batchnorm import remove_default_batchnorms
from openrknn.graph.passes.layout import simplify_layout
from openrknn.graph.passes.repeated_relus import merge_repeated_relus
from openrknn.graph.passes.shortcut_order import run_shortcuts_last
from openrknn.graph.passes.wide_convs import split_concat_convs
from openrknn.graph.passes.zero_weights import fold_zero_weight_convs
from openrknn.graph.npu_layers import FUSED_ACTIVATION_KEY, fused_activation
from openrknn.graph.passes.layer_marking import mark_npu_layers

Pass = Callable[[onnx.ModelProto], PassResult]

PASSES_BY_LEVEL: dict[int, list[Pass]] = {
    0: [fold_zero_weight_convs, merge_repeated_relus, run_shortcuts_last, mark_npu_layers],
    1: [fold_zero_weight_convs, merge_repeated_relus, remove_aliases, fold_constants, inline_constant_branches, remove_dead_nodes,
        run_shortcuts_last, mark_npu_layers],
    2: [fold_zero_weight_convs, merge_repeated_relus, remove_aliases, fold_constants, inline_constant_branches,
        remove_default_batchnorms, remove_identity_affines, fold_batchnorm, lower_channels_last, fold_channel_affine,
        merge_parallel_branches, lower_channel_slices, split_concat_convs, hoist_activations_over_reshapes,
        simplify_layout, hoist_sigmoids, remove_dead_nodes,
        run_shortcuts_last, mark_npu_layers],
    3: [fold_zero_weight_convs, merge_repeated_relus, remove_aliases, fold_constants, inline_constant_branches,
        remove_default_batchnorms, remove_identity_affines, fold_batchnorm, lower_channels_last, fold_channel_affine,
        merge_parallel_branches, lower_channel_slices, split_concat_convs, hoist_activations_over_reshapes,
        simplify_layout, hoist_sigmoids, remove_dead_nodes,
        run_shortcuts_last, mark_npu_layers],
}
_MAX_ROUNDS = 8   # folding one Shape can expose the next; real graphs settle in 2–3 rounds

__all__ = ["FUSED_ACTIVATION_KEY", "PASSES_BY_LEVEL", "PassResult", "fused_activation", "optimize"]


def optimize(model: onnx.ModelProto, level: int = 3) -> onnx.ModelProto:
    """Return an optimised copy of ``model`` for ``optimization_level`` 0–3, passes repeated to a fixed point."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    passes = PASSES_BY_LEVEL[level]
    before = len(out.graph.node)
    for _ in range(_MAX_ROUNDS if passes else 0):
        changed = False
        for run in passes:
            changed |= run(out).modified
        if not changed:
            break
    if passes:
        log.debug(f"optimization_level={level}: {before} → {len(out.graph.node)} nodes")
    return out
