"""Malformed Caffe files: load_caffe returns -1 and the E line names the layer and the problem."""
from __future__ import annotations

import numpy as np
import pytest

from caffe_files import caffemodel_bytes, input_layer, layer, write_model

CONV = (input_layer("data", [1, 3, 8, 8])
        + layer("conv1", "Convolution", "data", params="convolution_param { num_output: 4 kernel_size: 3 }")
        + layer("relu1", "ReLU", "conv1", "conv1"))
CONV_WEIGHTS = {"conv1": [np.ones((4, 3, 3, 3), np.float32), np.zeros(4, np.float32)]}


def load(capsys, prototxt, blobs=None, **kwargs) -> tuple[int, str]:
    from rknn.api import RKNN

    rknn = RKNN()
    ret = rknn.load_caffe(model=prototxt, blobs=blobs, **kwargs)
    rknn.release()
    return ret, capsys.readouterr().out


def test_bad_prototxt_text_names_the_layer(tmp_path, capsys):
    text = CONV.replace('kernel_size: 3 }', 'kernel_size: 3 ')   # an unclosed block
    text += layer("pool1", "Pooling", "conv1", params="pooling_param { pool: MAXX kernel_size: 2 }")
    proto, _ = write_model(tmp_path, text, None)
    ret, out = load(capsys, proto)
    assert ret == -1
    assert "E load_caffe: net.prototxt is not a valid Caffe prototxt" in out and "pool1" in out


def test_truncated_caffemodel_names_the_layer(tmp_path, capsys):
    weights = {"conv1": CONV_WEIGHTS["conv1"], "conv2": [np.ones((4, 4, 3, 3), np.float32)]}
    text = CONV + layer("conv2", "Convolution", "conv1", params="convolution_param { num_output: 4 kernel_size: 3 "
                        "bias_term: false }")
    proto, model = write_model(tmp_path, text, weights)
    data = open(model, "rb").read()
    open(model, "wb").write(data[:-37])
    ret, out = load(capsys, proto, model)
    assert ret == -1
    assert "net.caffemodel is not a valid .caffemodel" in out and "layer #2 'conv2' is cut short" in out


def test_weights_of_the_wrong_size_name_the_layer(tmp_path, capsys):
    proto, model = write_model(tmp_path, CONV, {"conv1": [np.ones((4, 3, 2, 2), np.float32), np.zeros(4)]})
    ret, out = load(capsys, proto, model)
    assert ret == -1
    assert "layer 'conv1' (Convolution) blob 0 (weights) has 48 values, the prototxt needs 108" in out


def test_caffemodel_without_the_layer(tmp_path, capsys):
    proto, model = write_model(tmp_path, CONV, {"other": [np.ones(3, np.float32)]})
    ret, out = load(capsys, proto, model)
    assert ret == -1 and "no weights for layer 'conv1' (Convolution)" in out


def test_unknown_layer_type(tmp_path, capsys):
    proto, _ = write_model(tmp_path, CONV + layer("roi", "ROIPooling", "conv1"), None)
    ret, out = load(capsys, proto)
    assert ret == -1
    assert "Caffe operator 'ROIPooling' (node 'roi') is not supported" in out and "Convolution" in out


def test_missing_bottom_blob(tmp_path, capsys):
    text = CONV + layer("pool1", "Pooling", "conv9", params="pooling_param { kernel_size: 2 }")
    proto, _ = write_model(tmp_path, text, None)
    ret, out = load(capsys, proto)
    assert ret == -1
    assert "layer 'pool1' (Pooling) reads blob 'conv9', which no earlier layer or input produces" in out


def test_inconsistent_parameters_name_the_layer(tmp_path, capsys):
    text = CONV + layer("slice", "Slice", "conv1", ["a", "b"], params="slice_param { axis: 1 slice_point: 9 }")
    proto, model = write_model(tmp_path, text, CONV_WEIGHTS)
    ret, out = load(capsys, proto, model)
    assert ret == -1 and "layer 'slice' (Slice)" in out and "do not fit axis size 4" in out


def test_data_layer_without_shape(tmp_path, capsys):
    text = ('layer { name: "data" type: "Data" top: "data" top: "label" data_param { source: "lmdb" } }\n'
            + layer("relu", "ReLU", "data"))
    proto, _ = write_model(tmp_path, text, None)
    ret, out = load(capsys, proto)
    assert ret == -1 and "input layer 'data' (Data) has no shape" in out


def test_lstm_caffe_is_refused(tmp_path, capsys):
    proto, _ = write_model(tmp_path, CONV, None)
    ret, out = load(capsys, proto, proto="lstm_caffe")
    assert ret == -1 and "lstm_caffe" in out and "not supported" in out


def test_missing_files(tmp_path, capsys):
    ret, out = load(capsys, str(tmp_path / "none.prototxt"))
    assert ret == -1 and "none.prototxt' does not exist" in out
    proto, _ = write_model(tmp_path, CONV, None)
    ret, out = load(capsys, proto, str(tmp_path / "none.caffemodel"))
    assert ret == -1 and "none.caffemodel' does not exist" in out


def test_unknown_fields_are_skipped_with_a_warning(tmp_path, capsys):
    text = CONV + layer("pool1", "Pooling", "conv1", params="pooling_param { kernel_size: 2 pool_engine: 3 }")
    proto, model = write_model(tmp_path, text, CONV_WEIGHTS)
    ret, out = load(capsys, proto, model)
    assert ret == 0
    assert "W load_caffe: net.prototxt: fields unknown to openrknn are ignored" in out and "pool_engine" in out


@pytest.mark.parametrize("v1", [False, True])
def test_caffemodel_bytes_roundtrip_through_the_schema(v1):
    """The loader's declared schema reads what the hand encoder writes (both net forms)."""
    from openrknn.frontends.caffe import schema

    net = schema.NetParameter()
    net.ParseFromString(caffemodel_bytes({"conv1": CONV_WEIGHTS["conv1"]}, v1=v1))
    layers = net.layers if v1 else net.layer
    assert [l.name for l in layers] == ["conv1"] and len(layers[0].blobs) == 2
    assert len(layers[0].blobs[0].data) == 108
