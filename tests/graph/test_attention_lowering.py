"""Attention per chip, as rknn-toolkit2 2.5.0 prints it (PP-OCRv4 rec in the oracle corpus): on
rk3588 ``Reshape, Split, exSDPAttention, Reshape``; rk3566 does not fuse the products (chip data
``lowering.fused_attention: false``): ``Reshape, Split, Transpose, exMatMul, exSoftmax13 INT8,
exMatMul, Reshape``."""
from __future__ import annotations

import collections

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from openrknn.chips import get_chip
from openrknn.profile import estimate_perf
from tests.helpers import cosine, quantized_build, reference_session

T, HEADS, D = 6, 2, 4


def svtr_attention(path):
    """x → MatMul(qkv) → Reshape → Transpose → 3 Slices + Squeeze → q·scale · kᵀ → Softmax → ·v →
    Transpose → Reshape → MatMul(proj) (paddle2onnx's SVTR form)."""
    rng = np.random.default_rng(0)
    consts = [numpy_helper.from_array(rng.normal(0, 0.3, (HEADS * D, 3 * HEADS * D)).astype(np.float32), "qkv_w"),
              numpy_helper.from_array(np.array([1, T, 3, HEADS, D], np.int64), "split_shape"),
              numpy_helper.from_array(np.array([1, T, HEADS * D], np.int64), "merge_shape"),
              numpy_helper.from_array(np.array(0.5, np.float32), "scale"),
              numpy_helper.from_array(rng.normal(0, 0.3, (HEADS * D, HEADS * D)).astype(np.float32), "proj_w")]
    for k in range(3):
        consts += [numpy_helper.from_array(np.array([k], np.int64), f"s{k}"),
                   numpy_helper.from_array(np.array([k + 1], np.int64), f"e{k}"),
                   numpy_helper.from_array(np.array([0], np.int64), f"ax{k}")]
    nodes = [helper.make_node("MatMul", ["x", "qkv_w"], ["qkv"], name="qkv"),
             helper.make_node("Reshape", ["qkv", "split_shape"], ["r"], name="heads"),
             helper.make_node("Transpose", ["r"], ["tr"], name="heads_t", perm=[2, 0, 3, 1, 4])]
    for k, name in enumerate("qkv"):
        nodes += [helper.make_node("Slice", ["tr", f"s{k}", f"e{k}", f"ax{k}"], [f"{name}5"], name=f"slice_{name}"),
                  helper.make_node("Squeeze", [f"{name}5", f"ax{k}"], [f"{name}_"], name=f"squeeze_{name}")]
    nodes += [helper.make_node("Mul", ["q_", "scale"], ["qs"], name="q_scale"),
              helper.make_node("Transpose", ["k_"], ["kt"], name="k_t", perm=[0, 1, 3, 2]),
              helper.make_node("MatMul", ["qs", "kt"], ["scores"], name="qk"),
              helper.make_node("Softmax", ["scores"], ["p"], name="softmax", axis=-1),
              helper.make_node("MatMul", ["p", "v_"], ["o"], name="pv"),
              helper.make_node("Transpose", ["o"], ["ot"], name="merge_t", perm=[0, 2, 1, 3]),
              helper.make_node("Reshape", ["ot", "merge_shape"], ["merged"], name="merge"),
              helper.make_node("MatMul", ["merged", "proj_w"], ["y"], name="proj")]
    graph = helper.make_graph(nodes, "attn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, T, HEADS * D])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, T, HEADS * D])], consts)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)
    return path


def _samples(count=4):
    rng = np.random.default_rng(1)
    return [rng.normal(0, 1, (1, T, HEADS * D)).astype(np.float32) for _ in range(count)]


@pytest.mark.parametrize("platform, expected", [
    ("rk3588", ["Conv", "Reshape", "Split", "exSDPAttention", "Reshape", "Conv"]),
    ("rk3566", ["Conv", "Reshape", "Split", "exMatMul", "Transpose", "exMatMul", "exSoftmax13", "Reshape", "Conv"])])
def test_attention_layers_per_chip(tmp_path, platform, expected):
    path = svtr_attention(tmp_path / "m.onnx")
    rknn = quantized_build(path, _samples(), target_platform=platform)
    rows = estimate_perf(rknn._model, get_chip(platform)).layers[1:-1]
    assert collections.Counter(r.op_type for r in rows) == collections.Counter(expected)
    assert all(r.data_type == "int8" for r in rows)   # exSoftmax13 INT8 on rk3566, as printed
    x = _samples(5)[4]
    assert rknn.init_runtime() == 0
    # rknn-toolkit2 2.5.0's simulator on this model and input: 0.9859 (rk3566), 0.9860 (rk3588)
    assert cosine(rknn.inference(inputs=[x])[0], reference_session(path).run(None, {"x": x})[0]) > 0.98
