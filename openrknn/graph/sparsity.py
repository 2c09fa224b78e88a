"""``config(sparse_infer=True)`` (RK3576, seed 002 §5.11): find 2:4 structured-sparse weights.

A weight is 2:4 sparse when, along its input-channel axis, every group of four consecutive values
holds at least two zeros. The NPU then stores half the values plus 2-bit indices and skips half
the multiplications. This module recognises such layers and reports them; the cost model halves
their MACs and the weight memory accounts for the compressed storage.
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import numpy_helper

_WEIGHTED = {"Conv": 1, "Gemm": 1, "MatMul": 1}


def is_2_4_sparse(weight: np.ndarray, axis: int) -> bool:
    """True when every aligned group of 4 along ``axis`` has at least 2 zeros (axis length % 4 == 0)."""
    if weight.ndim < 2 or weight.shape[axis] % 4:
        return False
    moved = np.moveaxis(weight, axis, -1)
    groups = moved.reshape(-1, 4)
    return bool(np.all((groups == 0).sum(axis=1) >= 2))


def find_sparse_layers(model: onnx.ModelProto) -> dict[str, int]:
    """Layer name -> weight bytes saved, for every 2:4-sparse Conv/Gemm/MatMul weight."""
    inits = {i.name: i for i in model.graph.initializer}
    found = {}
    for node in model.graph.node:
        if node.op_type not in _WEIGHTED or len(node.input) < 2 or node.input[1] not in inits:
            continue
        weight = numpy_helper.to_array(inits[node.input[1]])
        if node.op_type == "Conv":
            axis = 1
        elif node.op_type == "Gemm":
            trans_b = next((a.i for a in node.attribute if a.name == "transB"), 0)
            axis = 1 if trans_b else 0
        else:
            axis = weight.ndim - 2
        if is_2_4_sparse(weight, axis):
            # half the values are kept; 2-bit index per kept value
            found[node.name or node.output[0]] = weight.nbytes // 2 - weight.size // 2 // 4
    return found
