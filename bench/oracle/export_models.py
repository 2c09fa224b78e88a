"""Export the oracle corpus: random-weight architectures as ONNX, into a gitignored cache.

    /work/benchvenv/bin/python bench/oracle/export_models.py [--cache bench/oracle/.cache] [--only NAME ...]

Runs in the bench venv (torch, torchvision, timm, ultralytics, yolov5, segmentation-models-pytorch),
never in openrknn's. Weights are random (seeded): the layer graph, not accuracy, is compared. Inputs
are small (the machine is shared). One file per model; existing files are kept (resumable).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
CLS = (1, 3, 96, 96)
DET = (1, 3, 160, 160)


def _tv(name, **kw):
    def make():
        import torchvision
        return getattr(torchvision.models, name)(weights=None, **kw)
    return make


def _timm(name, **kw):
    def make():
        import timm
        return timm.create_model(name, pretrained=False, **kw)
    return make


def _smp(arch, encoder):
    def make():
        import segmentation_models_pytorch as smp
        return getattr(smp, arch)(encoder_name=encoder, encoder_weights=None, classes=2)
    return make


def _ultralytics(yaml):
    def make():
        from ultralytics import YOLO
        model = YOLO(yaml).model.eval()
        for m in model.modules():   # export form: the head returns one tensor
            if hasattr(m, "export"):
                m.export = True
            if hasattr(m, "format"):
                m.format = "onnx"
        return model
    return make


def _yolov5(yaml):
    def make():
        import os
        import yolov5
        from yolov5.models.yolo import Model
        model = Model(os.path.join(os.path.dirname(yolov5.__file__), "models", yaml)).eval()
        model.model[-1].export = True
        return model
    return make


def _encoder():
    import torch
    torch.backends.mha.set_fastpath_enabled(False)   # the fused kernel has no ONNX form

    class Encoder(torch.nn.Module):
        """A small transformer encoder over 16 tokens of 64 features (2 layers, 4 heads)."""

        def __init__(self):
            super().__init__()
            layer = torch.nn.TransformerEncoderLayer(64, 4, 128, dropout=0.0, batch_first=True)
            self.body = torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
            self.head = torch.nn.Linear(64, 10)

        def forward(self, x):
            return self.head(self.body(x))
    return Encoder()


MODELS = {   # name -> (factory, input shape)
    "resnet18": (_tv("resnet18"), CLS), "resnet50": (_tv("resnet50"), CLS),
    "mobilenet_v2": (_tv("mobilenet_v2"), CLS), "mobilenet_v3_small": (_tv("mobilenet_v3_small"), CLS),
    "mobilenet_v3_large": (_tv("mobilenet_v3_large"), CLS), "efficientnet_b0": (_tv("efficientnet_b0"), CLS),
    "regnet_x_400mf": (_tv("regnet_x_400mf"), CLS), "regnet_y_400mf": (_tv("regnet_y_400mf"), CLS),
    "shufflenet_v2_x0_5": (_tv("shufflenet_v2_x0_5"), CLS), "convnext_tiny": (_tv("convnext_tiny"), CLS),
    "squeezenet1_0": (_tv("squeezenet1_0"), CLS), "mnasnet0_5": (_tv("mnasnet0_5"), CLS),
    "googlenet": (_tv("googlenet", aux_logits=False, init_weights=True), CLS),
    "ghostnet_100": (_timm("ghostnet_100"), CLS), "lcnet_050": (_timm("lcnet_050"), CLS),
    "efficientnet_lite0": (_timm("efficientnet_lite0"), CLS), "repvgg_a0": (_timm("repvgg_a0"), CLS),
    "mixnet_s": (_timm("mixnet_s"), CLS), "rexnet_100": (_timm("rexnet_100"), CLS),
    "mobileone_s0": (_timm("mobileone_s0"), CLS), "resnet18d": (_timm("resnet18d"), CLS),
    "deit_tiny": (_timm("deit_tiny_patch16_224", img_size=96), CLS),
    "vit_tiny": (_timm("vit_tiny_patch16_224", img_size=96), CLS),
    "yolov5n": (_yolov5("yolov5n.yaml"), DET), "yolov5s": (_yolov5("yolov5s.yaml"), DET),
    "yolov8n": (_ultralytics("yolov8n.yaml"), DET), "yolov8n_seg": (_ultralytics("yolov8n-seg.yaml"), DET),
    "yolo11n": (_ultralytics("yolo11n.yaml"), DET),
    "unet_resnet18": (_smp("Unet", "resnet18"), (1, 3, 128, 128)),
    "deeplabv3plus_mobilenet_v2": (_smp("DeepLabV3Plus", "mobilenet_v2"), (1, 3, 128, 128)),
    "fpn_resnet18": (_smp("FPN", "resnet18"), (1, 3, 128, 128)),
    "transformer_encoder": (lambda: _encoder(), (1, 16, 64)),
}


def export(name: str, cache: Path, opset: int = 13) -> Path:
    """Write ``name`` at ``opset`` (17 when an op needs it: the attention models)."""
    import torch
    path = cache / f"{name}.onnx"
    if path.exists():
        return path
    factory, shape = MODELS[name]
    torch.manual_seed(0)
    model = factory().eval()
    x = torch.rand(*shape)
    tmp = path.with_suffix(".tmp")
    with torch.no_grad():
        try:
            torch.onnx.export(model, (x,), str(tmp), input_names=["x"], opset_version=opset, dynamo=False,
                              do_constant_folding=True)
        except torch.onnx.errors.UnsupportedOperatorError:   # attention: opset 14 has its ONNX form
            torch.onnx.export(model, (x,), str(tmp), input_names=["x"], opset_version=17, dynamo=False,
                              do_constant_folding=True)
    tmp.rename(path)
    return path


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cache", default=str(HERE / ".cache"))
    ap.add_argument("--only", nargs="*")
    args = ap.parse_args(argv)
    cache = Path(args.cache)
    cache.mkdir(parents=True, exist_ok=True)
    for name in args.only or list(MODELS):
        started = time.perf_counter()
        try:
            export(name, cache)
            print(f"{name}: ok {time.perf_counter() - started:.1f} s", flush=True)
        except Exception as e:  # noqa: BLE001 - one architecture failing must not stop the corpus
            print(f"{name}: FAILED {type(e).__name__}: {str(e)[:200]}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
