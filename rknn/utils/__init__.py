"""``from rknn.utils import onnx_edit`` (seed 002 §5.13) runs on openrknn."""
from openrknn.graph.onnx_edit import onnx_edit

__all__ = ["onnx_edit"]
