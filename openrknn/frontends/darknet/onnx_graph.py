"""A small ONNX graph writer for the Darknet frontend (nodes, constants, unique names)."""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from openrknn.frontends import FRONTEND_OPSET


class OnnxGraph:
    """Collects nodes and initializers, then makes a checked ``ModelProto``.

    Args:
        name: graph name.
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self._names: set[str] = set()  # tensor names
        self._node_names: set[str] = set()

    def unique(self, name: str, taken: set[str] | None = None) -> str:
        """``name``, or ``name_<n>`` when it is already taken (tensor names unless ``taken`` is given)."""
        taken = self._names if taken is None else taken
        candidate, n = name, 1
        while candidate in taken:
            candidate, n = f"{name}_{n}", n + 1
        taken.add(candidate)
        return candidate

    def const(self, name: str, array: Any, dtype: Any = np.float32) -> str:
        """Add an initializer and return its (unique) name."""
        name = self.unique(name)
        self.initializers.append(numpy_helper.from_array(np.asarray(array, dtype=dtype), name))
        return name

    def node(self, op_type: str, inputs: Sequence[str], name: str, output: str | None = None, **attrs: Any) -> str:
        """Add a one-output node named ``name``; returns the output tensor name."""
        node_name = self.unique(name, self._node_names)
        out = self.unique(output if output is not None else name)
        self.nodes.append(helper.make_node(op_type, list(inputs), [out], name=node_name, **attrs))
        return out

    def finish(self, inputs: Sequence[tuple[str, Sequence[int]]],
               outputs: Sequence[tuple[str, Sequence[int]]]) -> onnx.ModelProto:
        """Make the model (float32 inputs and outputs of the given shapes) and check it."""
        graph = helper.make_graph(
            self.nodes, self.name,
            [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(s)) for n, s in inputs],
            [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(s)) for n, s in outputs],
            self.initializers)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", FRONTEND_OPSET)],
                                  producer_name="openrknn-darknet")
        model.ir_version = 8
        onnx.checker.check_model(model)
        return model
