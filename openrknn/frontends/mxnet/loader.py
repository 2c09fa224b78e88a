"""``load_mxnet``: read a symbol ``.json`` + ``.params`` pair without MXNet and build an ONNX graph."""
from __future__ import annotations

import os
from typing import Sequence

import onnx

from openrknn import log
from openrknn.errors import ModelLoadError, UnsupportedOpError
from openrknn.frontends import SourceModel
from openrknn.frontends.mxnet import ops as _ops  # noqa: F401  (fills CONVERTERS)
from openrknn.frontends.mxnet.context import CONVERTERS, MxContext
from openrknn.frontends.onnx_builder import GraphBuilder
from openrknn.frontends.mxnet.params import read_params
from openrknn.frontends.mxnet.symbol import MxNode, Symbol, parse_symbol

# ops whose inputs after the first are training labels, not data
_LOSS_OPS = {"SoftmaxOutput", "LinearRegressionOutput", "LogisticRegressionOutput", "MAERegressionOutput",
             "SVMOutput"}


def load_mxnet(symbol: str, params: str, input_size_list: Sequence[Sequence[int]]) -> SourceModel:
    """Convert an MXNet model (``mx.model.save_checkpoint`` files) to ONNX.

    Args:
        symbol: the ``-symbol.json`` file.
        params: the ``-NNNN.params`` file (NDArray list; ``arg:``/``aux:`` name prefixes optional).
        input_size_list: one shape per data input, in symbol order; 3-value shapes get batch 1.

    Returns:
        SourceModel with framework 'mxnet'; node and tensor names are the MXNet node names.

    Raises:
        ModelLoadError: malformed files, missing parameters, wrong number of input sizes.
        UnsupportedOpError: an operator without a converter (names the node).

    Example:
        >>> sm = load_mxnet("resnet-symbol.json", "resnet-0000.params", [[1, 3, 224, 224]])  # doctest: +SKIP
    """
    sym = parse_symbol(symbol)
    arrays = read_params(params)
    needed = _reachable(sym)
    data_nodes = _data_inputs(sym, arrays, needed)
    sizes = _input_sizes(input_size_list, data_nodes, sym.file)
    graph = GraphBuilder(os.path.basename(symbol))
    ctx = MxContext(graph, sym, arrays)
    for node, size in zip(data_nodes, sizes):
        ctx.tensors[node.index] = graph.add_input(node.name, size)
    for node in sym.nodes:
        if node.op != "null" and node.index in needed:
            ctx.tensors[node.index] = _convert(ctx, node)
    outputs = []
    for src, out in sym.heads:
        if out != 0 or src not in ctx.tensors:
            raise ModelLoadError(f"{sym.file}: head ({src}, {out}) is not the first output of a converted node")
        outputs.append(ctx.tensors[src])
    onnx_model = graph.finish(list(dict.fromkeys(outputs)), os.path.splitext(os.path.basename(symbol))[0],
                              producer="openrknn-mxnet")
    layouts = {v.name: "NCHW" for v in graph.inputs if len(v.type.tensor_type.shape.dim) == 4}
    return SourceModel(model=onnx_model, framework="mxnet", input_layouts=layouts)


def _reachable(sym: Symbol) -> set[int]:
    needed, stack = set(), [src for src, _ in sym.heads]
    while stack:
        index = stack.pop()
        if index not in needed:
            needed.add(index)
            node = sym.nodes[index]
            inputs = node.inputs[:1] if node.op in _LOSS_OPS else node.inputs
            stack += [src for src, _ in inputs]
    return needed


def _data_inputs(sym: Symbol, params: dict, needed: set[int]) -> list[MxNode]:
    return [n for n in sym.nodes if n.op == "null" and n.index in needed and n.name not in params]


def _input_sizes(sizes: Sequence[Sequence[int]] | None, data_nodes: list[MxNode], file: str) -> list[list[int]]:
    names = [n.name for n in data_nodes]
    sizes = [list(s) for s in (sizes or [])]
    if len(sizes) != len(data_nodes):
        raise ModelLoadError(f"{file}: input_size_list has {len(sizes)} shape(s) but the symbol has "
                             f"{len(data_nodes)} data input(s) {names} (variables without a value in the .params "
                             "file); give one shape per input, or check that the .params file belongs to the symbol")
    result = []
    for name, size in zip(names, sizes):
        if not size or not all(isinstance(d, int) and d > 0 for d in size):
            raise ModelLoadError(f"input_size_list: shape {size} of input '{name}' must be positive integers")
        if len(size) == 3:
            log.info(f"load_mxnet: input '{name}' size {size} has no batch dimension; using {[1] + size}")
            size = [1] + size
        result.append(size)
    return result


def _convert(ctx: MxContext, node: MxNode) -> str:
    converter = CONVERTERS.get(node.op)
    if converter is None:
        raise UnsupportedOpError(node.op, node.name, "MXNet", "supported ops: " + ", ".join(sorted(
            op for op in CONVERTERS if not op.startswith("_") or op in ("_Plus", "_minus_scalar", "_mul_scalar"))))
    try:
        return converter(ctx, node)
    except (onnx.checker.ValidationError, ValueError, TypeError) as e:
        raise ModelLoadError(f"node '{node.name}' ({node.op}): cannot convert: {e}") from e
