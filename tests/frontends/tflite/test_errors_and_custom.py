"""Bad files give a clear message (and -1 through the facade); CUSTOM ops need a registered class."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("tflite")
pytest.importorskip("ai_edge_litert")

from flatbuffers import flexbuffers  # noqa: E402

from openrknn.errors import ModelLoadError, UnsupportedOpError  # noqa: E402
from openrknn.frontends.tflite import load_tflite  # noqa: E402
from openrknn.graph.custom_ops import CUSTOM_DOMAIN, CustomOpRegistry  # noqa: E402
from rknn.api import RKNN  # noqa: E402
from rknn.api.custom_op import get_node_attr  # noqa: E402
from tflite_writer import ModelWriter, options  # noqa: E402


def relu_model(path):
    w = ModelWriter()
    x, y = w.tensor("x", [1, 4, 4, 3]), w.tensor("y", [1, 4, 4, 3])
    w.op("RELU", [x], [y])
    return w.save(path, [x], [y])


def test_missing_file(tmp_path):
    with pytest.raises(ModelLoadError, match="does not exist"):
        load_tflite(str(tmp_path / "absent.tflite"))


def test_wrong_format_and_truncated_files_through_facade(tmp_path, capsys, conv_model):
    good = relu_model(tmp_path / "good.tflite").read_bytes()
    (tmp_path / "half.tflite").write_bytes(good[: len(good) // 2])
    for name, expected in [(str(conv_model), "not a TFLite model"), (str(tmp_path / "half.tflite"), "truncated")]:
        with pytest.raises(ModelLoadError, match=expected):
            load_tflite(name)
        rknn = RKNN()
        assert rknn.load_tflite(name) == -1
        out = capsys.readouterr().out
        assert "E " in out and expected in out


class cstScaledTanh:
    """y = tanh(alpha · x) + offset, alpha and offset read from the node's FlexBuffer attributes."""

    op_type = "cstScaledTanh"

    def shape_infer(self, node, in_shapes, in_dtypes):
        return [list(in_shapes[0])], [in_dtypes[0]]

    def compute(self, node, inputs):
        return [np.tanh(get_node_attr(node, "alpha") * inputs[0]) + get_node_attr(node, "offset")]


def custom_model(path):
    w = ModelWriter()
    x, c, t, y = (w.tensor("x", [1, 4, 4, 2]), w.tensor("c", [1, 4, 4, 3]), w.tensor("t", [1, 4, 4, 3]),
                  w.tensor("y", [1, 4, 4, 3]))
    kernel = w.const("w", np.random.default_rng(0).normal(0, 0.5, [3, 1, 1, 2]).astype(np.float32))
    w.op("CONV_2D", [x, kernel, -1], [c], options("Conv2DOptions", padding=0, strideW=1, strideH=1,
                                                  dilationWFactor=1, dilationHFactor=1))
    w.op("CUSTOM", [c], [t], custom_code="cstScaledTanh",
         custom_options=bytes(flexbuffers.Dumps({"alpha": 2.0, "offset": 0.25})))
    w.op("RELU", [t], [y])
    return w.save(path, [x], [y]), kernel


def test_custom_op_refused_then_registered(tmp_path, capsys):
    path, _ = custom_model(tmp_path / "custom.tflite")
    with pytest.raises(UnsupportedOpError, match="'cstScaledTanh'.*reg_custom_op"):
        load_tflite(str(path))
    registry = CustomOpRegistry()
    registry.register(cstScaledTanh)
    node = next(n for n in load_tflite(str(path), custom_ops=registry).model.graph.node if n.op_type == "cstScaledTanh")
    assert node.domain == CUSTOM_DOMAIN and get_node_attr(node, "alpha") == 2.0

    x = np.random.default_rng(1).normal(size=(1, 4, 4, 2)).astype(np.float32)
    rknn = RKNN()
    assert rknn.config(float_dtype="float32") == 0
    assert rknn.reg_custom_op(cstScaledTanh) == 0
    assert rknn.load_tflite(str(path)) == 0
    assert rknn.build(do_quantization=False) == 0
    assert rknn.init_runtime() == 0
    out = rknn.inference(inputs=[x])[0]
    weights = np.random.default_rng(0).normal(0, 0.5, [3, 1, 1, 2]).astype(np.float32)
    conv = np.einsum("nhwc,oc->nhwo", x, weights[:, 0, 0])
    np.testing.assert_allclose(out, np.maximum(np.tanh(2.0 * conv) + 0.25, 0), rtol=1e-5, atol=1e-6)


def test_missing_parser_names_the_extra(tmp_path, monkeypatch):
    monkeypatch.setitem(__import__("sys").modules, "tflite", None)
    with pytest.raises(ModelLoadError, match=r"pip install 'openrknn\[tflite\]'"):
        load_tflite(str(relu_model(tmp_path / "m.tflite")))
