"""Opening a hostile .rknn: no file access, bounded decompression, a named bad header field,
I/O checked against the graph, sizes bounded — each refused with a clear E line and -1."""
from __future__ import annotations

import tracemalloc
import zlib
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from openrknn.errors import ModelFileError
from openrknn.model_file import GRAPH_SECTION, load_model
from openrknn.model_file.container import decode, encode
from rknn.api import RKNN
from tests.helpers import exported_conv_model, make_conv_model, rewrite_rknn


@pytest.fixture
def exported(tmp_path) -> Path:
    return exported_conv_model(tmp_path, "rk3588")


def load_error(path: Path, capsys) -> str:
    rknn = RKNN()
    capsys.readouterr()
    assert rknn.load_rknn(str(path)) == -1
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("E")]
    assert len(lines) == 1 and "internal error" not in lines[0], lines
    return lines[0]


def test_external_data_is_refused(exported, tmp_path, capsys, monkeypatch):
    secret = np.full(8 * 3 * 3 * 3, 42.0, np.float32)
    (tmp_path / "secret.bin").write_bytes(secret.tobytes())
    monkeypatch.chdir(tmp_path)

    def point_weight_at_secret(model):
        weight = next(i for i in model.graph.initializer if i.dims and len(i.dims) == 4)
        weight.ClearField("raw_data")
        weight.ClearField("float_data")
        weight.data_location = TensorProto.EXTERNAL
        weight.external_data.add(key="location", value="secret.bin")
    message = load_error(rewrite_rknn(exported, graph=point_weight_at_secret), capsys)
    assert "external data" in message and "secret.bin" in message


def test_decompression_is_bounded_by_the_declared_size(exported, capsys):
    bomb = zlib.compress(b"\0" * (64 << 20), 9)          # 64 MiB of zeros in ~64 KiB

    def declare_small(header):
        header.update(graph_compression="zlib", graph_size=1000)
    forged = rewrite_rknn(exported, raw_section=bomb)
    forged = rewrite_rknn(forged, header=declare_small)
    tracemalloc.start()
    message = load_error(forged, capsys)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert "inflates beyond its declared size" in message
    # stopped near the declared 1000 bytes, not after the 64 MiB (the time it takes: bench/loader_limits.py)
    assert peak < 16 << 20, f"{peak / 2**20:.0f} MiB"


def test_decompression_without_declared_size_stops_at_the_limit(exported, capsys, monkeypatch):
    monkeypatch.setenv("OPENRKNN_MAX_GRAPH_BYTES", str(1 << 20))
    forged = rewrite_rknn(rewrite_rknn(exported, raw_section=zlib.compress(b"\0" * (16 << 20), 9)),
                     header=lambda h: h.update(graph_compression="zlib"))
    assert "inflates beyond" in load_error(forged, capsys)


def test_a_bomb_declaring_its_inflated_size_is_refused_before_inflating(exported, capsys):
    """64 MiB of zeros in ~64 KiB that honestly declares 64 MiB: refused at once, nothing inflated."""
    bomb = zlib.compress(b"\0" * (64 << 20), 9)
    forged = rewrite_rknn(rewrite_rknn(exported, raw_section=bomb),
                     header=lambda h: h.update(graph_compression="zlib", graph_size=64 << 20))
    rknn = RKNN()
    capsys.readouterr()
    tracemalloc.start()
    assert rknn.load_rknn(str(forged)) == -1
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    message = [line for line in capsys.readouterr().out.splitlines() if line.startswith("E")][0]
    assert "OPENRKNN_MAX_GRAPH_RATIO" in message and "forged.rknn" in message
    assert peak < 16 << 20, f"{peak / 2**20:.0f} MiB"   # the file itself plus parsing, no 64 MiB graph


def test_inflating_runs_in_bounded_chunks(exported, capsys, monkeypatch):
    """Within the ratio the running limit stops at the declared size; memory stays near it."""
    monkeypatch.setenv("OPENRKNN_MAX_GRAPH_RATIO", "2000")
    bomb = zlib.compress(b"\0" * (256 << 20), 9)
    forged = rewrite_rknn(rewrite_rknn(exported, raw_section=bomb),
                     header=lambda h: h.update(graph_compression="zlib", graph_size=8 << 20))
    tracemalloc.start()
    message = load_error(forged, capsys)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert "inflates beyond its declared size" in message
    assert peak < 24 << 20, f"{peak / 2**20:.0f} MiB"


