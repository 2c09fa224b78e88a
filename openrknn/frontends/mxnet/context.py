"""What an MXNet op converter sees: the node, its input tensors, the parameters and the graph."""
from __future__ import annotations

from typing import Callable

import numpy as np

from openrknn.errors import ModelLoadError
from openrknn.frontends.onnx_builder import GraphBuilder
from openrknn.frontends.mxnet.symbol import MxNode, Symbol

Converter = Callable[["MxContext", MxNode], str]
CONVERTERS: dict[str, Converter] = {}


def register(*ops: str) -> Callable[[Converter], Converter]:
    """Register a converter for MXNet ops ``ops``; a duplicate registration is an error."""
    def wrap(func: Converter) -> Converter:
        for op in ops:
            if op in CONVERTERS:
                raise RuntimeError(f"MXNet converter for '{op}' registered twice")
            CONVERTERS[op] = func
        return func
    return wrap


class MxContext:
    """State shared by the converters while one symbol is converted.

    Args:
        graph: the ONNX graph writer.
        symbol: the parsed symbol.
        params: parameter arrays by name.
    """

    def __init__(self, graph: GraphBuilder, symbol: Symbol, params: dict[str, np.ndarray]) -> None:
        self.g = graph
        self.symbol = symbol
        self.params = params
        self.tensors: dict[int, str] = {}  # node index -> ONNX tensor of its output 0

    def _source(self, node: MxNode, i: int) -> MxNode:
        if i >= len(node.inputs):
            raise ModelLoadError(f"node '{node.name}' ({node.op}) needs at least {i + 1} inputs, "
                                 f"has {len(node.inputs)}")
        src, out = node.inputs[i]
        if out != 0:
            raise ModelLoadError(f"node '{node.name}' ({node.op}) reads output {out} of "
                                 f"'{self.symbol.nodes[src].name}'; only first outputs are supported")
        return self.symbol.nodes[src]

    def input(self, node: MxNode, i: int = 0) -> str:
        """ONNX tensor of input ``i`` of ``node`` (parameters become initializers on first use)."""
        src = self._source(node, i)
        if src.index not in self.tensors:
            if src.op == "null" and src.name in self.params:
                self.tensors[src.index] = self.g.const(src.name, self.params[src.name].astype(np.float32))
            else:
                raise ModelLoadError(f"node '{node.name}' ({node.op}) reads '{src.name}', which is neither a "
                                     "parameter in the .params file nor a converted node")
        return self.tensors[src.index]

    def param(self, node: MxNode, i: int, what: str) -> np.ndarray:
        """Value of input ``i`` of ``node``, which must be a parameter of the ``.params`` file."""
        src = self._source(node, i)
        if src.op != "null" or src.name not in self.params:
            raise ModelLoadError(f"node '{node.name}' ({node.op}): its {what} '{src.name}' must be a parameter "
                                 "stored in the .params file")
        return self.params[src.name].astype(np.float32)

    def shape(self, tensor: str) -> list[int]:
        """Static shape of an ONNX tensor."""
        return self.g.shape(tensor)

    def scalar(self, node: MxNode, value: float, what: str) -> str:
        """A float32 scalar constant."""
        return self.g.const(f"{node.name}_{what}", np.float32(value))
