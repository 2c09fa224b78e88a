"""A small ONNX graph writer for the MXNet frontend, with shape look-up by ONNX shape inference."""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper, shape_inference

from openrknn.errors import ModelLoadError
from openrknn.frontends import FRONTEND_OPSET


class OnnxGraph:
    """Collects inputs, nodes and initializers, then makes a checked ``ModelProto``.

    Args:
        name: graph name.
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self.inputs: list[onnx.ValueInfoProto] = []
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self._names: set[str] = set()  # tensor names
        self._node_names: set[str] = set()
        self._shapes: dict[str, list[int]] = {}

    def unique(self, name: str, taken: set[str] | None = None) -> str:
        """``name``, or ``name_<n>`` when it is already taken (tensor names unless ``taken`` is given)."""
        taken = self._names if taken is None else taken
        candidate, n = name, 1
        while candidate in taken:
            candidate, n = f"{name}_{n}", n + 1
        taken.add(candidate)
        return candidate

    def add_input(self, name: str, shape: Sequence[int]) -> str:
        """Declare a float32 graph input."""
        name = self.unique(name)
        self.inputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, list(shape)))
        self._shapes[name] = [int(d) for d in shape]
        return name

    def const(self, name: str, array: Any, dtype: Any = np.float32) -> str:
        """Add an initializer and return its (unique) name."""
        name = self.unique(name)
        array = np.asarray(array, dtype=dtype)
        self.initializers.append(numpy_helper.from_array(array, name))
        self._shapes[name] = list(array.shape)
        return name

    def node(self, op_type: str, inputs: Sequence[str], name: str, output: str | None = None, **attrs: Any) -> str:
        """Add a one-output node named ``name``; returns the output tensor name."""
        node_name = self.unique(name, self._node_names)
        out = self.unique(output if output is not None else name)
        self.nodes.append(helper.make_node(op_type, list(inputs), [out], name=node_name, **attrs))
        return out

    def _model(self, outputs: Sequence[onnx.ValueInfoProto]) -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, self.name, self.inputs, list(outputs), self.initializers)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", FRONTEND_OPSET)],
                                  producer_name="openrknn-mxnet")
        model.ir_version = 8
        return model

    def shape(self, tensor: str) -> list[int]:
        """Static shape of ``tensor``, from ONNX shape inference over the graph built so far."""
        if tensor not in self._shapes:
            try:
                inferred = shape_inference.infer_shapes(self._model([]), strict_mode=True)
            except Exception as e:  # onnx raises several types; report them the same way
                raise ModelLoadError(f"shape inference failed while converting the graph: {e}") from e
            for value in inferred.graph.value_info:
                dims = value.type.tensor_type.shape.dim
                if all(d.HasField("dim_value") for d in dims):
                    self._shapes[value.name] = [d.dim_value for d in dims]
        if tensor not in self._shapes:
            raise ModelLoadError(f"the shape of tensor '{tensor}' cannot be inferred")
        return list(self._shapes[tensor])

    def finish(self, outputs: Sequence[str]) -> onnx.ModelProto:
        """Make the checked model; output shapes come from shape inference."""
        values = [helper.make_tensor_value_info(n, TensorProto.FLOAT, self.shape(n)) for n in outputs]
        model = self._model(values)
        onnx.checker.check_model(model)
        return model