def test_compressed_export_round_trips(tmp_path):
    rknn = RKNN()
    assert rknn.config(compress_weight=True) == 0
    assert rknn.load_onnx(str(make_conv_model(tmp_path / "conv.onnx"))) == 0
    assert rknn.build(do_quantization=False) == 0
    assert rknn.export_rknn(str(tmp_path / "c.rknn")) == 0
    header = decode((tmp_path / "c.rknn").read_bytes()).header
    assert header["graph_compression"] == "zlib" and header["graph_size"] > 0
    assert load_model(str(tmp_path / "c.rknn")).inputs[0].shape == [1, 3, 16, 16]


@pytest.mark.parametrize("field, change", [
    ("inputs[0].shape", lambda h: h["inputs"][0].update(shape="1,3,16,16")),
    ("inputs[0].shape[2]", lambda h: h["inputs"][0].update(shape=[1, 3, 16.5, 16])),
    ("inputs[0].name", lambda h: h["inputs"][0].update(name=7)),
    ("outputs", lambda h: h.update(outputs={"a": 1})),
    ("inputs[0]", lambda h: h["inputs"].__setitem__(0, None)),
    ("preprocess[0]", lambda h: h.update(preprocess=[{"input_name": "x", "evil": 1}])),
    ("preprocess[0].mean[0]", lambda h: h.update(preprocess=[{"input_name": "x", "mean": ["a"]}])),
    ("rknn_batch_size", lambda h: h.update(rknn_batch_size="2")),
    ("rknn_batch_size", lambda h: h.update(rknn_batch_size=0)),
    ("float_dtype", lambda h: h.update(float_dtype=None)),
    ("quant_params['w'].scale[0]", lambda h: h.update(quant_params={"w": {"scale": [None]}})),
    ("tensor_dtypes", lambda h: h.update(tensor_dtypes=[])),
    ("metadata", lambda h: h.update(metadata="x")),
    ("graph_compression", lambda h: h.update(graph_compression="lzma")),
    ("inputs[0].dtype", lambda h: h["inputs"][0].update(dtype="object")),
    ("inputs[0].layout", lambda h: h["inputs"][0].update(layout=["NCHW"])),
])
def test_malformed_header_field_is_named(exported, capsys, field, change):
    message = load_error(rewrite_rknn(exported, header=change), capsys)
    assert f"header field '{field}'" in message


@pytest.mark.parametrize("change, words", [
    (lambda h: h["inputs"][0].update(shape=[1, 3, 16, 17]), "dimension 3 is 16 in the graph"),
    (lambda h: h["inputs"][0].update(shape=[1, 3, 16]), "4 dimensions in the graph"),
    (lambda h: h["outputs"][0].update(name="not_there"), "no such output"),
])
def test_header_io_must_match_the_graph(exported, capsys, change, words):
    message = load_error(rewrite_rknn(exported, header=change), capsys)
    assert words in message


def test_bad_section_table_is_named(exported):
    import hashlib
    import json
    import struct
    container = decode(exported.read_bytes())
    graph = container.sections[GRAPH_SECTION]
    for entry, words in (({"offset": "0"}, r"header field 'sections\[0\]\.offset'"),
                         ({"length": len(graph) + 100}, "beyond the end of the file")):
        header = dict(container.header, sections=[dict(container.header["sections"][0], **entry)])
        blob = json.dumps(header).encode()
        body = struct.pack("<8sHHI", b"OPENRKNN", 1, 0, len(blob)) + blob + graph
        with pytest.raises(ModelFileError, match=words):
            decode(body + hashlib.sha256(body).digest())


def _input_model(path: Path, shape, op: str = "Relu") -> Path:
    """x → Relu → y, or x → Reshape([1, -1]) → ReduceSum → y (runs on an empty x), or x → Reshape([1, 12])."""
    inits = [numpy_helper.from_array(np.array([1, 12] if op == "Reshape" else [1, -1], np.int64), "to")]
    if op == "Relu":
        nodes, out = [helper.make_node("Relu", ["x"], ["y"])], shape
    elif op == "Reshape":
        nodes, out = [helper.make_node("Reshape", ["x", "to"], ["y"])], [1, 12]
    else:
        nodes = [helper.make_node("Reshape", ["x", "to"], ["r"]), helper.make_node("ReduceSum", ["r"], ["y"])]
        out = [1, 1]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, out)], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)
    return path


@pytest.mark.parametrize("shape, op, words", [([1, 0, 4], "Reshape", "cannot run on an empty tensor"),
                                              ([1, 3, 100000, 100000], "Relu", "OPENRKNN_MAX_INPUT_ELEMENTS")])
