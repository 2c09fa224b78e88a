"""Fold an inference BatchNormalization into the Conv / ConvTranspose / Gemm that feeds it.

    y = γ · (x − μ) / √(σ² + ε) + β  with  x = W·a + b
      = (W · k)·a + (b − μ) · k + β,    k = γ / √(σ² + ε)   (k scales each output channel)

The NPU executes the pair as one convolution; folding here makes the simulator do the same.
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import numpy_helper

from openrknn.graph.passes.base import (PassResult, attribute, consumers, fold_into_producer, graph_output_names,
                                        initializers, replace_initializer)


def fold_batchnorm(model: onnx.ModelProto) -> PassResult:
    """Fold every BatchNormalization whose producer is a single-use Conv/ConvTranspose/Gemm with constant weights."""
    graph = model.graph
    modified = False
    for bn in [n for n in graph.node if n.op_type == "BatchNormalization" and n.domain in ("", "ai.onnx")]:
        if _fold_one(graph, bn):
            modified = True
    return PassResult(model, modified)


def _fold_one(graph: onnx.GraphProto, bn: onnx.NodeProto) -> bool:
    if len([o for o in bn.output if o]) != 1 or attribute(bn, "training_mode", 0):
        return False
    producer = next((n for n in graph.node if bn.input[0] in n.output), None)
    if producer is None or producer.op_type not in ("Conv", "ConvTranspose", "Gemm"):
        return False
    if len(consumers(graph).get(bn.input[0], [])) != 1 or bn.input[0] in graph_output_names(graph):
        return False
    inits = initializers(graph)
    params = [inits.get(name) for name in bn.input[1:5]]
    weight = inits.get(producer.input[1])
    if weight is None or any(p is None for p in params):
        return False
    scale, shift, mean, var = (numpy_helper.to_array(p).astype(np.float64) for p in params)
    k = scale / np.sqrt(var + attribute(bn, "epsilon", 1e-5))
    w = numpy_helper.to_array(weight).astype(np.float64)
    folded_w = _scale_output_channels(producer, w, k)
    if folded_w is None:
        return False
    bias_name = producer.input[2] if len(producer.input) > 2 and producer.input[2] else None
    if bias_name is not None and bias_name not in inits:
        return False
    bias = numpy_helper.to_array(inits[bias_name]).astype(np.float64) if bias_name else np.zeros_like(k)
    if bias.shape != k.shape:
        return False
    folded_b = (bias - mean) * k + shift
    replace_initializer(graph, producer, 1, producer.name + "_bnfold_w", folded_w.astype(np.float32))
    fold_into_producer(graph, producer, bn, folded_b, producer.name + "_bnfold_b")
    return True


def _scale_output_channels(producer: onnx.NodeProto, w: np.ndarray, k: np.ndarray) -> np.ndarray | None:
    if producer.op_type == "Conv" and w.shape[0] == k.size:
        return w * k.reshape((-1,) + (1,) * (w.ndim - 1))
    if producer.op_type == "ConvTranspose":
        group = attribute(producer, "group", 1)
        cin, cout_per_group = w.shape[0], w.shape[1]
        if cout_per_group * group != k.size:
            return None
        grouped = w.reshape((group, cin // group, cout_per_group) + w.shape[2:])
        factors = k.reshape((group, 1, cout_per_group) + (1,) * (w.ndim - 2))
        return (grouped * factors).reshape(w.shape)
    if producer.op_type == "Gemm" and w.ndim == 2 and attribute(producer, "alpha", 1.0) == 1.0 \
            and attribute(producer, "beta", 1.0) == 1.0:
        if attribute(producer, "transB", 0):
            return w * k[:, None] if w.shape[0] == k.size else None
        return w * k[None, :] if w.shape[1] == k.size else None
    return None
