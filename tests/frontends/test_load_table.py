"""``frontends.load``: the one framework → loader switch the CLI, ``rknn_convert`` and the workbench use."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from openrknn import frontends
from openrknn.errors import ConfigError

PACKAGE = Path(__file__).resolve().parents[2] / "openrknn"


class Recorder:
    """Stands in for ``RKNN``: records which ``load_*`` was called with what."""

    def __getattr__(self, name):
        def call(**kwargs):
            self.called = (name, kwargs)
            return 0
        return call


@pytest.mark.parametrize("framework, expected", [
    ("onnx", ("load_onnx", {"model": "m", "inputs": ["a"], "outputs": ["b"], "input_size_list": [[1, 3]]})),
    ("tflite", ("load_tflite", {"model": "m"})),
    ("pytorch", ("load_pytorch", {"model": "m", "input_size_list": [[1, 3]]})),
    ("tensorflow", ("load_tensorflow", {"tf_pb": "m", "inputs": ["a"], "outputs": ["b"], "input_size_list": [[1, 3]]})),
    ("caffe", ("load_caffe", {"model": "m", "blobs": "w"})),
    ("darknet", ("load_darknet", {"model": "m", "weight": "w"})),
    ("mxnet", ("load_mxnet", {"symbol": "m", "params": "w", "input_size_list": [[1, 3]]})),
])
def test_each_framework_calls_its_documented_loader(framework, expected):
    rknn = Recorder()
    assert frontends.load(rknn, framework, "m", "w", inputs=["a"], outputs=["b"], input_size_list=[[1, 3]]) == 0
    assert rknn.called == expected


def test_tensorflow_required_lists_default_to_empty_and_unknown_frameworks_are_named():
    rknn = Recorder()
    frontends.load(rknn, "tensorflow", "m.pb")
    assert rknn.called == ("load_tensorflow", {"tf_pb": "m.pb", "inputs": [], "outputs": [], "input_size_list": []})
    with pytest.raises(ConfigError, match="'keras' is not one of"):
        frontends.load(rknn, "keras", "m.h5")
    assert set(frontends.FRAMEWORKS) == {"onnx", "tflite", "pytorch", "tensorflow", "caffe", "darknet", "mxnet"}


def test_the_switch_is_written_once():
    """Outside the facade itself, no module calls two different ``load_<framework>`` methods: it uses the table."""
    calls = re.compile(r"\.load_(onnx|tflite|pytorch|tensorflow|caffe|darknet|mxnet)\(")
    wrong = [str(path.relative_to(PACKAGE)) for path in PACKAGE.rglob("*.py")
             if path.parent.name != "api" and len(set(calls.findall(path.read_text()))) > 1]
    assert not wrong, wrong
