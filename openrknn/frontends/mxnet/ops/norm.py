"""BatchNorm."""
from __future__ import annotations

import numpy as np

from openrknn.errors import ModelLoadError
from openrknn.frontends.mxnet.context import MxContext, register
from openrknn.frontends.mxnet.symbol import MxNode


@register("BatchNorm")
def batch_norm(ctx: MxContext, node: MxNode) -> str:
    """Inference batch norm ``y = γ·(x − mean)/√(var + eps) + β`` over axis 1.

    MXNet's defaults differ from ONNX's: ``eps`` = 1e-3, and ``fix_gamma`` = True makes γ = 1
    whatever the stored value.
    """
    if node.get_int("axis", 1) != 1:
        raise ModelLoadError(f"node '{node.name}' (BatchNorm): axis={node.attrs['axis']} is not supported; only 1")
    gamma = ctx.param(node, 1, "gamma")
    if node.get_bool("fix_gamma", True):
        scale = ctx.g.const(f"{node.name}_gamma_fixed", np.ones_like(gamma))
    else:
        scale = ctx.input(node, 1)
    inputs = [ctx.input(node, 0), scale, ctx.input(node, 2), ctx.input(node, 3), ctx.input(node, 4)]
    return ctx.g.node("BatchNormalization", inputs, node.name, epsilon=node.get_float("eps", 1e-3))
