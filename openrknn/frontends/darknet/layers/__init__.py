"""Darknet layer converters, one module per family; importing this package registers them."""
from __future__ import annotations

from openrknn.frontends.darknet.layers import combine, conv, head, pool  # noqa: F401

__all__ = ["combine", "conv", "head", "pool"]
