"""Tensor and node naming shared by every stage that adds to an ONNX graph."""
from __future__ import annotations


def fresh_name(hint: str, taken: set[str]) -> str:
    """``hint`` (or ``hint_1``, ``hint_2``, ...) not in ``taken``; the name is added to ``taken``."""
    name, k = hint, 1
    while name in taken:
        name = f"{hint}_{k}"
        k += 1
    taken.add(name)
    return name
