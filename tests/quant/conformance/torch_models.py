"""Real exporter output for the corpus, made at test time from plain ``torch.nn`` (no torchvision,
no ultralytics, no downloaded weights): what torch.onnx writes for detectors — merged equal
initializers, Identity aliases, BatchNorm folded into Conv — is the hazard.

* :class:`YoloV8nLike`: Conv-BN-SiLU, C2f, SPPF, FPN/PAN neck and the decoupled head cut the way
  Rockchip's model zoo cuts it (per level: the box branch before DFL, sigmoid of the class
  branch), head biases initialised as ultralytics does (equal box biases: merged by the exporter).
* :class:`SharedHeadDetector`: a backbone whose three levels go through one Conv-ReLU-Conv head
  (FCOS / RetinaNet style: the same module, so the same initializers, for every level).
* :class:`DeadChannelNet`: BatchNorms with γ = 0 on some channels and a non-zero β (the folded
  Conv's weights are 0 there; its output is the bias).
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np

torch = None


def _torch():
    global torch
    if torch is None:
        import torch as _t
        torch = _t
    return torch


def randomise_batchnorm(model, seed: int = 0) -> None:
    """Random running statistics and affine parameters, as a trained network has (not 0/1)."""
    t = _torch()
    gen = t.Generator().manual_seed(seed)
    for module in model.modules():
        if isinstance(module, t.nn.BatchNorm2d):
            c = module.num_features
            module.running_mean.copy_(t.randn(c, generator=gen) * 0.2)
            module.running_var.copy_(t.rand(c, generator=gen) * 0.8 + 0.2)
            module.weight.data.copy_(t.rand(c, generator=gen) * 0.8 + 0.4)
            module.bias.data.copy_(t.randn(c, generator=gen) * 0.2)


def _modules():
    nn = _torch().nn

    class ConvBnAct(nn.Module):
        def __init__(self, cin, cout, k=1, s=1):
            super().__init__()
            self.conv = nn.Conv2d(cin, cout, k, s, k // 2, bias=False)
            self.bn = nn.BatchNorm2d(cout)
            self.act = nn.SiLU()

        def forward(self, x):
            return self.act(self.bn(self.conv(x)))

    class Bottleneck(nn.Module):
        def __init__(self, c, shortcut=True):
            super().__init__()
            self.cv1, self.cv2, self.add = ConvBnAct(c, c, 3), ConvBnAct(c, c, 3), shortcut

        def forward(self, x):
            y = self.cv2(self.cv1(x))
            return x + y if self.add else y

    class C2f(nn.Module):
        def __init__(self, cin, cout, n=1, shortcut=False):
            super().__init__()
            self.c = cout // 2
            self.cv1 = ConvBnAct(cin, 2 * self.c)
            self.cv2 = ConvBnAct((2 + n) * self.c, cout)
            self.m = nn.ModuleList(Bottleneck(self.c, shortcut) for _ in range(n))

        def forward(self, x):
            y = list(self.cv1(x).chunk(2, 1))
            y.extend(m(y[-1]) for m in self.m)
            return self.cv2(_torch().cat(y, 1))

    class SPPF(nn.Module):
        def __init__(self, cin, cout, k=5):
            super().__init__()
            self.cv1, self.cv2 = ConvBnAct(cin, cin // 2), ConvBnAct(cin // 2 * 4, cout)
            self.m = nn.MaxPool2d(k, 1, k // 2)

        def forward(self, x):
            y = [self.cv1(x)]
            y.extend(self.m(y[-1]) for _ in range(3))
            return self.cv2(_torch().cat(y, 1))

    return ConvBnAct, C2f, SPPF


def yolov8n_like(classes: int = 80):
    t = _torch()
    nn = t.nn
    ConvBnAct, C2f, SPPF = _modules()

    class YoloV8nLike(nn.Module):
        strides = (8, 16, 32)

        def __init__(self):
            super().__init__()
            self.b0, self.b1, self.b2 = ConvBnAct(3, 16, 3, 2), ConvBnAct(16, 32, 3, 2), C2f(32, 32, 1, True)
            self.b3, self.b4 = ConvBnAct(32, 64, 3, 2), C2f(64, 64, 2, True)
            self.b5, self.b6 = ConvBnAct(64, 128, 3, 2), C2f(128, 128, 2, True)
            self.b7, self.b8, self.b9 = ConvBnAct(128, 256, 3, 2), C2f(256, 256, 1, True), SPPF(256, 256)
            self.up = nn.Upsample(scale_factor=2, mode="nearest")
            self.n12, self.n15 = C2f(384, 128), C2f(192, 64)
            self.n16, self.n18 = ConvBnAct(64, 64, 3, 2), C2f(192, 128)
            self.n19, self.n21 = ConvBnAct(128, 128, 3, 2), C2f(384, 256)
            c2, c3 = 64, max(64, min(classes, 100))
            self.box = nn.ModuleList(nn.Sequential(ConvBnAct(c, c2, 3), ConvBnAct(c2, c2, 3), nn.Conv2d(c2, 64, 1))
                                     for c in (64, 128, 256))
            self.cls = nn.ModuleList(nn.Sequential(ConvBnAct(c, c3, 3), ConvBnAct(c3, c3, 3), nn.Conv2d(c3, classes, 1))
                                     for c in (64, 128, 256))
            for box, cls, s in zip(self.box, self.cls, self.strides):   # ultralytics Detect.bias_init
                box[-1].bias.data[:] = 1.0
                cls[-1].bias.data[:] = math.log(5 / classes / (640 / s) ** 2)

        def forward(self, x):
            x = self.b2(self.b1(self.b0(x)))
            p3 = self.b4(self.b3(x))
            p4 = self.b6(self.b5(p3))
            p5 = self.b9(self.b8(self.b7(p4)))
            h4 = self.n12(t.cat([self.up(p5), p4], 1))
            o3 = self.n15(t.cat([self.up(h4), p3], 1))
            o4 = self.n18(t.cat([self.n16(o3), h4], 1))
            o5 = self.n21(t.cat([self.n19(o4), p5], 1))
            outs = []
            for level, box, cls in zip((o3, o4, o5), self.box, self.cls):
                outs += [box(level), t.sigmoid(cls(level))]
            return tuple(outs)

    return YoloV8nLike()


def shared_head_detector():
    t = _torch()
    nn = t.nn

    class SharedHeadDetector(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, 2, 1), nn.BatchNorm2d(16), nn.ReLU())
            self.levels = nn.ModuleList(nn.Sequential(nn.Conv2d(16 if i == 0 else 32, 32, 3, 2, 1),
                                                      nn.BatchNorm2d(32), nn.ReLU()) for i in range(3))
            self.head = nn.Sequential(nn.Conv2d(32, 32, 3, 1, 1), nn.ReLU(), nn.Conv2d(32, 12, 3, 1, 1))
            self.gains = (1.0, 6.0, 30.0)   # deeper levels carry larger values, as in trained FPNs

        def forward(self, x):
            x, outs = self.stem(x), []
            for level, gain in zip(self.levels, self.gains):
                x = level(x)
                outs.append(self.head(x * gain))
            return tuple(outs)

    return SharedHeadDetector()


def dead_channel_net():
    t = _torch()
    nn = t.nn

    class DeadChannelNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.c1, self.bn1 = nn.Conv2d(3, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16)
            self.c2, self.bn2 = nn.Conv2d(16, 8, 3, 1, 1, bias=False), nn.BatchNorm2d(8)

        def forward(self, x):
            return self.bn2(self.c2(t.relu(self.bn1(self.c1(x)))))

    net = DeadChannelNet()
    randomise_batchnorm(net, 3)
    with t.no_grad():
        net.bn1.weight[:4] = 0.0          # γ = 0: folded weights 0, the channel is its β
        net.bn2.weight[4:] = 1e-7
        net.bn2.bias[4:] = t.tensor([-0.85, -0.38, 0.14, 1.51])
    return net


MODELS = {"yolov8n_like": (yolov8n_like, 96), "shared_head_detector": (shared_head_detector, 64),
          "dead_channel_net": (dead_channel_net, 32)}


def export(name: str, folder: Path, default_init: bool = False, seed: int = 0) -> tuple[Path, tuple[int, ...]]:
    """Make model ``name`` (random weights; randomised BatchNorm unless ``default_init``) and export it."""
    t = _torch()
    t.manual_seed(seed)
    make, size = MODELS[name]
    model = make()
    if not default_init and name != "dead_channel_net":
        randomise_batchnorm(model, seed)
    model.eval()
    shape = (1, 3, size, size)
    path = folder / f"{name}.onnx"
    with t.no_grad():
        t.onnx.export(model, t.zeros(shape), str(path), opset_version=13, dynamo=False,
                      input_names=["images"])
    return path, shape


def images(shape: tuple[int, ...], count: int, seed: int = 0) -> list[np.ndarray]:
    """Smooth random pictures scaled to [0, 1] (the zoo's preprocessing: pixels / 255)."""
    rng = np.random.default_rng(seed)
    _, c, h, w = shape
    yy, xx = np.mgrid[0:h, 0:w] / max(h, w)
    out = []
    for _ in range(count):
        a, b, f = rng.uniform(0, 1, 3)
        planes = [a * xx + (1 - a) * yy, np.abs(np.sin(6 * b * xx + 3 * f * yy)), f * yy * xx]
        img = np.stack(planes[:c])[None] + rng.normal(0, 0.05, (1, c, h, w))
        out.append(np.clip(img, 0, 1).astype(np.float32))
    return out
