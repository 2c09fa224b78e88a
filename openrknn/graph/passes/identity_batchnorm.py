"""Drop a BatchNormalization with default parameters, as rknn-toolkit2 2.5.0 does.

A BatchNorm that was never trained — γ = 1, β = 0, running mean 0, running variance 1 on every
channel — computes ``x / √(1 + ε)``. rknn-toolkit2 removes it (``remove_invalid_bn``), whatever
ε is: probes on rk3588 int8 (docs/fidelity.md) drop it with ε = 1e-5, 1e-3 and 1e-2 and keep it
when any parameter differs (γ = 1.0001, β = 1e-6, or γ = √2 with variance 2, which is also a
unit scale). timm's random-weight MixNet has such BNs after its mixed-kernel Concats (torch's
exporter folds the others into their Convs): without them its activations are layers of their own
(``Relu``, ``exSwish``) and a Concat → Split pair of equal pieces vanishes.

Only a BN that alone reads its input: the identity-BN branch of RepVGG / MobileOne's training
form (beside Conv branches reading the same tensor) is left to ``branch_merging`` — how
rknn-toolkit2 then places its ``Add`` is not measured here.

Not exact: the values change by the factor √(1 + ε) (5·10⁻⁶ relative for the usual ε = 1e-5),
which is what the chip computes after rknn-toolkit2's build.
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import numpy_helper

from openrknn.graph.passes.base import PassResult, attribute, bypass_node, consumers, initializers

_DEFAULTS = (1.0, 0.0, 0.0, 1.0)   # scale, bias, running mean, running variance


def remove_default_batchnorms(model: onnx.ModelProto) -> PassResult:
    """Remove every inference BatchNormalization whose four parameters are the defaults."""
    graph = model.graph
    modified = False
    for bn in [n for n in graph.node if n.op_type == "BatchNormalization" and n.domain in ("", "ai.onnx")]:
        modified |= _remove_one(graph, bn)
    return PassResult(model, modified)


def _remove_one(graph: onnx.GraphProto, bn: onnx.NodeProto) -> bool:
    if len(bn.input) < 5 or len([o for o in bn.output if o]) != 1 or attribute(bn, "training_mode", 0):
        return False
    inits = initializers(graph)
    if any(name not in inits for name in bn.input[1:5]) or len(consumers(graph).get(bn.input[0], [])) != 1:
        return False   # an identity branch beside Convs (RepVGG/MobileOne) is branch_merging's
    for name, default in zip(bn.input[1:5], _DEFAULTS):
        value = numpy_helper.to_array(inits[name])
        if value.dtype.kind != "f" or not np.all(value == default):
            return False
    return bypass_node(graph, bn, bn.input[0])
