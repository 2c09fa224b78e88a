"""Evaluate at build time every node whose inputs are all constants (and Shape of static tensors).

The NPU never sees these nodes: their results become initializers. Values are computed with
onnx's reference evaluator, one node at a time, so every standard op folds the way the ONNX
specification defines it.
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from openrknn.graph.passes.base import PassResult, subgraph_reads

# Ops whose value is not a function of their inputs, or that must stay in the graph.
_NEVER_FOLD = frozenset({"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike",
                         "Multinomial", "Bernoulli", "If", "Loop", "Scan"})
# A folded tensor this much larger than its inputs (e.g. Expand/Tile/ConstantOfShape of a big
# shape) would bloat the model file; such nodes stay and run at inference instead.
_MAX_GROWTH_ELEMENTS = 1 << 20


def fold_constants(model: onnx.ModelProto) -> PassResult:
    """Replace constant subexpressions by initializers (``Constant`` nodes included)."""
    graph = model.graph
    opset = _default_opset(model)
    values = {init.name: numpy_helper.to_array(init) for init in graph.initializer}
    graph_inputs = {v.name for v in graph.input} - set(values)
    shapes = static_shapes(model)
    # Values read inside If/Loop bodies stay computed: subgraph shape inference in onnxruntime
    # relies on the outer value's declared type, which a folded initializer does not carry.
    outputs = {o.name for o in graph.output} | set().union(*(subgraph_reads(n) for n in graph.node))
    kept: list[onnx.NodeProto] = []
    new_inits: list[onnx.TensorProto] = []
    for node in graph.node:
        folded = None if outputs.intersection(node.output) else _try_fold(node, values, graph_inputs,
                                                                           shapes, opset)
        if folded is None:
            kept.append(node)
            continue
        for name, value in zip(node.output, folded):
            if name:
                values[name] = value
                new_inits.append(numpy_helper.from_array(np.asarray(value), name))
    if len(kept) == len(graph.node):
        return PassResult(model, False)
    del graph.node[:]
    graph.node.extend(kept)
    graph.initializer.extend(new_inits)
    return PassResult(model, True)


def _try_fold(node: onnx.NodeProto, values: dict[str, np.ndarray], graph_inputs: set[str],
              shapes: dict[str, list[int]], opset: int) -> list[np.ndarray] | None:
    if node.domain not in ("", "ai.onnx") or node.op_type in _NEVER_FOLD:
        return None
    if node.op_type == "Shape" and node.input[0] in shapes and node.input[0] not in values:
        return [_shape_value(node, shapes[node.input[0]])]
    if node.op_type == "Size" and node.input[0] in shapes and node.input[0] not in values:
        return [np.array(int(np.prod(shapes[node.input[0]])), dtype=np.int64)]
    inputs = [i for i in node.input if i]
    if any(i not in values for i in inputs) or any(i in graph_inputs for i in inputs):
        return None
    if any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute):
        return None
    try:
        result = _evaluate(node, values, opset)
    except Exception:   # an op the reference evaluator cannot run: leave it to the runtime
        return None
    in_size = sum(values[i].size for i in inputs)
    if sum(np.asarray(r).size for r in result) > max(_MAX_GROWTH_ELEMENTS, 16 * in_size):
        return None
    return [np.asarray(r) for r in result]


def _evaluate(node: onnx.NodeProto, values: dict[str, np.ndarray], opset: int) -> list[np.ndarray]:
    feeds = {name: values[name] for name in node.input if name}
    graph = helper.make_graph(
        [node], "fold",
        [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape) for n, v in feeds.items()],
        [helper.make_empty_tensor_value_info(o) for o in node.output if o])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    return list(ReferenceEvaluator(model).run(None, feeds))


def _shape_value(node: onnx.NodeProto, shape: list[int]) -> np.ndarray:
    start = next((a.i for a in node.attribute if a.name == "start"), 0)
    end = next((a.i for a in node.attribute if a.name == "end"), None)
    return np.array(shape[start:end], dtype=np.int64)


def static_shapes(model: onnx.ModelProto) -> dict[str, list[int]]:
    """Tensors whose every dimension is a known number after shape inference."""
    try:
        inferred = onnx.shape_inference.infer_shapes(model, data_prop=True)
    except Exception:   # a graph shape inference cannot handle: fold values only
        inferred = model
    shapes = {}
    for value in list(inferred.graph.value_info) + list(inferred.graph.input) + list(inferred.graph.output):
        tensor_type = value.type.tensor_type
        if not tensor_type.HasField("shape"):
            continue
        dims = tensor_type.shape.dim
        if all(d.HasField("dim_value") for d in dims):
            shapes[value.name] = [d.dim_value for d in dims]
    return shapes


def _default_opset(model: onnx.ModelProto) -> int:
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 17)
