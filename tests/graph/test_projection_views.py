"""``nn.MultiheadAttention``'s out-projection at batch 1 — ``Gemm → Reshape(T,1,D) → Transpose(1,0,2)
→ Add(residual)`` — is one ``ConvAdd`` layer in rknn-toolkit2 2.5.0 (oracle: its transformer
encoder): the Reshape and the Transpose, which moves only a size-1 axis, are views of the Gemm's
bytes and print no row. A Transpose that moves data keeps its layer."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from openrknn.graph import npu_layers
from tests.helpers import cosine, quantized_build, reference_session

T, D = 6, 16


def projection(path, moves_data: bool = False):
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.normal(0, 0.3, (D, D)).astype(np.float32), "w"),
             numpy_helper.from_array(rng.normal(0, 0.1, D).astype(np.float32), "b"),
             numpy_helper.from_array(np.array([T, D], np.int64), "flat"),
             numpy_helper.from_array(np.array([T, 1, D] if not moves_data else [1, T, D], np.int64), "unflat")]
    perm = [1, 0, 2] if not moves_data else [0, 2, 1]
    shape = [1, T, D] if not moves_data else [1, D, T]
    nodes = [helper.make_node("Reshape", ["x", "flat"], ["xf"], name="flatten"),
             helper.make_node("Relu", ["xf"], ["h"], name="inner"),
             helper.make_node("Gemm", ["h", "w", "b"], ["g"], name="out_proj", transB=1),
             helper.make_node("Reshape", ["g", "unflat"], ["g3"], name="unflatten"),
             helper.make_node("Transpose", ["g3"], ["gt"], name="batch_first", perm=perm),
             helper.make_node("Add", ["r", "gt"], ["y"], name="residual")]
    graph = helper.make_graph(nodes, "proj", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, T, D]),
                                              helper.make_tensor_value_info("r", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)
    return path


def _samples(shape, count=4, seed=1):
    rng = np.random.default_rng(seed)
    return [(rng.normal(0, 1, (1, T, D)).astype(np.float32), rng.normal(0, 1, shape).astype(np.float32))
            for _ in range(count)]


def _build(path, samples):
    folder = path.parent
    for i, (x, r) in enumerate(samples):
        np.save(folder / f"x{i}.npy", x)
        np.save(folder / f"r{i}.npy", r)
    (folder / "ds.txt").write_text("".join(f"x{i}.npy r{i}.npy\n" for i in range(len(samples))))
    from rknn.api import RKNN
    rknn = RKNN()
    assert rknn.config(target_platform="rk3588") == 0
    assert rknn.load_onnx(model=str(path)) == 0
    assert rknn.build(do_quantization=True, dataset=str(folder / "ds.txt")) == 0
    return rknn


def test_out_projection_views_and_residual_are_one_convadd_layer(tmp_path):
    path = projection(tmp_path / "m.onnx")
    rknn = _build(path, _samples([1, T, D]))
    records = {r.name: r for r in npu_layers.model_records(rknn._model)}
    proj = records["out_proj"]
    assert (proj.op_name, proj.kind) == ("ConvAdd", "conv+add")
    assert proj.nodes == ("out_proj", "unflatten", "batch_first", "residual") and proj.stored == ("y",)
    x, r = _samples([1, T, D], 5)[4]
    expected = reference_session(path).run(None, {"x": x, "r": r})[0]
    assert rknn.init_runtime() == 0
    assert cosine(rknn.inference(inputs=[x, r], data_format="nchw")[0], expected) > 0.995   # int8, calibrated on 4 samples


def test_a_transpose_that_moves_data_keeps_its_layer(tmp_path):
    rknn = _build(projection(tmp_path / "m.onnx", moves_data=True), _samples([1, D, T]))
    records = {r.name: r for r in npu_layers.model_records(rknn._model)}
    assert records["out_proj"].op_name == "Conv" and records["residual"].op_name == "Add"
