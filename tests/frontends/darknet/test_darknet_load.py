"""load_darknet: native .cfg/.weights files, run through the RKNN facade, checked against numpy."""
from __future__ import annotations

import numpy as np
import pytest
from darknet_writer import DarknetNet

from openrknn.frontends.darknet import load_darknet
from rknn.api import RKNN

SMALL = [
    ("convolutional", {"batch_normalize": 1, "filters": 8, "size": 3, "stride": 1, "pad": 1, "activation": "leaky"}),
    ("maxpool", {"size": 2, "stride": 2}),
    ("convolutional", {"batch_normalize": 1, "filters": 8, "size": 3, "stride": 1, "pad": 1, "groups": 2,
                       "activation": "mish"}),
    ("route", {"layers": -1, "groups": 2, "group_id": 1}),
    ("convolutional", {"filters": 8, "size": 1, "stride": 1, "pad": 1, "activation": "swish"}),
    ("shortcut", {"from": -3, "activation": "leaky"}),
    ("convolutional", {"batch_normalize": 1, "filters": 6, "size": 3, "stride": 2, "pad": 1, "activation": "relu"}),
    ("maxpool", {"size": 2, "stride": 1}),
    ("convolutional", {"filters": 12, "size": 1, "stride": 1, "pad": 1, "activation": "linear"}),
    ("yolo", {"mask": "0,1", "anchors": "10,14, 23,27", "classes": 1, "num": 2}),
    ("route", {"layers": -4}),
    ("upsample", {"stride": 2}),
    ("route", {"layers": "-1, 2"}),
    ("convolutional", {"filters": 12, "size": 1, "stride": 1, "pad": 1, "activation": "logistic"}),
    ("yolo", {"mask": "0,1", "anchors": "10,14, 23,27", "classes": 1, "num": 2}),
]

CLASSIFIER = [
    ("convolutional", {"batch_normalize": 1, "filters": 8, "size": 3, "stride": 2, "pad": 1, "activation": "leaky"}),
    ("maxpool", {"size": 3, "stride": 2}),
    ("dropout", {"probability": 0.5}),
    ("connected", {"output": 16, "activation": "leaky", "batch_normalize": 1}),
    ("connected", {"output": 10, "activation": "linear"}),
    ("softmax", {"groups": 1}),
]

CONV_AVG = [
    ("convolutional", {"filters": 10, "size": 3, "stride": 1, "pad": 0, "activation": "relu"}),
    ("avgpool", {}),
    ("softmax", {"groups": 2}),
]


def _yolov3_tiny(classes: int = 80) -> list[tuple[str, dict]]:
    """The layer structure of the published yolov3-tiny.cfg."""
    def conv(f, size=3, bn=1, act="leaky"):
        opts = {"batch_normalize": bn, "filters": f, "size": size, "stride": 1, "pad": 1, "activation": act}
        return ("convolutional", opts if bn else {k: v for k, v in opts.items() if k != "batch_normalize"})
    head = 3 * (classes + 5)
    yolo = lambda mask: ("yolo", {"mask": mask, "anchors": "10,14, 23,27, 37,58, 81,82, 135,169, 344,319",  # noqa: E731
                                  "classes": classes, "num": 6, "jitter": ".3", "ignore_thresh": ".7"})
    layers = []
    for f in (16, 32, 64, 128, 256):
        layers += [conv(f), ("maxpool", {"size": 2, "stride": 2})]
    layers += [conv(512), ("maxpool", {"size": 2, "stride": 1}), conv(1024), conv(256, 1), conv(512),
               conv(head, 1, 0, "linear"), yolo("3,4,5"), ("route", {"layers": -4}), conv(128, 1),
               ("upsample", {"stride": 2}), ("route", {"layers": "-1, 8"}), conv(256), conv(head, 1, 0, "linear"),
               yolo("0,1,2")]
    return layers


def run_facade(cfg, weights, x: np.ndarray) -> list[np.ndarray]:
    rknn = RKNN()
    assert rknn.config(target_platform="rk3588", float_dtype="float32") == 0
    assert rknn.load_darknet(model=str(cfg), weight=str(weights)) == 0
    assert rknn.build(do_quantization=False) == 0
    assert rknn.init_runtime() == 0
    outputs = rknn.inference(inputs=[x], data_format="nchw")
    rknn.release()
    return outputs