def test_zero_size_and_absurd_inputs_are_refused_at_build(tmp_path, capsys, shape, op, words):
    rknn = RKNN()
    assert rknn.load_onnx(str(_input_model(tmp_path / "m.onnx", shape, op))) == 0
    capsys.readouterr()
    assert rknn.build(do_quantization=False) == -1
    message = capsys.readouterr().out
    assert words in message and "'x'" in message


def test_empty_input_that_the_graph_handles_is_valid_onnx(tmp_path):
    """A reduction over an empty set is 0 (ONNX semantics): such a model builds, exports and reloads."""
    rknn = RKNN()
    assert rknn.config(float_dtype="float32") == 0
    assert rknn.load_onnx(str(_input_model(tmp_path / "m.onnx", [1, 0, 4], "ReduceSum"))) == 0
    assert rknn.build(do_quantization=False) == 0
    assert rknn.export_rknn(str(tmp_path / "m.rknn")) == 0
    assert load_model(str(tmp_path / "m.rknn")).inputs[0].shape == [1, 0, 4]


def test_zero_size_input_in_rknn_is_refused_at_load(exported, capsys):
    def zero(model):
        model.graph.input[0].type.tensor_type.shape.dim[2].dim_value = 0
    forged = rewrite_rknn(exported, header=lambda h: h["inputs"][0].update(shape=[1, 3, 0, 16]), graph=zero)
    assert "zero-size dimension [1, 3, 0, 16] and the model cannot run on an empty tensor" in load_error(forged, capsys)


def test_absurd_input_in_rknn_is_refused_at_load(exported, capsys):
    def huge(model):
        for dim, size in zip(model.graph.input[0].type.tensor_type.shape.dim[2:], (100000, 100000)):
            dim.dim_value = size
    forged = rewrite_rknn(exported, header=lambda h: h["inputs"][0].update(shape=[1, 3, 100000, 100000]), graph=huge)
    assert "OPENRKNN_MAX_INPUT_ELEMENTS" in load_error(forged, capsys)


@pytest.mark.integration
@pytest.mark.parametrize("config, load", [
    ({}, {"inputs": ["x"], "input_size_list": [[1, 3, 48, 192]]}),
    ({"dynamic_input": [[[1, 3, 48, 192]], [[1, 3, 48, 320]]]}, {}),
])
def test_real_model_with_dynamic_dims_builds_exports_and_loads(shared_data, tmp_path, config, load):
    """PP-OCR cls: ONNX dims of -1 and '?' reach the header as -1 (output batch, dynamic_input); loading must
    accept them. With every input size fixed (input_size_list), the output's -1 is resolved to its size."""
    rknn = RKNN()
    assert rknn.config(target_platform="rk3588", **config) == 0
    assert rknn.load_onnx(str(shared_data / "models" / "onnx" / "ch_ppocr_mobile_v2.0_cls_infer.onnx"), **load) == 0
    assert rknn.build(do_quantization=False) == 0
    assert rknn.export_rknn(str(tmp_path / "cls.rknn")) == 0
    expected = [1, 2] if "input_size_list" in load else [-1, 2]
    assert decode((tmp_path / "cls.rknn").read_bytes()).header["outputs"][0]["shape"] == expected
    back = RKNN()
    assert back.load_rknn(str(tmp_path / "cls.rknn")) == 0
    assert back.init_runtime() == 0
    out = back.inference(inputs=[np.zeros((1, 48, 192, 3), np.uint8)])
    assert out[0].shape == (1, 2)


def test_forged_scrypt_cost_is_refused_before_deriving(exported, capsys, monkeypatch):
    """A header asking for scrypt 2**20 (1 GiB of memory) is refused; crypt level 3 writes 2**17."""
    pytest.importorskip("cryptography")
    from openrknn.model_file.encryption import encrypt_model_file
    monkeypatch.setenv("OPENRKNN_MODEL_KEY", "a test passphrase")
    sealed = exported.with_name("sealed.rknn")
    encrypt_model_file(str(exported), str(sealed), crypt_level=2)
    container = decode(sealed.read_bytes())
    container.header["encryption"]["log2_n"] = 20
    forged = exported.with_name("forged.rknn")
    forged.write_bytes(encode(container))
    from openrknn.model_file import encryption
    invalid_tag, hashes, aesgcm, hkdf, _ = encryption._crypto()

    def no_scrypt(*args, **kwargs):
        raise AssertionError("scrypt was started for a refused cost")
    monkeypatch.setattr(encryption, "_crypto", lambda: (invalid_tag, hashes, aesgcm, hkdf, no_scrypt))
    assert "outside the accepted range 2**10..2**17" in load_error(forged, capsys)
