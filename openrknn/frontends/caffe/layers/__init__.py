"""Caffe layer converters, one module per layer family; importing this package registers them all."""
from __future__ import annotations

from openrknn.frontends.caffe.layers import activation, combine, conv, norm, pool, shape, ssd  # noqa: F401
