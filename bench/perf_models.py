"""Random-weight stand-ins of the rknn_model_zoo models whose board FPS calibrate the cost model.

    /work/benchvenv/bin/python bench/perf_models.py [--cache bench/.cache/perf_models] [--only NAME ...]

Runs in the bench venv (torch, torchvision, timm, ultralytics, yolov5, segmentation-models-pytorch),
never in openrknn's; ``bench/perf_fit.py`` calls it. Speed does not depend on weights, so weights are
random; the architecture, the input size and where the head is cut (before the box decoding, as
rknn_model_zoo exports them) are what matter. Existing files are kept. Each file is written with
``doc_string`` = "params=<M> macs=<G>" so the fit can print how close a stand-in is to the published
model. ``docs/performance-model.md`` §5 compares them with the published sizes.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import torch
from torch import nn
import torch.nn.functional as F

HERE = Path(__file__).resolve().parent


def _cbr(cin, cout, k=3, s=1, act=None, groups=1, d=1):
    pad = d * (k // 2) if isinstance(k, int) else (k[0] // 2, k[1] // 2)
    layers = [nn.Conv2d(cin, cout, k, s, pad, dilation=d, groups=groups, bias=False), nn.BatchNorm2d(cout)]
    if act is not None:
        layers.append(act)
    return nn.Sequential(*layers)


# --- yolov5 (the yolov5 package), head cut at the three Detect convolutions ------------------------
def _yolov5(yaml: str, relu: bool = False):
    import yaml as pyyaml
    import yolov5
    from yolov5.models.yolo import Model
    with open(os.path.join(os.path.dirname(yolov5.__file__), "models", yaml)) as f:
        cfg = pyyaml.safe_load(f)
    if relu:
        cfg["activation"] = "nn.ReLU()"   # rknn_model_zoo's yolov5s-relu: every SiLU a ReLU
    from yolov5.models.common import Conv
    default = Conv.default_act
    try:
        model = Model(cfg).eval()
    finally:
        Conv.default_act = default   # the yaml's activation is set on the class: keep it to this model
    detect = model.model[-1]
    detect.forward = lambda xs: [detect.m[i](xs[i]) for i in range(detect.nl)]
    return model


# --- yolov6 (ultralytics yaml), head cut before the DFL as rknn_model_zoo's yolov6/yolov8 ---------
def _ultralytics_cut(yaml: str):
    from ultralytics import YOLO
    model = YOLO(yaml).model.eval()
    detect = model.model[-1]

    def forward(xs):
        outs = []
        for i in range(detect.nl):
            scores = detect.cv3[i](xs[i]).sigmoid()
            outs += [detect.cv2[i](xs[i]), scores, scores.sum(1, keepdim=True).clamp(0, 1)]
        return outs
    detect.forward = forward
    return model


# --- yolov7-tiny (own code: ELAN-tiny, SPPCSPC-tiny, LeakyReLU 0.1) -------------------------------
def _lrelu():
    return nn.LeakyReLU(0.1)


class _ElanTiny(nn.Module):
    def __init__(self, cin, hidden, cout):
        super().__init__()
        self.a, self.b = _cbr(cin, hidden, 1, act=_lrelu()), _cbr(cin, hidden, 1, act=_lrelu())
        self.c, self.d = _cbr(hidden, hidden, 3, act=_lrelu()), _cbr(hidden, hidden, 3, act=_lrelu())
        self.out = _cbr(4 * hidden, cout, 1, act=_lrelu())

    def forward(self, x):
        a, b = self.a(x), self.b(x)
        c = self.c(b)
        d = self.d(c)
        return self.out(torch.cat([d, c, b, a], 1))


class _Yolov7Tiny(nn.Module):
    def __init__(self, classes=80):
        super().__init__()
        self.stem = nn.Sequential(_cbr(3, 32, 3, 2, _lrelu()), _cbr(32, 64, 3, 2, _lrelu()), _ElanTiny(64, 32, 64))
        self.s3 = _ElanTiny(64, 64, 128)
        self.s4 = _ElanTiny(128, 128, 256)
        self.s5 = _ElanTiny(256, 256, 512)
        self.spp_a, self.spp_b = _cbr(512, 256, 1, act=_lrelu()), _cbr(512, 256, 1, act=_lrelu())
        self.spp_c, self.spp_d = _cbr(1024, 256, 1, act=_lrelu()), _cbr(512, 256, 1, act=_lrelu())
        self.red5, self.lat4 = _cbr(256, 128, 1, act=_lrelu()), _cbr(256, 128, 1, act=_lrelu())
        self.up4 = _ElanTiny(256, 64, 128)
        self.red4, self.lat3 = _cbr(128, 64, 1, act=_lrelu()), _cbr(128, 64, 1, act=_lrelu())
        self.out3 = _ElanTiny(128, 32, 64)
        self.down3, self.out4 = _cbr(64, 128, 3, 2, _lrelu()), _ElanTiny(256, 64, 128)
        self.down4, self.out5 = _cbr(128, 256, 3, 2, _lrelu()), _ElanTiny(512, 128, 256)
        self.heads = nn.ModuleList(_cbr(c, 2 * c, 3, act=_lrelu()) for c in (64, 128, 256))
        self.detect = nn.ModuleList(nn.Conv2d(2 * c, 3 * (classes + 5), 1) for c in (64, 128, 256))

    def forward(self, x):
        p3 = self.s3(F.max_pool2d(self.stem(x), 2))
        p4 = self.s4(F.max_pool2d(p3, 2))
        p5 = self.s5(F.max_pool2d(p4, 2))
        a, b = self.spp_a(p5), self.spp_b(p5)
        b = self.spp_c(torch.cat([b] + [F.max_pool2d(b, k, 1, k // 2) for k in (5, 9, 13)], 1))
        n5 = self.spp_d(torch.cat([b, a], 1))
        n4 = self.up4(torch.cat([F.interpolate(self.red5(n5), scale_factor=2.0), self.lat4(p4)], 1))
        o3 = self.out3(torch.cat([F.interpolate(self.red4(n4), scale_factor=2.0), self.lat3(p3)], 1))
        o4 = self.out4(torch.cat([self.down3(o3), n4], 1))
        o5 = self.out5(torch.cat([self.down4(o4), n5], 1))
        return [d(h(o)) for d, h, o in zip(self.detect, self.heads, (o3, o4, o5))]


# --- YOLOX (own code on the yolov5 package's blocks: Focus, CSP = C3, SPP, SiLU) -----------------
class _Yolox(nn.Module):
    def __init__(self, depth: float, width: float, classes: int = 80):
        super().__init__()
        from yolov5.models.common import C3, SPP, Conv, Focus
        ch = [int(c * width) for c in (64, 128, 256, 512, 1024)]
        n = max(round(3 * depth), 1)
        self.stem = Focus(3, ch[0], 3)
        self.dark2 = nn.Sequential(Conv(ch[0], ch[1], 3, 2), C3(ch[1], ch[1], n))
        self.dark3 = nn.Sequential(Conv(ch[1], ch[2], 3, 2), C3(ch[2], ch[2], 3 * n))
        self.dark4 = nn.Sequential(Conv(ch[2], ch[3], 3, 2), C3(ch[3], ch[3], 3 * n))
        self.dark5 = nn.Sequential(Conv(ch[3], ch[4], 3, 2), SPP(ch[4], ch[4]), C3(ch[4], ch[4], n, shortcut=False))
        self.lat0, self.c3_p4 = Conv(ch[4], ch[3], 1), C3(2 * ch[3], ch[3], n, shortcut=False)
        self.red1, self.c3_p3 = Conv(ch[3], ch[2], 1), C3(2 * ch[2], ch[2], n, shortcut=False)
        self.bu2, self.c3_n3 = Conv(ch[2], ch[2], 3, 2), C3(2 * ch[2], ch[3], n, shortcut=False)
        self.bu1, self.c3_n4 = Conv(ch[3], ch[3], 3, 2), C3(2 * ch[3], ch[4], n, shortcut=False)
        hid = int(256 * width)
        self.stems = nn.ModuleList(Conv(c, hid, 1) for c in ch[2:])
        self.cls = nn.ModuleList(nn.Sequential(Conv(hid, hid, 3), Conv(hid, hid, 3)) for _ in range(3))
        self.reg = nn.ModuleList(nn.Sequential(Conv(hid, hid, 3), Conv(hid, hid, 3)) for _ in range(3))
        self.cls_pred = nn.ModuleList(nn.Conv2d(hid, classes, 1) for _ in range(3))
        self.reg_pred = nn.ModuleList(nn.Conv2d(hid, 4, 1) for _ in range(3))
        self.obj_pred = nn.ModuleList(nn.Conv2d(hid, 1, 1) for _ in range(3))

    def forward(self, x):
        x3 = self.dark3(self.dark2(self.stem(x)))
        x4 = self.dark4(x3)
        x5 = self.dark5(x4)
        f0 = self.lat0(x5)
        f1 = self.c3_p4(torch.cat([F.interpolate(f0, scale_factor=2.0), x4], 1))
        f1r = self.red1(f1)
        o3 = self.c3_p3(torch.cat([F.interpolate(f1r, scale_factor=2.0), x3], 1))
        o4 = self.c3_n3(torch.cat([self.bu2(o3), f1r], 1))
        o5 = self.c3_n4(torch.cat([self.bu1(o4), f0], 1))
        outs = []
        for i, feat in enumerate((o3, o4, o5)):
            s = self.stems[i](feat)
            r = self.reg[i](s)
            outs.append(torch.cat([self.reg_pred[i](r), self.obj_pred[i](r).sigmoid(),
                                   self.cls_pred[i](self.cls[i](s)).sigmoid()], 1))
        return outs


# --- DeepLabV3+ MobileNetV2, output stride 8 (smp encoder, TF-model-zoo head: image pool + 1x1) ---
class _DeepLabMnv2(nn.Module):
    def __init__(self, classes: int = 21):
        super().__init__()
        import segmentation_models_pytorch as smp
        self.encoder = smp.encoders.get_encoder("mobilenet_v2", weights=None, output_stride=8)
        c = 320   # MobileNetV2's last block; the TF model has no 320->1280 conv before its head
        self.aspp = _cbr(c, 256, 1, act=nn.ReLU())
        self.pool = _cbr(c, 256, 1, act=nn.ReLU())
        self.project = _cbr(512, 256, 1, act=nn.ReLU())
        self.logits = nn.Conv2d(256, classes, 1)

    def forward(self, x):
        f = self.encoder.features[:-1](x)
        pooled = self.pool(F.adaptive_avg_pool2d(f, 1)).expand(-1, -1, f.shape[2], f.shape[3])
        return self.logits(self.project(torch.cat([self.aspp(f), pooled], 1)))


# --- RetinaFace (own code after the Pytorch_Retinaface layout) ---------------------------------------
def _dw(cin, cout, s):
    return nn.Sequential(_cbr(cin, cin, 3, s, nn.LeakyReLU(0.1), groups=cin), _cbr(cin, cout, 1, 1, nn.LeakyReLU(0.1)))


class _Ssh(nn.Module):
    def __init__(self, c, leaky):
        super().__init__()
        act = (lambda: nn.LeakyReLU(leaky)) if leaky else nn.ReLU
        self.c3 = _cbr(c, c // 2, 3)
        self.c5a, self.c5b = _cbr(c, c // 4, 3, act=act()), _cbr(c // 4, c // 4, 3)
        self.c7a, self.c7b = _cbr(c // 4, c // 4, 3, act=act()), _cbr(c // 4, c // 4, 3)

    def forward(self, x):
        a = self.c5a(x)
        b = self.c7a(a)
        return F.relu(torch.cat([self.c3(x), self.c5b(a), self.c7b(b)], 1))


class _RetinaFace(nn.Module):
    def __init__(self, backbone: str):
        super().__init__()
        if backbone == "mobile":
            self.body = nn.ModuleList([
                nn.Sequential(_cbr(3, 8, 3, 2, nn.LeakyReLU(0.1)), _dw(8, 16, 1), _dw(16, 32, 2), _dw(32, 32, 1),
                              _dw(32, 64, 2), _dw(64, 64, 1)),
                nn.Sequential(_dw(64, 128, 2), *[_dw(128, 128, 1) for _ in range(5)]),
                nn.Sequential(_dw(128, 256, 2), _dw(256, 256, 1))])
            chans, out, leaky = (64, 128, 256), 64, 0.1
        else:
            import torchvision
            r = torchvision.models.resnet50(weights=None)
            self.body = nn.ModuleList([nn.Sequential(r.conv1, r.bn1, r.relu, r.maxpool, r.layer1, r.layer2),
                                       r.layer3, r.layer4])
            chans, out, leaky = (512, 1024, 2048), 256, 0.0
        act = (lambda: nn.LeakyReLU(leaky)) if leaky else nn.ReLU
        self.lat = nn.ModuleList(_cbr(c, out, 1, act=act()) for c in chans)
        self.merge = nn.ModuleList(_cbr(out, out, 3, act=act()) for _ in range(2))
        self.ssh = nn.ModuleList(_Ssh(out, leaky) for _ in range(3))
        self.cls = nn.ModuleList(nn.Conv2d(out, 4, 1) for _ in range(3))
        self.box = nn.ModuleList(nn.Conv2d(out, 8, 1) for _ in range(3))
        self.ldm = nn.ModuleList(nn.Conv2d(out, 20, 1) for _ in range(3))

    def forward(self, x):
        feats = []
        for stage in self.body:
            x = stage(x)
            feats.append(x)
        o1, o2, o3 = (lat(f) for lat, f in zip(self.lat, feats))
        o2 = self.merge[1](o2 + F.interpolate(o3, size=o2.shape[2:], mode="nearest"))
        o1 = self.merge[0](o1 + F.interpolate(o2, size=o1.shape[2:], mode="nearest"))
        levels = [ssh(o) for ssh, o in zip(self.ssh, (o1, o2, o3))]

        def head(convs, k):
            return torch.cat([c(f).permute(0, 2, 3, 1).reshape(1, -1, k) for c, f in zip(convs, levels)], 1)
        return head(self.box, 4), F.softmax(head(self.cls, 2), -1), head(self.ldm, 10)


# --- PP-LiteSeg with STDC1 (own code after PaddleSeg's layout) --------------------------------------
class _Stdc(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.c1 = _cbr(cin, cout // 2, 1, act=nn.ReLU())
        self.down = _cbr(cout // 2, cout // 2, 3, 2, groups=cout // 2) if stride == 2 else None
        self.c2 = _cbr(cout // 2, cout // 4, 3, act=nn.ReLU())
        self.c3 = _cbr(cout // 4, cout // 8, 3, act=nn.ReLU())
        self.c4 = _cbr(cout // 8, cout // 8, 3, act=nn.ReLU())

    def forward(self, x):
        x1 = self.c1(x)
        x2 = self.c2(self.down(x1) if self.down is not None else x1)
        x3 = self.c3(x2)
        x4 = self.c4(x3)
        skip = F.avg_pool2d(x1, 3, 2, 1) if self.down is not None else x1
        return torch.cat([skip, x2, x3, x4], 1)


class _Uafm(nn.Module):
    def __init__(self, x_ch, y_ch, out_ch):
        super().__init__()
        self.conv_x = _cbr(x_ch, y_ch, 3, act=nn.ReLU())
        self.att = nn.Sequential(_cbr(4, 2, 3, act=nn.ReLU()), _cbr(2, 1, 3))
        self.out = _cbr(y_ch, out_ch, 3, act=nn.ReLU())

    def forward(self, x, y):
        x = self.conv_x(x)
        y = F.interpolate(y, size=x.shape[2:], mode="bilinear", align_corners=False)
        stats = torch.cat([x.mean(1, keepdim=True), x.amax(1, keepdim=True), y.mean(1, keepdim=True),
                           y.amax(1, keepdim=True)], 1)
        a = torch.sigmoid(self.att(stats))
        return self.out(x * a + y * (1 - a))


class _PPLiteSeg(nn.Module):
    def __init__(self, classes: int = 19):
        super().__init__()
        self.stem = nn.Sequential(_cbr(3, 32, 3, 2, nn.ReLU()), _cbr(32, 64, 3, 2, nn.ReLU()))
        self.s3 = nn.Sequential(_Stdc(64, 256, 2), _Stdc(256, 256, 1))
        self.s4 = nn.Sequential(_Stdc(256, 512, 2), _Stdc(512, 512, 1))
        self.s5 = nn.Sequential(_Stdc(512, 1024, 2), _Stdc(1024, 1024, 1))
        self.sppm = nn.ModuleList(_cbr(1024, 128, 1, act=nn.ReLU()) for _ in range(3))
        self.sppm_out = _cbr(128, 128, 3, act=nn.ReLU())
        self.arms = nn.ModuleList([_Uafm(1024, 128, 128), _Uafm(512, 128, 64), _Uafm(256, 64, 32)])
        self.head = nn.Sequential(_cbr(32, 32, 3, act=nn.ReLU()), nn.Conv2d(32, classes, 1))

    def forward(self, x):
        size = x.shape[2:]
        f3 = self.s3(self.stem(x))
        f4 = self.s4(f3)
        f5 = self.s5(f4)
        y = sum(F.interpolate(conv(F.adaptive_avg_pool2d(f5, b)), size=f5.shape[2:], mode="bilinear",
                              align_corners=False) for conv, b in zip(self.sppm, (1, 2, 4)))
        y = self.sppm_out(y)
        for arm, feat in zip(self.arms, (f5, f4, f3)):
            y = arm(feat, y)
        return F.interpolate(self.head(y), size=size, mode="bilinear", align_corners=False)


# --- LPRNet 24x94 (own code after the LPRNet_Pytorch layout; MaxPool3d as 2-D pool + channel step) --
class _SmallBlock(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        q = cout // 4
        self.body = nn.Sequential(nn.Conv2d(cin, q, 1), nn.ReLU(), nn.Conv2d(q, q, (3, 1), padding=(1, 0)), nn.ReLU(),
                                  nn.Conv2d(q, q, (1, 3), padding=(0, 1)), nn.ReLU(), nn.Conv2d(q, cout, 1))

    def forward(self, x):
        return self.body(x)


class _LPRNet(nn.Module):
    def __init__(self, classes: int = 68):
        super().__init__()
        self.c1 = nn.Sequential(nn.Conv2d(3, 64, 3), nn.BatchNorm2d(64), nn.ReLU())
        self.b1 = nn.Sequential(_SmallBlock(64, 128), nn.BatchNorm2d(128), nn.ReLU())
        self.b2 = nn.Sequential(_SmallBlock(64, 256), nn.BatchNorm2d(256), nn.ReLU(),
                                _SmallBlock(256, 256), nn.BatchNorm2d(256), nn.ReLU())
        self.c2 = nn.Sequential(nn.Conv2d(64, 256, (1, 4)), nn.BatchNorm2d(256), nn.ReLU(),
                                nn.Conv2d(256, classes, (13, 1)), nn.BatchNorm2d(classes), nn.ReLU())
        self.container = nn.Conv2d(64 + 128 + 256 + classes, classes, 1)

    def forward(self, x):
        f0 = F.max_pool2d(self.c1(x), 3, 1)
        f1 = self.b1(f0)
        f2 = self.b2(F.max_pool2d(f1, 3, (1, 2))[:, ::2])
        f3 = self.c2(F.max_pool2d(f2, 3, (1, 2))[:, ::4])
        ctx = [F.avg_pool2d(f0, 5, 5), F.avg_pool2d(f1, 5, 5), F.avg_pool2d(f2, (4, 10), (4, 2)), f3]
        ctx = [f / f.pow(2).mean() for f in ctx]
        return self.container(torch.cat(ctx, 1)).mean(2)


# --- MobileSAM image encoder (TinyViT-5M from timm + the SAM neck) ----------------------------------
class _LayerNorm2d(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.weight, self.bias = nn.Parameter(torch.ones(c)), nn.Parameter(torch.zeros(c))

    def forward(self, x):
        u = x.mean(1, keepdim=True)
        s = (x - u).pow(2).mean(1, keepdim=True)
        return self.weight[:, None, None] * ((x - u) / torch.sqrt(s + 1e-6)) + self.bias[:, None, None]


class _MobileSamEncoder(nn.Module):
    def __init__(self):
        super().__init__()
        import timm
        self.vit = timm.create_model("tiny_vit_5m_224", pretrained=False, num_classes=0)
        self.vit.stages[3].downsample.conv2.conv.stride = (1, 1)   # MobileSAM: stride 16, not 32
        self.neck = nn.Sequential(nn.Conv2d(320, 256, 1, bias=False), _LayerNorm2d(256),
                                  nn.Conv2d(256, 256, 3, padding=1, bias=False), _LayerNorm2d(256))

    def forward(self, x):
        return self.neck(self.vit.forward_features(x))


MODELS = {   # name -> (factory, input shape); published sizes in docs/performance-model.md §5
    "yolov5s_relu": (lambda: _yolov5("yolov5s.yaml", relu=True), (1, 3, 640, 640)),
    "yolov5n": (lambda: _yolov5("yolov5n.yaml"), (1, 3, 640, 640)),
    "yolov5s": (lambda: _yolov5("yolov5s.yaml"), (1, 3, 640, 640)),
    "yolov5m": (lambda: _yolov5("yolov5m.yaml"), (1, 3, 640, 640)),
    "yolov6n": (lambda: _ultralytics_cut("yolov6n.yaml"), (1, 3, 640, 640)),
    "yolov6s": (lambda: _ultralytics_cut("yolov6s.yaml"), (1, 3, 640, 640)),
    "yolov7_tiny": (_Yolov7Tiny, (1, 3, 640, 640)),
    "yolox_s": (lambda: _Yolox(0.33, 0.50), (1, 3, 640, 640)),
    "yolox_m": (lambda: _Yolox(0.67, 0.75), (1, 3, 640, 640)),
    "deeplabv3plus_mnv2": (_DeepLabMnv2, (1, 3, 513, 513)),
    "retinaface_mobile": (lambda: _RetinaFace("mobile"), (1, 3, 320, 320)),
    "retinaface_resnet50": (lambda: _RetinaFace("resnet50"), (1, 3, 320, 320)),
    "pp_liteseg": (_PPLiteSeg, (1, 3, 512, 512)),
    "lprnet": (_LPRNet, (1, 3, 24, 94)),
    "mobilesam_encoder": (_MobileSamEncoder, (1, 3, 448, 448)),
}


def _macs(model: nn.Module, x: torch.Tensor) -> float:
    """Multiply-accumulates of the convolutions and linear layers (hooks), in G."""
    total = [0]

    def conv(m, inp, out):
        total[0] += out.numel() * m.weight[0].numel()

    def linear(m, inp, out):
        total[0] += out.numel() * m.in_features
    hooks = [m.register_forward_hook(conv) for m in model.modules() if isinstance(m, nn.Conv2d)]
    hooks += [m.register_forward_hook(linear) for m in model.modules() if isinstance(m, nn.Linear)]
    with torch.no_grad():
        model(x)
    for h in hooks:
        h.remove()
    return total[0] / 1e9


def export(name: str, cache: Path) -> Path:
    import onnx
    path = cache / f"{name}.onnx"
    if path.exists():
        return path
    factory, shape = MODELS[name]
    torch.manual_seed(0)
    model = factory().eval()
    x = torch.rand(*shape)
    params = sum(p.numel() for p in model.parameters()) / 1e6
    macs = _macs(model, x)
    tmp = path.with_suffix(".tmp")
    with torch.no_grad():
        torch.onnx.export(model, (x,), str(tmp), input_names=["images"], opset_version=17 if "sam" in name else 12,
                          dynamo=False, do_constant_folding=True)
    proto = onnx.load(str(tmp))
    proto.doc_string = f"params={params:.2f} macs={macs:.3f}"
    onnx.save(proto, str(tmp))
    tmp.rename(path)
    return path


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cache", default=str(HERE / ".cache" / "perf_models"))
    ap.add_argument("--only", nargs="*")
    args = ap.parse_args(argv)
    cache = Path(args.cache)
    cache.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(1)
    failed = 0
    for name in args.only or list(MODELS):
        started = time.perf_counter()
        try:
            path = export(name, cache)
            print(f"{name}: {path} ({time.perf_counter() - started:.1f}s)", flush=True)
        except Exception as e:  # noqa: BLE001 - report and go on with the others
            failed += 1
            print(f"E {name}: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
