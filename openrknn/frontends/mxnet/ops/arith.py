"""Element-wise binary ops between tensors and with scalars."""
from __future__ import annotations

from openrknn.frontends.mxnet.context import MxContext, register
from openrknn.frontends.mxnet.symbol import MxNode

_BINARY = {"elemwise_add": "Add", "_Plus": "Add", "_plus": "Add", "_add": "Add", "broadcast_add": "Add",
           "broadcast_plus": "Add", "elemwise_sub": "Sub", "_Minus": "Sub", "_minus": "Sub", "_sub": "Sub",
           "broadcast_sub": "Sub", "broadcast_minus": "Sub", "elemwise_mul": "Mul", "_Mul": "Mul", "_mul": "Mul",
           "broadcast_mul": "Mul", "elemwise_div": "Div", "_Div": "Div", "_div": "Div", "broadcast_div": "Div",
           "broadcast_maximum": "Max", "_maximum": "Max", "broadcast_minimum": "Min", "_minimum": "Min"}
# op -> (ONNX op, scalar first?)
_SCALAR = {"_plus_scalar": ("Add", False), "_PlusScalar": ("Add", False), "_minus_scalar": ("Sub", False),
           "_MinusScalar": ("Sub", False), "_rminus_scalar": ("Sub", True), "_RMinusScalar": ("Sub", True),
           "_mul_scalar": ("Mul", False), "_MulScalar": ("Mul", False), "_div_scalar": ("Div", False),
           "_DivScalar": ("Div", False), "_rdiv_scalar": ("Div", True), "_RDivScalar": ("Div", True),
           "_power_scalar": ("Pow", False), "_maximum_scalar": ("Max", False), "_minimum_scalar": ("Min", False)}


@register(*_BINARY)
def binary(ctx: MxContext, node: MxNode) -> str:
    """``a ∘ b`` with numpy broadcasting (elemwise_* need equal shapes, which broadcasting accepts)."""
    return ctx.g.node(_BINARY[node.op], [ctx.input(node, 0), ctx.input(node, 1)], node.name)


@register(*_SCALAR)
def scalar(ctx: MxContext, node: MxNode) -> str:
    """``x ∘ scalar`` (or ``scalar ∘ x`` for the ``_r*`` ops)."""
    op, reverse = _SCALAR[node.op]
    x, s = ctx.input(node), ctx.scalar(node, node.get_float("scalar", 0.0), "scalar")
    return ctx.g.node(op, [s, x] if reverse else [x, s], node.name)