def assert_close(got: list[np.ndarray], want: list[np.ndarray]) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == (1,) + w.shape
        rel = np.abs(g[0] - w).max() / max(np.abs(w).max(), 1e-12)
        assert rel <= 1e-4, rel


@pytest.mark.parametrize("version", [(0, 2, 0), (0, 1, 0)], ids=["seen-int64", "seen-int32"])
def test_small_detector_both_header_versions(tmp_path, version):
    net = DarknetNet(20, 16, 3, SMALL, seed=1)
    x = np.random.default_rng(2).uniform(0, 1, (3, 16, 20)).astype(np.float32)
    want = net.forward(x.astype(np.float64))
    cfg, weights = net.write(tmp_path, version)
    got = run_facade(cfg, weights, x[None])
    assert [o.shape for o in got] == [(1, 12, 4, 5), (1, 12, 8, 10)]
    assert_close(got, want)


@pytest.mark.parametrize("layers", [CLASSIFIER, CONV_AVG], ids=["connected-softmax", "avgpool-grouped-softmax"])
def test_classifiers(tmp_path, layers):
    net = DarknetNet(15, 15, 3, layers, seed=3)
    x = np.random.default_rng(4).uniform(0, 1, (3, 15, 15)).astype(np.float32)
    want = net.forward(x.astype(np.float64))
    got = run_facade(*net.write(tmp_path), x[None])
    assert_close(got, want)
    assert got[0].sum() == pytest.approx(want[0].sum(), rel=1e-5)


def test_yolov3_tiny_structure(tmp_path):
    net = DarknetNet(96, 96, 3, _yolov3_tiny(), seed=5)
    x = np.random.default_rng(6).uniform(0, 1, (3, 96, 96)).astype(np.float32)
    want = net.forward(x.astype(np.float64))
    cfg, weights = net.write(tmp_path, (0, 2, 5))
    assert weights.stat().st_size == 35_434_956  # the size of the published yolov3-tiny.weights
    got = run_facade(cfg, weights, x[None])
    assert [o.shape for o in got] == [(1, 255, 3, 3), (1, 255, 6, 6)]
    assert_close(got, want)


def test_default_fp16_path_with_nhwc_pixels(tmp_path, capsys):
    """The usual deployment call: 0..255 NHWC pixels, std 255 embedded, fp16 simulation."""
    net = DarknetNet(20, 16, 3, SMALL, seed=7)
    x = np.random.default_rng(8).uniform(0, 1, (3, 16, 20))
    want = net.forward(x)
    cfg, weights = net.write(tmp_path)
    rknn = RKNN()
    rknn.config(target_platform="rk3588", mean_values=[[0, 0, 0]], std_values=[[255, 255, 255]])
    assert rknn.load_darknet(model=str(cfg), weight=str(weights)) == 0
    assert rknn.build(do_quantization=False) == 0 and rknn.init_runtime() == 0
    got = rknn.inference(inputs=[(x * 255).astype(np.float32).transpose(1, 2, 0)])
    for g, w in zip(got, want):
        assert np.abs(g[0] - w).max() / np.abs(w).max() < 1e-2
    assert "expects 12 channels" not in capsys.readouterr().out  # 2 anchors x (1 class + 5)


def test_yolo_channel_mismatch_warns(tmp_path, capsys):
    layers = [("convolutional", {"filters": 7, "size": 1, "stride": 1, "pad": 1, "activation": "linear"}),
              ("yolo", {"mask": "0,1", "anchors": "1,1, 2,2", "classes": 1, "num": 2})]
    net = DarknetNet(4, 4, 3, layers)
    net.forward(np.zeros((3, 4, 4)))
    source = load_darknet(*(str(p) for p in net.write(tmp_path)))
    assert "expects 12 channels for its anchors and 1 classes, its input has 7" in capsys.readouterr().out
    assert [o.name for o in source.model.graph.output] == ["convolutional_0"]
