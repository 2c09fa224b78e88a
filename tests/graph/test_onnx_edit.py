"""rknn.utils.onnx_edit: formulas of seed 002 §5.13 change I/O dims; values and the dataset follow."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from openrknn.errors import ConfigError
from openrknn.graph.onnx_edit import parse_transform
from rknn.utils import onnx_edit
from tests.helpers import reference_session


def _model(path: Path) -> Path:
    """k_in [32,4,1,64] → Relu → k_cache (same shape) and Neg → other."""
    nodes = [helper.make_node("Relu", ["k_in"], ["k_cache"]), helper.make_node("Neg", ["k_cache"], ["other"])]
    io = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [32, 4, 1, 64]) for n in ("k_in", "k_cache", "other")]
    graph = helper.make_graph(nodes, "g", io[:1], io[1:])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)
    return path


@pytest.mark.parametrize("formula, expected", [
    ("a,b,c,d->1,ad,b,c", [1, 2048, 4, 1]),
    ("a,b,c,d->a,d,b,c", [32, 64, 4, 1]),
    ("a,b,1,d->d,ab,1", [64, 128, 1]),
    ("ab,c,d,qk[a=2,k=8]->aq,cd,1,kb", [16, 4, 1, 128]),
    ("a,b,c,d->a,1,dcb,1,1", [32, 1, 256, 1, 1]),
])
def test_parse_and_forward(formula, expected):
    t = parse_transform(formula, [32, 4, 1, 64], "input 'k_in'")
    assert t.new_shape == expected
    x = np.arange(32 * 4 * 64, dtype=np.float32).reshape(32, 4, 1, 64)
    np.testing.assert_array_equal(np.sort(t.forward(x), axis=None), np.sort(x, axis=None))


def test_split_then_transpose_matches_numpy():
    t = parse_transform("ab,c,d,qk[a=2,k=8]->aq,cd,1,kb", [32, 4, 1, 64], "x")
    x = np.random.default_rng(0).normal(size=(32, 4, 1, 64)).astype(np.float32)
    expected = x.reshape(2, 16, 4, 1, 8, 8).transpose(0, 4, 2, 3, 5, 1).reshape(16, 4, 1, 128)
    np.testing.assert_array_equal(t.forward(x), expected)


@pytest.mark.parametrize("formula, words", [
    ("ab,c,d,e[a=5]->ab,c,d,e", "not an integer"),
    ("a,b,1,d->ad,1", "must appear once"),   # b is missing
    ("a,b,c->a,b,c", "3 dimension(s)"),
    ("a,b,c,2->a,b,c", "must look like"),
    ("a,b,c,d->a,b,c,d,a", "must appear once"),
    ("a,1,c,d->a,c,d", "stands for a dimension of 4"),
])
def test_bad_formulas_are_named(formula, words):
    with pytest.raises(ConfigError, match=words.replace("(", r"\(").replace(")", r"\)")):
        parse_transform(formula, [32, 4, 1, 64], "input 'k_in'")


def test_edited_model_computes_the_same_values(tmp_path):
    src = _model(tmp_path / "m.onnx")
    out = tmp_path / "edited.onnx"
    assert onnx_edit(model=str(src), export_path=str(out), inputs_transform={"k_in": "a,b,c,d->1,ad,b,c"},
                     outputs_transform={"k_cache": "a,b,c,d->1,ab,c,d"}) == 0
    edited = onnx.load(out)
    dims = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim] for v in list(edited.graph.input) +
            list(edited.graph.output)}
    assert dims == {"k_in": [1, 2048, 4, 1], "k_cache": [1, 128, 1, 64], "other": [32, 4, 1, 64]}
    x = np.random.default_rng(1).normal(size=(32, 4, 1, 64)).astype(np.float32)
    k_cache, other = reference_session(str(src)).run(None, {"k_in": x})
    fed = parse_transform("a,b,c,d->1,ad,b,c", [32, 4, 1, 64], "k_in").forward(x)
    new_k_cache, new_other = reference_session(str(out)).run(None, {"k_in": fed})
    np.testing.assert_array_equal(new_k_cache, parse_transform("a,b,c,d->1,ab,c,d", [32, 4, 1, 64], "o").forward(k_cache))
    np.testing.assert_array_equal(new_other, other)


def test_dataset_is_transformed_beside_export_path(tmp_path):
    src = _model(tmp_path / "m.onnx")
    x = np.random.default_rng(2).normal(size=(32, 4, 1, 64)).astype(np.float32)
    np.save(tmp_path / "k.npy", x)
    (tmp_path / "dataset.txt").write_text("k.npy\n")
    (tmp_path / "out").mkdir()
    assert onnx_edit(model=str(src), export_path=str(tmp_path / "out" / "e.onnx"),
                     inputs_transform={"k_in": "a,b,c,d->1,ad,b,c"}, dataset=str(tmp_path / "dataset.txt")) == 0
    # rknn-toolkit2's names: dataset_for_<export stem>.txt and dataset_for_<export stem>/<original name>,
    # listed relative to the new file (its example scripts build with './dataset_for_<stem>.txt')
    new_line = (tmp_path / "out" / "dataset_for_e.txt").read_text().split()
    assert new_line == ["./dataset_for_e/k.npy"]
    np.testing.assert_array_equal(np.load(tmp_path / "out" / "dataset_for_e" / "k.npy"),
                                  x.transpose(0, 3, 1, 2).reshape(1, 2048, 4, 1))
    assert not (tmp_path / "out" / "e_dataset.txt").exists()


def test_vendor_script_builds_with_the_transformed_dataset(tmp_path, monkeypatch):
    """rknn-toolkit2's onnx_edit example: edit, then build with './dataset_for_<edited stem>.txt'."""
    from rknn.api import RKNN
    src = _model(tmp_path / "m.onnx")
    np.save(tmp_path / "k.npy", np.random.default_rng(3).normal(size=(32, 4, 1, 64)).astype(np.float32))
    (tmp_path / "dataset.txt").write_text("./k.npy\n")
    monkeypatch.chdir(tmp_path)
    assert onnx_edit(model="./m.onnx", export_path="./m_edited.onnx", inputs_transform={"k_in": "a,b,c,d->1,ad,b,c"},
                     dataset="./dataset.txt") == 0
    rknn = RKNN()
    assert rknn.config(target_platform="rk3588") == 0
    assert rknn.load_onnx(model="./m_edited.onnx") == 0
    assert rknn.build(do_quantization=True, dataset="./dataset_for_m_edited.txt") == 0


def test_errors_return_minus_one_with_a_message(tmp_path, capsys):
    src = _model(tmp_path / "m.onnx")
    assert onnx_edit(model=str(tmp_path / "missing.onnx"), export_path=str(tmp_path / "e.onnx")) == -1
    assert onnx_edit(model=str(src), export_path=str(tmp_path / "e.onnx"), inputs_transform={"nope": "a->a"}) == -1
    errors = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("E")]
    assert "'" + str(tmp_path / "missing.onnx") + "' does not exist" in errors[0]
    assert "'nope', not an input" in errors[1]
    assert not (tmp_path / "e.onnx").exists()
