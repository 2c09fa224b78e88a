"""load_pytorch: traced / scripted TorchScript models through the RKNN facade match torch itself.

torchvision is not used: the CPU torch wheel of this machine has no matching torchvision build,
so the three reference architectures (MobileNetV2-like, ResNet18-like and a small detector with
upsample + concat) are defined here with random weights and reduced input sizes.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from rknn.api import RKNN
from tests.helpers import cosine

torch = pytest.importorskip("torch")
nn = torch.nn

SIZE = 64
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def _errors(capsys) -> str:
    return "\n".join(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("E "))


def _conv_bn(cin: int, cout: int, k: int = 3, s: int = 1, groups: int = 1, act: type = nn.ReLU6) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, k, s, k // 2, groups=groups, bias=False), nn.BatchNorm2d(cout), act())


class InvertedResidual(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int, expand: int) -> None:
        super().__init__()
        mid = cin * expand
        self.use_res = stride == 1 and cin == cout
        self.body = nn.Sequential(_conv_bn(cin, mid, 1), _conv_bn(mid, mid, 3, stride, groups=mid),
                                  nn.Conv2d(mid, cout, 1, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = self.body(x)
        return x + y if self.use_res else y


class MobileNetV2Like(nn.Module):
    def __init__(self, classes: int = 10) -> None:
        super().__init__()
        cfg = [(16, 1, 1), (24, 2, 6), (24, 1, 6), (32, 2, 6), (32, 1, 6), (64, 2, 6)]
        layers, cin = [_conv_bn(3, 16, 3, 2)], 16
        for cout, stride, expand in cfg:
            layers.append(InvertedResidual(cin, cout, stride, expand))
            cin = cout
        layers.append(_conv_bn(cin, 128, 1))
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(128, classes))

    def forward(self, x):
        x = self.features(x)
        x = nn.functional.adaptive_avg_pool2d(x, 1).flatten(1)
        return self.classifier(x)


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = _conv_bn(cin, cout, 3, stride, act=nn.ReLU)
        self.conv2 = nn.Sequential(nn.Conv2d(cout, cout, 3, 1, 1, bias=False), nn.BatchNorm2d(cout))
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        identity = x if self.down is None else self.down(x)
        return torch.relu(self.conv2(self.conv1(x)) + identity)


class ResNet18Like(nn.Module):
    def __init__(self, classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 7, 2, 3, bias=False), nn.BatchNorm2d(16), nn.ReLU(),
                                  nn.MaxPool2d(3, 2, 1))
        blocks, cin = [], 16
        for cout, stride in [(16, 1), (16, 1), (32, 2), (32, 1), (64, 2), (64, 1), (128, 2), (128, 1)]:
            blocks.append(BasicBlock(cin, cout, stride))
            cin = cout
        self.layers = nn.Sequential(*blocks)
        self.fc = nn.Linear(128, classes)

    def forward(self, x):
        x = self.layers(self.stem(x))
        x = torch.flatten(nn.functional.adaptive_avg_pool2d(x, (1, 1)), 1)
        return torch.softmax(self.fc(x), dim=1)


class TinyDetector(nn.Module):
    """Backbone at strides 8/16/32, a top-down path with upsample + concat, and two heads."""

    def __init__(self, anchors: int = 3, classes: int = 4) -> None:
        super().__init__()
        act = nn.LeakyReLU
        self.c1 = nn.Sequential(_conv_bn(3, 16, 3, 2, act=act), _conv_bn(16, 32, 3, 2, act=act),
                                _conv_bn(32, 32, 3, 2, act=act))
        self.c2 = _conv_bn(32, 64, 3, 2, act=act)
        self.c3 = _conv_bn(64, 128, 3, 2, act=act)
        self.lat = _conv_bn(128, 64, 1, act=act)
        self.fuse = _conv_bn(64 + 64, 64, 3, act=act)
        self.fuse2 = _conv_bn(32 + 32, 32, 3, act=act)
        out = anchors * (5 + classes)
        self.head_m = nn.Conv2d(64, out, 1)
        self.head_s = nn.Conv2d(32, out, 1)

    def forward(self, x):
        p3 = self.c1(x)
        p4 = self.c2(p3)
        p5 = self.lat(self.c3(p4))
        m = self.fuse(torch.cat([nn.functional.interpolate(p5, scale_factor=2.0, mode="nearest"), p4], 1))
        s = self.fuse2(torch.cat([nn.functional.interpolate(m, scale_factor=2.0, mode="bilinear",
                                                            align_corners=False)[:, :32], p3], 1))
        return torch.sigmoid(self.head_m(m)), torch.sigmoid(self.head_s(s))


def _randomize_bn(module: nn.Module, gen: torch.Generator) -> None:
    for m in module.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.copy_(torch.randn(m.num_features, generator=gen) * 0.1)
            m.running_var.copy_(torch.rand(m.num_features, generator=gen) + 0.5)
            m.weight.data.copy_(torch.rand(m.num_features, generator=gen) + 0.5)
            m.bias.data.copy_(torch.randn(m.num_features, generator=gen) * 0.1)


@pytest.fixture(scope="session")
def traced(tmp_path_factory) -> dict[str, tuple[Path, np.ndarray, list[np.ndarray]]]:
    """Each architecture traced with random weights: (path, input, torch outputs)."""
    root = tmp_path_factory.mktemp("torchscript")
    gen = torch.Generator().manual_seed(0)
    x = torch.rand(1, 3, SIZE, SIZE, generator=gen)
    models = {}
    for name, cls in [("mobilenet_v2", MobileNetV2Like), ("resnet18", ResNet18Like), ("detector", TinyDetector)]:
        torch.manual_seed(1)
        net = cls().eval()
        with torch.no_grad():
            _randomize_bn(net, gen)
            script = torch.jit.trace(net, x)
            outs = script(x)
        outs = [o.numpy() for o in (outs if isinstance(outs, tuple) else (outs,))]
        path = root / f"{name}.pt"
        script.save(str(path))
        models[name] = (path, x.numpy(), outs)
    return models


def _run(path: Path, x: np.ndarray, float_dtype: str) -> list[np.ndarray]:
    rknn = RKNN()
    assert rknn.config(target_platform="rk3588", float_dtype=float_dtype) == 0
    assert rknn.load_pytorch(model=str(path), input_size_list=[list(x.shape)]) == 0
    assert rknn.build(do_quantization=False) == 0
    assert rknn.init_runtime() == 0
    outs = rknn.inference(inputs=[x], data_format="nchw")
    rknn.release()
    return outs


@pytest.mark.parametrize("name", ["mobilenet_v2", "resnet18", "detector"])
def test_fp32_path_matches_torch(traced, name):
    path, x, ref = traced[name]
    outs = _run(path, x, "float32")
    assert len(outs) == len(ref)
    for got, want in zip(outs, ref):
        assert got.shape == want.shape
        rel = np.max(np.abs(got - want)) / np.max(np.abs(want))
        assert rel <= 1e-4, f"{name}: relative error {rel:.2e}"


@pytest.mark.parametrize("name", ["mobilenet_v2", "detector"])
def test_fp16_path_cosine(traced, name):
    path, x, ref = traced[name]
    outs = _run(path, x, "float16")
    for got, want in zip(outs, ref):
        assert cosine(got, want) >= 0.999


def test_scripted_module_and_input_names(tmp_path):
    from openrknn.frontends.pytorch import load_pytorch

    class TwoInputs(nn.Module):
        def forward(self, image, bias):
            return torch.relu(image * 2.0 + bias), image.mean(dim=(2, 3))

    path = tmp_path / "scripted.pt"
    torch.jit.script(TwoInputs()).save(str(path))
    src = load_pytorch(str(path), [[1, 3, 4, 4], [1, 3, 1, 1]])
    assert [i.name for i in src.model.graph.input] == ["image", "bias"]
    assert [o.name for o in src.model.graph.output] == ["output0", "output1"]
    assert src.framework == "pytorch" and src.input_layouts == {"image": "NCHW", "bias": "NCHW"}


def test_state_dict_and_garbage_are_refused(tmp_path, capsys):
    net = nn.Linear(4, 2)
    weights = tmp_path / "weights.pth"
    torch.save(net.state_dict(), str(weights))
    rknn = RKNN()
    assert rknn.load_pytorch(model=str(weights), input_size_list=[[1, 4]]) == -1
    message = _errors(capsys)
    assert "not a TorchScript model" in message and "torch.jit.trace" in message
    truncated = tmp_path / "cut.pt"
    good = tmp_path / "good.pt"
    torch.jit.trace(net, torch.zeros(1, 4)).save(str(good))
    truncated.write_bytes(good.read_bytes()[:200])
    assert rknn.load_pytorch(model=str(truncated), input_size_list=[[1, 4]]) == -1
    assert "not a TorchScript model" in _errors(capsys)
    assert rknn.load_pytorch(model=str(tmp_path / "missing.pt"), input_size_list=[[1, 4]]) == -1
    assert "does not exist" in _errors(capsys)
    assert rknn.load_pytorch(model=str(good), input_size_list=[[1, 5]]) == -1
    assert "input_size_list" in _errors(capsys)


def test_missing_torch_names_the_extra(monkeypatch):
    from openrknn.errors import ModelLoadError
    from openrknn.frontends.pytorch import loader

    monkeypatch.setitem(sys.modules, "torch", None)
    with pytest.raises(ModelLoadError, match=r"pip install 'openrknn\[torch\]'"):
        loader.load_pytorch("any.pt", [[1, 3, 8, 8]])


@torch.library.custom_op("openrknn_test::clamp_half", mutates_args=())
def _clamp_half(x: torch.Tensor) -> torch.Tensor:
    return torch.clamp(x, -0.5, 0.5)


class ClampHalf:
    """The RKNN custom op implementing ``openrknn_test::clamp_half``."""

    op_type = "clamp_half"

    def shape_infer(self, node, in_shapes, in_dtypes):
        return in_shapes, in_dtypes

    def compute(self, node, inputs):
        return [np.clip(inputs[0], -0.5, 0.5)]


def test_custom_op_needs_registration(tmp_path, capsys):
    class UsesCustom(nn.Module):
        def forward(self, x):
            return torch.ops.openrknn_test.clamp_half(x * 2.0) + 1.0

    path = tmp_path / "custom.pt"
    torch.jit.trace(UsesCustom(), torch.zeros(1, 3, 4, 4)).save(str(path))
    rknn = RKNN()
    assert rknn.config(target_platform="rk3588", float_dtype="float32") == 0
    assert rknn.load_pytorch(model=str(path), input_size_list=[[1, 3, 4, 4]]) == -1
    message = _errors(capsys)
    assert "'openrknn_test::clamp_half' is not supported" in message and "reg_custom_op" in message
    assert rknn.reg_custom_op(ClampHalf) == 0
    assert rknn.load_pytorch(model=str(path), input_size_list=[[1, 3, 4, 4]]) == 0
    assert rknn.build(do_quantization=False) == 0 and rknn.init_runtime() == 0
    x = np.random.default_rng(0).normal(size=(1, 3, 4, 4)).astype(np.float32)
    got = rknn.inference(inputs=[x], data_format="nchw")[0]
    np.testing.assert_allclose(got, np.clip(2 * x, -0.5, 0.5) + 1.0, rtol=1e-6)
