"""The sweep's rows on a wider held-out set: 30 pictures instead of 4, both toolkits in the same run.

The sweep (``arch_sweep.py``) judges each build on 4 held-out pictures. In randomised networks with
squeeze-and-excitation blocks one quantized model's error pattern is shared by every picture and the
channel gains amplify it, so a row moves by a few hundredths with the pictures. This script judges
the same exports (``bench/.cache/arch_sweep/<arch>_<init>.onnx``, calibrated on the same pictures)
on the 10 pictures calibration does not use, each also mirrored and centre-cropped (30 pictures).
The vendor's outputs are cached beside the sweep's (``<arch>_<init>.vendor_int8.wide.npz``);
openrknn's are recomputed every run. int8 only.

Usage: ``OPENRKNN_RKNN_TOOLKIT2=/path/to/python python bench/arch_sweep_wide.py
--archs regnet_y_400mf,lraspp_mobilenet_v3_large [--init bnrand] [--data ../shared]``
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort
from PIL import Image

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from arch_sweep import IMAGENET, VENDOR_PYTHON, YOLO, _unpack, cosine  # noqa: E402
from arch_sweep_models import ARCHS  # noqa: E402


def wide_pictures(data: Path, cache: Path, size: int, calib: int) -> Path:
    """The pictures after the first ``calib``: as they are, mirrored, and the centre two thirds (uint8 NHWC)."""
    path = cache / f"pictures_{size}" / "wide_held_out.npy"
    if not path.exists():
        sources = sorted(p for p in (data / "images").iterdir()
                         if p.suffix.lower() in (".jpg", ".jpeg", ".png", ".bmp"))[calib:]
        pictures = []
        for source in sources:
            image = Image.open(source).convert("RGB")
            w, h = image.size
            for variant in (image, image.transpose(Image.FLIP_LEFT_RIGHT),
                            image.crop((w // 6, h // 6, w - w // 6, h - h // 6))):
                pictures.append(np.asarray(variant.resize((size, size), Image.BILINEAR), np.uint8))
        path.parent.mkdir(parents=True, exist_ok=True)
        np.save(path, np.stack(pictures))
    return path


def float_outputs(model: Path, norm: dict, pictures: np.ndarray) -> list[list[np.ndarray]]:
    session = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name
    return [session.run(None, {name: ((p.astype(np.float32) - norm["mean"]) / norm["std"])
                               .transpose(2, 0, 1)[None].astype(np.float32)}) for p in pictures]


def openrknn_outputs(model: Path, norm: dict, dataset: Path, pictures: np.ndarray) -> list[list[np.ndarray]]:
    from rknn.api import RKNN
    rknn = RKNN(verbose=False)
    try:
        rknn.config(mean_values=[norm["mean"]], std_values=[norm["std"]], target_platform="rk3588")
        if rknn.load_onnx(model=str(model)) != 0 or rknn.build(do_quantization=True, dataset=str(dataset)) != 0 \
                or rknn.init_runtime() != 0:
            raise SystemExit(f"openrknn could not build {model.name}")
        return [[np.asarray(o, np.float32) for o in rknn.inference(inputs=[p[None]])] for p in pictures]
    finally:
        rknn.release()


def vendor_outputs(model: Path, norm: dict, dataset: Path, pictures_path: Path, count: int) -> list[list[np.ndarray]]:
    result = model.with_suffix(".vendor_int8.wide.npz")
    if not result.exists():
        if not VENDOR_PYTHON:
            raise SystemExit("the vendor's column needs rknn-toolkit2: set OPENRKNN_RKNN_TOOLKIT2 to its Python")
        sweep_job = model.with_suffix(".vendor_int8.job.json")
        disabled = json.loads(sweep_job.read_text()).get("disable_rules", []) if sweep_job.exists() else []
        job = model.with_suffix(".vendor_int8.wide.job.json")
        job.write_text(json.dumps({"onnx": str(model), "dataset": str(dataset), "images": str(pictures_path),
                                   "mean": norm["mean"], "std": norm["std"], "platform": "rk3588",
                                   "quantize": True, "result": str(result), "disable_rules": disabled}))
        subprocess.run([VENDOR_PYTHON, "-I", str(REPO / "bench" / "arch_sweep_vendor.py"), str(job)],
                       cwd=model.parent, capture_output=True, text=True, timeout=3600)
        if not result.exists():
            raise SystemExit(f"rknn-toolkit2 could not build {model.name}")
    return _unpack(np.load(result), count)


def score(outputs: list[list[np.ndarray]], reference: list[list[np.ndarray]]) -> float:
    """Mean cosine over the pictures, the worst output counting (as the sweep scores)."""
    return float(min(np.mean([cosine(got[k], ref[k]) for got, ref in zip(outputs, reference)])
                     for k in range(len(reference[0]))))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--archs", required=True)
    parser.add_argument("--init", default="bnrand")
    parser.add_argument("--data", default=str(REPO.parent / "shared"))
    parser.add_argument("--calib", type=int, default=10)
    parser.add_argument("--cache", default=str(REPO / "bench" / ".cache" / "arch_sweep"))
    args = parser.parse_args()
    cache = Path(args.cache).resolve()
    print("| architecture | init | pictures | openrknn int8 | vendor int8 | Δ |\n|---|---|---|---|---|---|")
    for arch in args.archs.split(","):
        model = cache / f"{arch}_{args.init}.onnx"
        size = ARCHS[arch][2]
        dataset = cache / f"pictures_{size}" / "dataset.txt"
        if not model.exists() or not dataset.exists():
            raise SystemExit(f"run bench/arch_sweep.py for {arch} first (it exports the model and the pictures)")
        norm = YOLO if ARCHS[arch][0] == "ultralytics" else IMAGENET
        pictures_path = wide_pictures(Path(args.data), cache, size, args.calib)
        pictures = np.load(pictures_path)
        reference = float_outputs(model, norm, pictures)
        ours = score(openrknn_outputs(model, norm, dataset, pictures), reference)
        theirs = score(vendor_outputs(model, norm, dataset, pictures_path, len(pictures)), reference)
        print(f"| {arch} | {args.init} | {len(pictures)} | {ours:.4f} | {theirs:.4f} | {ours - theirs:+.4f} |",
              flush=True)


if __name__ == "__main__":
    main()
