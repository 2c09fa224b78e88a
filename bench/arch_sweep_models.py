"""Export one architecture with random weights to ONNX (run with the bench venv's torch, never imported by openrknn).

Two initialisations:

- ``bnrand``: PyTorch's default init, then every BatchNorm gets randomised statistics and every
  BatchNorm / LayerNorm random affine terms: running statistics first measured on noise pictures
  in training mode, then jittered (variance ×U(0.5, 2), mean + N(0, 0.2σ)), γ ~ U(0.5, 1.5),
  β ~ N(0, 0.2). Purely random statistics (mean ~ N(0, 0.1), variance ~ U(0.5, 1.5)) let the
  signal die out in deep networks: MobileNet v2's output is then its classifier bias for every
  picture (spread 1e-7), where any cosine is ≈1 and says nothing.
- ``default``: PyTorch's default init as constructed (BatchNorm is the identity, activations
  shrink layer after layer: the tiny-range case).

Weights are random (seeded); nothing is downloaded.

Usage: ``python bench/arch_sweep_models.py ARCH INIT OUT.onnx`` (ARCH from ``ARCHS``).
"""
from __future__ import annotations

import sys
from pathlib import Path

import torch

# name -> (library, constructor name, input size)
ARCHS = {
    "resnet18": ("torchvision", "resnet18", 224),
    "mobilenet_v2": ("torchvision", "mobilenet_v2", 224),
    "mobilenet_v3_small": ("torchvision", "mobilenet_v3_small", 224),
    "shufflenet_v2_x1_0": ("torchvision", "shufflenet_v2_x1_0", 224),
    "efficientnet_b0": ("torchvision", "efficientnet_b0", 224),
    "regnet_y_400mf": ("torchvision", "regnet_y_400mf", 224),
    "mnasnet0_5": ("torchvision", "mnasnet0_5", 224),
    "squeezenet1_1": ("torchvision", "squeezenet1_1", 224),
    "googlenet": ("torchvision", "googlenet", 224),
    "lraspp_mobilenet_v3_large": ("torchvision.segmentation", "lraspp_mobilenet_v3_large", 224),
    "deit_tiny_patch16_224": ("timm", "deit_tiny_patch16_224", 224),
    "convnext_atto": ("timm", "convnext_atto", 224),
    "mobilevit_xxs": ("timm", "mobilevit_xxs", 224),
    "ghostnet_100": ("timm", "ghostnet_100", 224),
    "repvgg_a0": ("timm", "repvgg_a0", 224),
    "yolov8n": ("ultralytics", "yolov8n.yaml", 320),
    "yolo11n": ("ultralytics", "yolo11n.yaml", 320),
}
INITS = ("bnrand", "default")


def build(arch: str) -> torch.nn.Module:
    library, name, _ = ARCHS[arch]
    if library == "torchvision":
        import torchvision
        kwargs = {"aux_logits": False, "init_weights": True} if name == "googlenet" else {}
        return getattr(torchvision.models, name)(weights=None, **kwargs)
    if library == "torchvision.segmentation":
        import torchvision
        return getattr(torchvision.models.segmentation, name)(weights=None, weights_backbone=None)
    if library == "timm":
        import timm
        return timm.create_model(name, pretrained=False)
    from ultralytics import YOLO
    return YOLO(name).model


class _FirstOutput(torch.nn.Module):
    """Segmentation models return a dict, ultralytics a tuple in eval mode: export the main tensor."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.model(x)
        if isinstance(y, dict):
            return y["out"]
        return y[0] if isinstance(y, (tuple, list)) else y


def randomise_norms(model: torch.nn.Module, size: int, generator: torch.Generator) -> None:
    """Measure BatchNorm statistics on noise pictures, then randomise them and the norms' affine terms."""
    norms = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    for bn in norms:
        bn.reset_running_stats()
        bn.momentum = None   # cumulative average over the passes below
    model.train()
    with torch.no_grad():
        for _ in range(2):
            model(torch.rand(2, 3, size, size, generator=generator) * 2 - 1)
    model.eval()
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
                n = m.num_features
                m.running_var.mul_(torch.rand(n, generator=generator) * 1.5 + 0.5)
                m.running_mean.add_(torch.randn(n, generator=generator) * 0.2 * m.running_var.sqrt())
            is_norm = isinstance(m, (torch.nn.modules.batchnorm._BatchNorm, torch.nn.LayerNorm, torch.nn.GroupNorm)) \
                or type(m).__name__.startswith("LayerNorm")     # timm's LayerNorm2d
            if is_norm and getattr(m, "weight", None) is not None and getattr(m, "bias", None) is not None:
                m.weight.copy_(torch.rand(m.weight.shape, generator=generator) + 0.5)
                m.bias.copy_(torch.randn(m.bias.shape, generator=generator) * 0.2)


def export(arch: str, init: str, out: Path) -> None:
    torch.manual_seed(0)
    generator = torch.Generator().manual_seed(1)
    size = ARCHS[arch][2]
    model = build(arch)
    if init == "bnrand":
        randomise_norms(model, size, generator)
    if ARCHS[arch][0] == "ultralytics":
        model = model.fuse(verbose=False).eval()
        for m in model.modules():   # the stock export path: the head decodes boxes and class scores
            if type(m).__name__ in ("Detect", "v10Detect"):
                m.export, m.format = True, "onnx"
    model = _FirstOutput(model).eval()
    x = torch.rand(1, 3, size, size, generator=generator)
    with torch.no_grad():
        model(x)
    torch.onnx.export(model, (x,), str(out), opset_version=17, input_names=["images"], output_names=["output"],
                      dynamo=False, do_constant_folding=True)


if __name__ == "__main__":
    arch, init, out = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    if arch not in ARCHS or init not in INITS:
        sys.exit(f"unknown architecture or init: {arch} {init} (choose from {list(ARCHS)} × {INITS})")
    export(arch, init, out)
    print("exported", out)
