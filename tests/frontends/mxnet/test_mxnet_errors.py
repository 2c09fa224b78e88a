"""Malformed MXNet files: each gives -1 and one E line naming the node/array and the problem."""
from __future__ import annotations

import struct

import numpy as np
import pytest
from mxnet_writer import SymbolWriter, write_params

from openrknn.errors import ModelLoadError, UnsupportedOpError
from openrknn.frontends.mxnet import load_mxnet
from openrknn.frontends.mxnet.ops.tensor import mxnet_reshape
from openrknn.frontends.mxnet.symbol import MxNode
from rknn.api import RKNN


def _files(tmp_path, op="Activation", **attrs):
    s = SymbolWriter()
    conv = s.op("Convolution", "conv0", [s.var("data"), s.var("conv0_weight")], kernel="(3, 3)", num_filter=2,
                no_bias="True")
    act = s.op(op, "act0", [conv], **(attrs or {"act_type": "relu"}))
    symbol = s.write(tmp_path / "m-symbol.json", [act])
    weight = np.ones((2, 3, 3, 3), np.float32)
    params = write_params(tmp_path / "m-0000.params", {"arg:conv0_weight": weight})
    return symbol, params


def facade_error(capsys, symbol, params, sizes=([1, 3, 8, 8],)) -> str:
    rknn = RKNN()
    assert rknn.load_mxnet(str(symbol), str(params), list(sizes)) == -1
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("E ")]
    assert len(lines) == 1
    return lines[0]


def test_good_files_load(tmp_path):
    source = load_mxnet(*(str(p) for p in _files(tmp_path)), [[1, 3, 8, 8]])
    assert [n.op_type for n in source.model.graph.node] == ["Conv", "Relu"]


def test_unsupported_op_names_the_node(tmp_path, capsys):
    symbol, params = _files(tmp_path, "ROIPooling", pooled_size="(7, 7)")
    line = facade_error(capsys, symbol, params)
    assert "MXNet operator 'ROIPooling' (node 'act0') is not supported" in line and "Convolution" in line
    with pytest.raises(UnsupportedOpError):
        load_mxnet(str(symbol), str(params), [[1, 3, 8, 8]])


def test_unsupported_act_type(tmp_path, capsys):
    line = facade_error(capsys, *_files(tmp_path, "Activation", act_type="swishy"))
    assert "Activation(act_type=swishy)" in line and "act0" in line


def test_truncated_params(tmp_path, capsys):
    symbol, params = _files(tmp_path)
    params.write_bytes(params.read_bytes()[:100])
    line = facade_error(capsys, symbol, params)
    assert "m-0000.params is truncated" in line and "array #0 of 1" in line and "216 bytes" in line


def test_wrong_magic(tmp_path, capsys):
    symbol, params = _files(tmp_path)
    params.write_bytes(struct.pack("<QQ", 0x113, 0) + params.read_bytes()[16:])
    assert "is not an MXNet .params file (magic 0x113" in facade_error(capsys, symbol, params)


def test_params_of_another_model(tmp_path, capsys):
    symbol, params = _files(tmp_path)
    write_params(params, {"arg:other_weight": np.ones(3, np.float32)})
    line = facade_error(capsys, symbol, params)
    assert "2 data input(s) ['data', 'conv0_weight']" in line


def test_wrong_number_of_input_sizes(tmp_path, capsys):
    line = facade_error(capsys, *_files(tmp_path), sizes=([1, 3, 8, 8], [1, 3, 8, 8]))
    assert "input_size_list has 2 shape(s)" in line


@pytest.mark.parametrize("text, expected", [
    ("{not json", "is not valid JSON"),
    ('{"nodes": []}', "needs 'nodes' and 'heads'"),
    ('{"nodes": [{"op": "null", "name": "data", "inputs": []}], "heads": [[3, 0, 0]]}', "refers to node 3"),
    ('{"nodes": [{"op": "Flatten", "name": "f", "inputs": [[0, 0, 0]]}], "heads": [[0, 0, 0]]}', "later node"),
])
def test_bad_symbol_json(tmp_path, capsys, text, expected):
    symbol, params = _files(tmp_path)
    symbol.write_text(text)
    line = facade_error(capsys, symbol, params)
    assert expected in line and "m-symbol.json" in line


def test_bad_attribute_value(tmp_path, capsys):
    symbol, params = _files(tmp_path)
    symbol.write_text(symbol.read_text().replace('"(3, 3)"', '"(3, x)"'))
    assert "node 'conv0' (Convolution): attribute kernel='(3, x)'" in facade_error(capsys, symbol, params)


def test_reshape_codes():
    node = MxNode(0, "Reshape", "r")
    assert mxnet_reshape([2, 3, 4], [0, -1], node) == [2, 12]
    assert mxnet_reshape([2, 3, 4, 5], [-3, -2], node) == [6, 4, 5]
    assert mxnet_reshape([2, 3, 4], [-4, 1, 2, -2], node) == [1, 2, 3, 4]
    assert mxnet_reshape([2, 3, 4], [-4, -1, 2, -2], node) == [1, 2, 3, 4]
    with pytest.raises(ModelLoadError, match="does not fit"):
        mxnet_reshape([2, 3], [5, -1], node)
