"""Caffe frontend: ``.prototxt`` + ``.caffemodel`` read with a schema declared in :mod:`.schema`."""
from __future__ import annotations

from openrknn.frontends.caffe.loader import load_caffe

__all__ = ["load_caffe"]
