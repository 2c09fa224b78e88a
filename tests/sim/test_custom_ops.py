"""reg_custom_op: a Python op converts, runs inside the simulator, exports, reloads with registration."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from rknn.api import RKNN
from rknn.api.custom_op import get_node_attr
from rknnlite.api import RKNNLite


class cstScaledSigmoid:
    """y = sigmoid(alpha * x), alpha from the node's attribute (seed 002 §5.5 class form)."""

    op_type = "cstScaledSigmoid"

    def shape_infer(self, node, in_shapes, in_dtypes):
        return [list(in_shapes[0])], [in_dtypes[0]]

    def compute(self, node, inputs):
        alpha = get_node_attr(node, "alpha")
        return [1.0 / (1.0 + np.exp(-alpha * inputs[0]))]


def _model(path):
    w = numpy_helper.from_array(np.random.default_rng(0).normal(0, 0.5, (4, 3, 1, 1)).astype(np.float32), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv"),
             helper.make_node("cstScaledSigmoid", ["c"], ["s"], name="custom", alpha=2.0),
             helper.make_node("Mul", ["s", "c"], ["y"], name="mul")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 4, 4])], [w])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)
    return w


def _reference(x_nchw, w):
    c = np.einsum("nchw,oc->nohw", x_nchw, numpy_helper.to_array(w)[:, :, 0, 0])
    return c / (1 + np.exp(-2.0 * c))


def test_custom_op_end_to_end(tmp_path, capsys):
    w = _model(tmp_path / "m.onnx")
    x = np.random.default_rng(1).normal(size=(1, 4, 4, 3)).astype(np.float32)
    rknn = RKNN()
    assert rknn.config(float_dtype="float32") == 0
    assert rknn.reg_custom_op(cstScaledSigmoid) == 0
    assert rknn.load_onnx(model=str(tmp_path / "m.onnx")) == 0
    assert rknn.build(do_quantization=False) == 0
    assert rknn.export_rknn(str(tmp_path / "m.rknn")) == 0
    assert rknn.init_runtime() == 0
    out = rknn.inference(inputs=[x])[0]
    np.testing.assert_allclose(out, _reference(x.transpose(0, 3, 1, 2), w), rtol=1e-5, atol=1e-6)

    lite = RKNNLite()
    assert lite.load_rknn(str(tmp_path / "m.rknn")) == 0
    assert lite.init_runtime() == -1
    assert "custom op 'cstScaledSigmoid'" in capsys.readouterr().out
    assert lite.reg_custom_op(cstScaledSigmoid) == 0
    assert lite.init_runtime() == 0
    np.testing.assert_array_equal(lite.inference(inputs=[x])[0], out)


def test_reg_custom_op_validates_class(capsys):
    class NoCompute:
        op_type = "cstX"

        def shape_infer(self, node, a, b):
            return a, b

    rknn = RKNN()
    assert rknn.reg_custom_op(NoCompute) == -1
    assert "compute" in capsys.readouterr().out
    assert rknn.register_op("./op.rknnop") == -1
    assert "reg_custom_op" in capsys.readouterr().out


def test_reg_custom_op_accepts_an_instance(tmp_path):
    """The vendor's example calls rknn.reg_custom_op(cstDualResidual()) with an instance."""
    w = _model(tmp_path / "m.onnx")
    x = np.random.default_rng(1).normal(size=(1, 4, 4, 3)).astype(np.float32)
    rknn = RKNN()
    assert rknn.config(float_dtype="float32") == 0
    assert rknn.reg_custom_op(cstScaledSigmoid()) == 0
    assert rknn.load_onnx(model=str(tmp_path / "m.onnx")) == 0
    assert rknn.build(do_quantization=False) == 0
    assert rknn.init_runtime() == 0
    out = rknn.inference(inputs=[x])[0]
    np.testing.assert_allclose(out, _reference(x.transpose(0, 3, 1, 2), w), rtol=1e-5, atol=1e-6)


def test_custom_op_in_quantized_build(tmp_path):
    """Calibration runs the custom op in Python; it stays float while the Conv around it is int8."""
    w = _model(tmp_path / "m.onnx")
    rng = np.random.default_rng(2)
    lines = []
    for i in range(4):
        np.save(tmp_path / f"s{i}.npy", rng.normal(size=(1, 4, 4, 3)).astype(np.float32))
        lines.append(f"s{i}.npy")
    (tmp_path / "dataset.txt").write_text("\n".join(lines) + "\n")
    rknn = RKNN()
    assert rknn.config(target_platform="rk3588") == 0
    assert rknn.reg_custom_op(cstScaledSigmoid) == 0
    assert rknn.load_onnx(model=str(tmp_path / "m.onnx")) == 0
    assert rknn.build(do_quantization=True, dataset=str(tmp_path / "dataset.txt")) == 0
    model = rknn._model
    assert model.quant_params["w"]["dtype"] == "int8" and model.quant_params["x"]["dtype"] == "int8"
    assert "s" not in model.quant_params   # the custom op's output stays float
    assert rknn.export_rknn(str(tmp_path / "q.rknn")) == 0
    assert rknn.init_runtime() == 0
    x = rng.normal(size=(1, 4, 4, 3)).astype(np.float32)
    out = rknn.inference(inputs=[x])[0]
    ref = _reference(x.transpose(0, 3, 1, 2), w)
    cos = float(out.ravel() @ ref.ravel() / (np.linalg.norm(out) * np.linalg.norm(ref)))
    assert cos > 0.99
    np.save(tmp_path / "x.npy", x)
    assert rknn.accuracy_analysis(inputs=[str(tmp_path / "x.npy")], output_dir=str(tmp_path / "snap")) == 0
    assert "cstScaledSigmoid" in (tmp_path / "snap" / "error_analysis.txt").read_text()

    lite = RKNNLite()
    assert lite.reg_custom_op(cstScaledSigmoid) == 0
    assert lite.load_rknn(str(tmp_path / "q.rknn")) == 0
    assert lite.init_runtime() == 0
    np.testing.assert_array_equal(lite.inference(inputs=[x])[0], out)
