"""Convolution and FullyConnected."""
from __future__ import annotations

from openrknn.errors import ModelLoadError
from openrknn.frontends.mxnet.context import MxContext, register
from openrknn.frontends.mxnet.symbol import MxNode


def _check_layout(node: MxNode) -> None:
    layout = node.get_str("layout", "NCHW").upper()
    if layout not in ("NCHW", "NCW", "NCDHW"):
        raise ModelLoadError(f"node '{node.name}' ({node.op}): layout={layout} is not supported; only channel-first")


@register("Convolution")
def convolution(ctx: MxContext, node: MxNode) -> str:
    """Conv; weights (num_filter, C/num_group, kh, kw) as in ONNX."""
    _check_layout(node)
    kernel = node.get_ints("kernel", [])
    if not kernel:
        raise ModelLoadError(f"node '{node.name}' (Convolution) has no 'kernel' attribute")
    n = len(kernel)
    stride, dilate = node.get_ints("stride", [1] * n) or [1] * n, node.get_ints("dilate", [1] * n) or [1] * n
    pad = node.get_ints("pad", [0] * n) or [0] * n
    inputs = [ctx.input(node, 0), ctx.input(node, 1)]
    if not node.get_bool("no_bias", False):
        inputs.append(ctx.input(node, 2))
    return ctx.g.node("Conv", inputs, node.name, kernel_shape=kernel, strides=stride, dilations=dilate,
                      pads=pad * 2, group=node.get_int("num_group", 1))


@register("FullyConnected")
def fully_connected(ctx: MxContext, node: MxNode) -> str:
    """``y = x·Wᵀ + b``; with ``flatten`` (default) the input is first flattened to (N, -1),
    otherwise the product runs over the last axis."""
    x, weight = ctx.input(node, 0), ctx.param(node, 1, "weight")
    no_bias = node.get_bool("no_bias", False)
    g = ctx.g
    if node.get_bool("flatten", True):
        flat = g.node("Flatten", [x], f"{node.name}_flatten", axis=1)
        inputs = [flat, ctx.input(node, 1)] + ([] if no_bias else [ctx.input(node, 2)])
        return g.node("Gemm", inputs, node.name, transB=1)
    product = g.node("MatMul", [x, g.const(f"{node.name}_weight_t", weight.T)], node.name,
                     output=node.name if no_bias else f"{node.name}_matmul")
    if no_bias:
        return product
    return g.node("Add", [product, ctx.input(node, 2)], f"{node.name}_bias", output=node.name)
