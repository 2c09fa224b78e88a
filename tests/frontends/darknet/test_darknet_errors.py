"""Malformed Darknet files: each gives -1 and one E line naming the layer/line and the problem."""
from __future__ import annotations

import numpy as np
import pytest
from darknet_writer import DarknetNet

from openrknn.errors import ModelLoadError, UnsupportedOpError
from openrknn.frontends.darknet import load_darknet
from rknn.api import RKNN

LAYERS = [
    ("convolutional", {"batch_normalize": 1, "filters": 4, "size": 3, "stride": 1, "pad": 1, "activation": "leaky"}),
    ("maxpool", {"size": 2, "stride": 2}),
    ("convolutional", {"filters": 6, "size": 3, "stride": 1, "pad": 1, "activation": "linear"}),
]


@pytest.fixture
def files(tmp_path):
    net = DarknetNet(8, 8, 3, LAYERS)
    net.forward(np.zeros((3, 8, 8)))
    return net.write(tmp_path)


def facade_error(capsys, cfg, weights) -> str:
    rknn = RKNN()
    assert rknn.load_darknet(model=str(cfg), weight=str(weights)) == -1
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("E ")]
    assert len(lines) == 1
    return lines[0]


def test_truncated_weights_name_layer_and_bytes(files, capsys):
    cfg, weights = files
    data = weights.read_bytes()
    weights.write_bytes(data[:-40])  # the last conv's 216 weights need 864 bytes
    line = facade_error(capsys, cfg, weights)
    assert "E load_darknet:" in line and "truncated" in line
    lineno = [i for i, t in enumerate(cfg.read_text().splitlines(), 1) if t == "[convolutional]"][-1]
    assert f"net.cfg line {lineno}, layer 2 [convolutional]" in line
    assert "needs 864 bytes for its weights" in line and "only 824 bytes remain" in line


def test_weights_of_a_smaller_net(tmp_path, files, capsys):
    cfg, _ = files
    small = DarknetNet(8, 8, 3, LAYERS[:1])
    small.forward(np.zeros((3, 8, 8)))
    other = tmp_path / "other"
    other.mkdir()
    _, weights = small.write(other, (0, 1, 0))
    line = facade_error(capsys, cfg, weights)
    assert "layer 2 [convolutional]" in line and "biases" in line and "only 0 bytes remain" in line


def test_header_too_short(files, capsys):
    cfg, weights = files
    weights.write_bytes(np.array([0, 2, 0], "<i4").tobytes() + b"\0\0")
    assert "needs 20 bytes" in facade_error(capsys, cfg, weights)


def test_unknown_section_names_it_and_its_line(files, capsys):
    cfg, weights = files
    text = cfg.read_text().replace("[maxpool]", "[reorg3d]")
    cfg.write_text(text)
    line = facade_error(capsys, cfg, weights)
    lineno = text.splitlines().index("[reorg3d]") + 1
    assert "'[reorg3d]'" in line and f"line {lineno}" in line and "layer 1" in line
    with pytest.raises(UnsupportedOpError):
        load_darknet(str(cfg), str(weights))


@pytest.mark.parametrize("edit, expected", [
    (lambda t: t.replace("size=3", "size=three", 1), "option size='three' is not an integer"),
    (lambda t: t.replace("stride=1", "stride 1", 1), "expected '[section]' or 'key=value'"),
    (lambda t: "filters=3\n" + t, "comes before any [section]"),
    (lambda t: t.replace("[net]", "[convolutional]", 1), "the first section must be [net]"),
    (lambda t: t.replace("width=8", "width=0"), "needs positive width"),
    (lambda t: t + "\n[route]\nlayers=-9\n", "refers to layer -9"),
    (lambda t: t + "\n[shortcut]\nfrom=-3\n", "cannot add layer of shape 4x8x8"),
    (lambda t: t.replace("activation=leaky", "activation=gelu"), "activation=gelu"),
    (lambda t: t.replace("[maxpool]", "[maxpool"), "malformed section header"),
])
def test_bad_cfg_text(files, capsys, edit, expected):
    cfg, weights = files
    cfg.write_text(edit(cfg.read_text()))
    line = facade_error(capsys, cfg, weights)
    assert expected in line and "net.cfg" in line


def test_missing_files(tmp_path, files):
    cfg, weights = files
    with pytest.raises(ModelLoadError, match="weights file .* does not exist"):
        load_darknet(str(cfg), str(tmp_path / "nope.weights"))
    with pytest.raises(ModelLoadError, match="cfg file .* does not exist"):
        load_darknet(str(tmp_path / "nope.cfg"), str(weights))


def test_extra_weights_warn(files, capsys):
    cfg, weights = files
    weights.write_bytes(weights.read_bytes() + b"\0" * 8)
    source = load_darknet(str(cfg), str(weights))
    assert "8 bytes more" in capsys.readouterr().out
    assert [n.name for n in source.model.graph.node][:2] == ["convolutional_0", "convolutional_0_leaky"]
