"""rknn_register_custom_ops: C callbacks run inside the model with the documented tensors (seed 002 §5.5.4)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.capi.capi_tools import build_library, compile_program, run_program


class cstScaledRelu:
    """y = alpha * max(x, 0): the Python twin of the C operator (float32, bit-exact in both)."""

    op_type = "cstScaledRelu"

    def shape_infer(self, node, in_shapes, in_dtypes):
        return [list(in_shapes[0])], [in_dtypes[0]]

    def compute(self, node, inputs):
        from rknn.api.custom_op import get_node_attr
        return [np.float32(get_node_attr(node, "alpha")) * np.maximum(inputs[0], np.float32(0))]


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    from rknn.api import RKNN
    folder = tmp_path_factory.mktemp("capi_custom")
    prefix = folder / "prefix"
    build_library(prefix)
    program = compile_program(prefix, "custom_op.c", folder / "custom_op", extra=["-lm"])
    w = numpy_helper.from_array(np.random.default_rng(0).normal(0, 0.5, (4, 3, 1, 1)).astype(np.float32), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv"),
             helper.make_node("cstScaledRelu", ["c"], ["s"], name="custom", alpha=0.75),
             helper.make_node("Mul", ["s", "c"], ["y"], name="mul")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])], [w])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), folder / "m.onnx")
    rknn = RKNN()
    assert rknn.config(target_platform="rk3588", float_dtype="float32") == 0
    assert rknn.reg_custom_op(cstScaledRelu) == 0
    assert rknn.load_onnx(model=str(folder / "m.onnx")) == 0
    assert rknn.build(do_quantization=False) == 0
    assert rknn.export_rknn(str(folder / "m.rknn")) == 0
    return program, folder / "m.rknn"


def test_c_custom_op_equals_the_python_op_in_rknnlite(setup, tmp_path):
    from rknnlite.api import RKNNLite
    program, model = setup
    x = np.random.default_rng(1).normal(size=(1, 8, 8, 3)).astype(np.float32)
    x.tofile(tmp_path / "x.bin")
    result = run_program(program, model, tmp_path / "x.bin", tmp_path / "y.bin")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "init: 1 input(s) [1,4,8,8] fmt=0 type=0, 1 output(s)" in result.stdout   # NCHW float32
    assert "destroy: compute ran 2 time(s), prepare 2" in result.stdout
    lite = RKNNLite()
    assert lite.load_rknn(str(model)) == 0
    assert lite.reg_custom_op(cstScaledRelu) == 0
    assert lite.init_runtime() == 0
    expected = lite.inference(inputs=[x])[0]
    np.testing.assert_array_equal(np.fromfile(tmp_path / "y.bin", np.float32).reshape(expected.shape), expected)


def test_gpu_ops_are_refused(setup, tmp_path):
    program, model = setup
    np.zeros((1, 8, 8, 3), np.float32).tofile(tmp_path / "x.bin")
    result = run_program(program, model, tmp_path / "x.bin", tmp_path / "y.bin", "gpu")
    assert result.returncode == 3 and "ret = -5" in result.stdout
    assert "CPU operators (RKNN_TARGET_TYPE_CPU) only" in result.stderr
