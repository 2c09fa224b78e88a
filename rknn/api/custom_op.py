"""``from rknn.api.custom_op import get_node_attr`` (seed 002 §5.5)."""
from openrknn.graph.custom_ops import get_node_attr

__all__ = ["get_node_attr"]
