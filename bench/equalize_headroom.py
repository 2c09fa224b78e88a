"""Depthwise equalization with and without headroom / held-out check, next to rknn-toolkit2, one run.

The rule that rescales ``Conv → ReLU → depthwise Conv`` channels (``quant/fold.py``) used to raise
every channel to the widest channel's calibration range: pictures calibration did not show were
clipped. This compares, on held-out pictures, the int8 cosine against float of:

- ``off``: no equalization;
- ``old``: every channel raised to the widest range (no headroom, no check);
- ``headroom``: ``HEADROOM``× room per channel, no check;
- ``check``: no headroom, each rescale kept only where held-out calibration samples show less error;
- ``new``: both (the default); ``new_h4``: the same with 4× headroom;
- ``vendor``: rknn-toolkit2 2.5.0 on the same calibration list and pictures.

Models: ShuffleNet v2 and MobileNet v2 (torchvision, random weights, randomised BatchNorm
statistics; exported by ``arch_sweep_models.py`` into the sweep's cache) on the shared photos
(the first 10 — or N with ``name@N`` — calibrate, the last 10 judge; ``name@text`` calibrates on
10 text pictures, a shifted domain where calibration maxima say least about the judged photos) and PP-OCRv3 det on text pictures (``text_images.py``: 20
calibrate, 10 other ones judge).

Usage: ``python bench/equalize_headroom.py [--data ../shared] [--models shufflenet,ocr_det]``
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

from arch_sweep import BENCH_PYTHON, IMAGENET, VENDOR_PYTHON, cosine  # noqa: E402
from openrknn import log  # noqa: E402
from openrknn.quant import fold, quantizer  # noqa: E402
from rknn.api import RKNN  # noqa: E402

DET = dict(mean=[123.675, 116.28, 103.53], std=[58.395, 57.12, 57.375])
VARIANTS = {   # name -> (equalize at all, HEADROOM, held-out check)
    "off": (False, 1.0, False), "old": (True, 1.0, False), "headroom": (True, fold.HEADROOM, False),
    "check": (True, 1.0, True), "new": (True, fold.HEADROOM, True), "new_h4": (True, 4.0, True),
}


def photo_case(cache: Path, data: Path, name: str) -> dict:
    """``arch`` or ``arch@N``: calibrate on the first N photos (10 by default), judge on the last 10;
    ``arch@text``: calibrate on 10 text pictures (a shifted domain), judge on the last 10 photos."""
    arch, _, count = name.partition("@")
    text = count == "text"
    count = 10 if text or not count else int(count)
    model = cache / f"{arch}_bnrand.onnx"
    if not model.exists():
        subprocess.run([BENCH_PYTHON, "-I", str(REPO / "bench" / "arch_sweep_models.py"), arch, "bnrand", str(model)],
                       cwd=cache, check=True, capture_output=True)
    photos = sorted(p for p in (data / "images").iterdir() if p.suffix.lower() in (".png", ".jpg", ".jpeg"))
    folder = cache / f"eq_{arch}_{'text' if text else count}"
    folder.mkdir(exist_ok=True)
    calib = []
    if text:
        from text_images import text_pictures
        for i, picture in enumerate(text_pictures(data / "images", count, (224, 224), 0)):
            calib.append(folder / f"calib{i}.png")
            Image.fromarray(picture).save(calib[-1])
    for p in ([] if text else photos[:count]):
        calib.append(folder / f"calib_{p.stem}.png")
        Image.open(p).convert("RGB").resize((224, 224), Image.BILINEAR).save(calib[-1])
    held = np.stack([np.asarray(Image.open(p).convert("RGB").resize((224, 224), Image.BILINEAR), np.uint8)
                     for p in photos[-10:]])
    return dict(name=f"{arch} ({'text' if text else count} calib)", model=model, calib=calib, held=held, norm=IMAGENET, folder=folder)


def text_case(cache: Path, data: Path) -> dict:
    from text_images import text_pictures
    folder = cache / "eq_ocr_det"
    folder.mkdir(exist_ok=True)
    calib = []
    for i, picture in enumerate(text_pictures(data / "images", 20, (480, 480), 0)):
        calib.append(folder / f"calib{i}.png")
        Image.fromarray(picture).save(calib[-1])
    held = np.stack(text_pictures(data / "images", 10, (480, 480), 1))
    return dict(name="ch_PP-OCRv3_det", model=data / "models" / "onnx" / "ch_PP-OCRv3_det_infer.onnx", calib=calib,
                held=held, norm=DET, folder=folder, inputs=["x"], size=[[1, 3, 480, 480]])


def reference(case: dict) -> list[np.ndarray]:
    session = ort.InferenceSession(str(case["model"]), providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name
    out = []
    for image in case["held"]:
        x = ((image.astype(np.float32) - case["norm"]["mean"]) / case["norm"]["std"]).transpose(2, 0, 1)[None]
        out.append(session.run(None, {name: x.astype(np.float32)})[0])
    return out


def openrknn_outputs(case: dict, dataset: str, variant: str) -> tuple[list[np.ndarray], str]:
    equalize, headroom, check = VARIANTS[variant]
    saved = (quantizer.equalize_depthwise, fold.HEADROOM, fold.HELD_OUT_EVERY)
    messages: list[str] = []
    original_info = log.info
    try:
        if not equalize:
            quantizer.equalize_depthwise = lambda *a, **k: 0
        fold.HEADROOM = headroom
        fold.HELD_OUT_EVERY = saved[2] if check else 10 ** 9
        log.info = lambda msg: messages.append(msg.split("; fewer than")[0]) if "equalization" in msg else None
        rknn = RKNN()
        rknn.config(mean_values=[case["norm"]["mean"]], std_values=[case["norm"]["std"]], target_platform="rk3588")
        assert rknn.load_onnx(model=str(case["model"]), inputs=case.get("inputs"), input_size_list=case.get("size")) == 0
        assert rknn.build(do_quantization=True, dataset=dataset) == 0
        assert rknn.init_runtime() == 0
        outputs = [rknn.inference(inputs=[image[None]])[0] for image in case["held"]]
        rknn.release()
    finally:
        quantizer.equalize_depthwise, fold.HEADROOM, fold.HELD_OUT_EVERY = saved
        log.info = original_info
    return outputs, messages[0] if messages else ""


def vendor_outputs(case: dict, dataset: str) -> list[np.ndarray] | None:
    folder = case["folder"]
    np.save(folder / "held.npy", case["held"])
    result = folder / "vendor.npz"
    job = folder / "vendor_job.json"
    job.write_text(json.dumps({"onnx": str(case["model"]), "dataset": dataset, "images": str(folder / "held.npy"),
                               "mean": case["norm"]["mean"], "std": case["norm"]["std"], "platform": "rk3588",
                               "quantize": True, "result": str(result), "inputs": case.get("inputs"),
                               "input_size_list": case.get("size")}))
    result.unlink(missing_ok=True)
    subprocess.run([VENDOR_PYTHON, "-I", str(REPO / "bench" / "arch_sweep_vendor.py"), str(job)], cwd=folder,
                   capture_output=True, timeout=3600)
    if not result.exists():
        return None
    data = np.load(result)
    return [data[f"out0_{i}"] for i in range(len(case["held"]))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(REPO.parent / "shared"))
    parser.add_argument("--cache", default=str(REPO / "bench" / ".cache" / "arch_sweep"))
    parser.add_argument("--models", default="shufflenet_v2_x1_0,shufflenet_v2_x1_0@4,shufflenet_v2_x1_0@text,ocr_det")
    args = parser.parse_args()
    data, cache = Path(args.data), Path(args.cache)
    cache.mkdir(parents=True, exist_ok=True)
    log.configure(verbose=False)
    rows = []
    for name in args.models.split(","):
        case = text_case(cache, data) if name == "ocr_det" else photo_case(cache, data, name)
        dataset = case["folder"] / "dataset.txt"
        dataset.write_text("\n".join(str(p) for p in case["calib"]) + "\n")
        ref = reference(case)
        for variant in list(VARIANTS) + ["vendor"]:
            if variant == "vendor":
                outputs, note = vendor_outputs(case, str(dataset)), ""
            else:
                outputs, note = openrknn_outputs(case, str(dataset), variant)
            if outputs is None:
                rows.append((case["name"], variant, float("nan"), float("nan"), "failed"))
                continue
            cosines = [cosine(o, r) for o, r in zip(outputs, ref)]
            rows.append((case["name"], variant, float(np.mean(cosines)), float(np.min(cosines)), note))
            print(f"{case['name']:22s} {variant:9s} mean {np.mean(cosines):.4f} min {np.min(cosines):.4f}  {note}",
                  flush=True)
    print(f"\n| model | variant | cos mean | cos min | applied |\n|---|---|---|---|---|")
    for model, variant, mean, low, note in rows:
        print(f"| {model} | {variant} | {mean:.4f} | {low:.4f} | {note.replace('quantize: ', '')} |")


if __name__ == "__main__":
    main()
