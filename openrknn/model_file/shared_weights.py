"""``config(remove_weight=True)``: "slave" models without their convolution weights (seed 002 §9.5).

A slave model shares its weights with a master model built from the same source (on a board:
``RKNN_FLAG_SHARE_WEIGHT_MEM``). The slave file keeps, for every removed weight, its name, shape,
dtype and SHA-256; loading it needs the master model, whose weights must match those digests.
"""
from __future__ import annotations

import hashlib

import numpy as np
import onnx
from onnx import numpy_helper

from openrknn.errors import ModelFileError

_WEIGHTED_OPS = {"Conv", "ConvTranspose", "Gemm", "MatMul"}


def _digest(tensor: onnx.TensorProto) -> str:
    """Hash of the values as the simulator sees them (fp16-stored weights widen to float32)."""
    array = numpy_helper.to_array(tensor)
    if array.dtype == np.float16:
        array = array.astype(np.float32)
    return hashlib.sha256(array.tobytes()).hexdigest()


def strip_weights(graph: onnx.ModelProto) -> dict[str, dict[str, object]]:
    """Remove weight initializers of weighted layers in place; return their descriptions."""
    weight_names = {n.input[1] for n in graph.graph.node if n.op_type in _WEIGHTED_OPS and len(n.input) > 1}
    removed, keep = {}, []
    for init in graph.graph.initializer:
        if init.name in weight_names:
            removed[init.name] = {"shape": list(init.dims), "data_type": init.data_type, "sha256": _digest(init)}
        else:
            keep.append(init)
    del graph.graph.initializer[:]
    graph.graph.initializer.extend(keep)
    return removed


def restore_weights(graph: onnx.ModelProto, removed: dict[str, dict[str, object]], master: onnx.ModelProto,
                    source: str) -> None:
    """Put the master's weights back into a slave graph, checking each digest."""
    masters = {i.name: i for i in master.graph.initializer}
    for name, info in removed.items():
        tensor = masters.get(name)
        if tensor is None or _digest(tensor) != info["sha256"]:
            raise ModelFileError(f"'{source}' was built with remove_weight=True and its weight '{name}' does not match "
                                 "the master model; give the master .rknn built from the same source model")
        graph.graph.initializer.append(tensor)
