"""MXNet op converters, one module per family; importing this package registers them."""
from __future__ import annotations

from openrknn.frontends.mxnet.ops import activation, arith, conv, norm, pool, tensor  # noqa: F401

__all__ = ["activation", "arith", "conv", "norm", "pool", "tensor"]
