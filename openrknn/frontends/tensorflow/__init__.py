"""TensorFlow frontend: frozen GraphDef ``.pb`` files read without TensorFlow."""
from __future__ import annotations

from openrknn.frontends.tensorflow.loader import load_tensorflow

__all__ = ["load_tensorflow"]
