"""TensorFlow's SAME / VALID / EXPLICIT window padding as explicit ONNX ``pads``."""
from __future__ import annotations

from typing import Any, Sequence

from openrknn.errors import ModelLoadError
from openrknn.frontends.onnx_builder import same_pads
from openrknn.frontends.tensorflow.context import attr


def window_pads(node: Any, in_hw: Sequence[int], kernel: Sequence[int], strides: Sequence[int],
                dilations: Sequence[int], channels_last: bool) -> list[int]:
    """ONNX ``pads`` (``[top, left, bottom, right]``) for a 2-D window op.

    SAME: ``out = ceil(in / s)``, ``total = max((out - 1)·s + (k - 1)·d + 1 - in, 0)``,
    ``before = total // 2`` and the odd pixel goes at the end. VALID pads nothing; EXPLICIT
    reads ``explicit_paddings`` (``[before, after]`` per axis in the node's data format).
    """
    padding = attr(node, "padding", "VALID")
    if padding == "VALID":
        return [0, 0, 0, 0]
    if padding == "SAME":
        return same_pads(in_hw, kernel, strides, dilations)
    if padding == "EXPLICIT":
        values = list(attr(node, "explicit_paddings", []))
        if len(values) != 8:
            raise ModelLoadError(f"node '{node.name}' ({node.op}): explicit_paddings must hold 8 values")
        axes = (1, 2) if channels_last else (2, 3)
        return [values[2 * a] for a in axes] + [values[2 * a + 1] for a in axes]
    raise ModelLoadError(f"node '{node.name}' ({node.op}): padding '{padding}' is not SAME, VALID or EXPLICIT")


def spatial(node: Any, key: str, channels_last: bool, default: int = 1) -> list[int]:
    """The H and W entries of a 4-value attribute such as ``strides`` or ``ksize``."""
    values = list(attr(node, key, [default] * 4))
    if len(values) == 2:
        return values
    if len(values) != 4:
        raise ModelLoadError(f"node '{node.name}' ({node.op}): attribute '{key}' must hold 4 values, got {values}")
    return values[1:3] if channels_last else values[2:4]
