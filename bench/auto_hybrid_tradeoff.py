"""auto_hybrid: accuracy, estimated speed and build time, plain int8 vs auto_hybrid, side by side.

For each OCR model (shared data folder) and each mode::

    held-out cosine (mean, min) of the main output against onnxruntime fp32, estimated FPS on
    rk3566 and rk3588 (cost model), layers moved (float16 / int16), build time

Modes: ``int8`` (plain ``normal`` build), ``auto_hybrid`` (``build(auto_hybrid=True)``, threshold
0.995, target ``--target``, default rk3588: moves ordered by output cosine regained per estimated µs,
each layer to the cheaper of the precisions the target offers) and ``fp16_sensitivity`` (the same
search with no cost model: float16 only, layers ordered by sensitivity alone). Run the same script once per code base to compare them in the same run —
``--repo`` is put first on ``sys.path``, so ``--repo ../openrknn-main`` measures main's code (float16-only
auto_hybrid) and the default measures this checkout::

    python bench/auto_hybrid_tradeoff.py --repo ../openrknn-main --models det --modes auto_hybrid
    python bench/auto_hybrid_tradeoff.py --models det --modes int8,auto_hybrid

The detector gets 20 calibration and 10 held-out text pictures (``text_images.py``); the recognizer
and classifier the first 10 shared photos for calibration and the other 10 for evaluation.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from PIL import Image

HERE = Path(__file__).resolve().parent
OCR = dict(mean=[127.5] * 3, std=[127.5] * 3)
DET = dict(mean=[123.675, 116.28, 103.53], std=[58.395, 57.12, 57.375])
MODELS = {
    "det": dict(file="ch_PP-OCRv3_det_infer.onnx", size=(480, 480), text=True, **DET),
    "rec": dict(file="ch_PP-OCRv4_rec_infer.onnx", size=(48, 320), **OCR),
    "cls": dict(file="ch_ppocr_mobile_v2.0_cls_infer.onnx", size=(48, 192), **OCR),
}
THRESHOLD = 0.995
CHIPS = ("rk3566", "rk3588")


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b) + 1e-30))


def _pictures(folder: Path, case: dict, images: Path) -> tuple[list[Path], list[np.ndarray]]:
    """Calibration picture files and held-out NHWC uint8 inputs."""
    h, w = case["size"]
    if case.get("text"):
        sys.path.insert(0, str(HERE))
        from text_images import text_pictures
        calib = []
        for i, picture in enumerate(text_pictures(images, 20, case["size"], 0)):
            calib.append(folder / f"calib{i}.png")
            Image.fromarray(picture).save(calib[-1])
        held = [p[None] for p in text_pictures(images, 10, case["size"], 1)]
        return calib, held
    photos = sorted(p for p in images.iterdir() if p.suffix.lower() in (".png", ".jpg"))
    half = len(photos) // 2
    held = []
    for p in photos[half:]:
        with Image.open(p) as img:
            held.append(np.asarray(img.convert("RGB").resize((w, h)), np.uint8)[None])
    return photos[:half], held


def run(models: list[str], modes: list[str], data: Path, target: str = "rk3588") -> list[dict]:
    import onnxruntime as ort
    from openrknn import chips, profile
    from rknn.api import RKNN
    rows = []
    for key in models:
        case = MODELS[key]
        path = str(data / "models" / "onnx" / case["file"])
        session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        name = session.get_inputs()[0].name
        h, w = case["size"]
        with tempfile.TemporaryDirectory() as tmp:
            calib, held = _pictures(Path(tmp), case, data / "images")
            dataset = Path(tmp) / "dataset.txt"
            dataset.write_text("\n".join(str(p) for p in calib) + "\n")
            refs = [session.run(None, {name: ((x.astype(np.float32) - np.float32(case["mean"])) / np.float32(
                case["std"])).transpose(0, 3, 1, 2)})[0] for x in held]
            for mode in modes:
                rknn = RKNN(verbose=False)
                rknn.config(mean_values=[case["mean"]], std_values=[case["std"]], target_platform=target,
                            auto_hybrid_cos_thresh=THRESHOLD)
                rknn.load_onnx(model=path, inputs=[name], input_size_list=[[1, 3, h, w]])
                started = time.perf_counter()
                if mode == "fp16_sensitivity":
                    facts = _by_sensitivity(rknn, str(dataset))
                else:
                    if rknn.build(do_quantization=True, dataset=str(dataset), auto_hybrid=mode == "auto_hybrid") != 0:
                        raise RuntimeError(f"build failed: {key} {mode}")
                    facts = rknn._model.metadata.get("auto_hybrid") or {}
                seconds = time.perf_counter() - started
                rknn.init_runtime()
                cosines = [_cosine(rknn.inference(inputs=[x])[0], r) for x, r in zip(held, refs)]
                model = rknn._model
                fps = {chip: round(profile.estimate_perf(model, chips.get_chip(chip)).fps, 1) for chip in CHIPS}
                rows.append(dict(model=key, mode=mode, target=target, build_s=round(seconds, 1), cos_mean=round(float(np.mean(cosines)), 5),
                                 cos_min=round(float(np.min(cosines)), 5), fps=fps,
                                 float16=len(facts.get("float16_layers", facts.get("float_layers", []))),
                                 int16=len(facts.get("int16_layers", [])),
                                 search_cos=facts.get("output_cosine")))
                print(json.dumps(rows[-1]), flush=True)
                rknn.release()
    return rows


def _by_sensitivity(rknn, dataset: str) -> dict:
    """The float16-only search ordered by sensitivity alone (no chip: no costs), on the facade's
    loaded model; the facade then holds its choice. Returns the facts the table reads."""
    from openrknn.analysis.mixed_precision import auto_hybrid
    from openrknn.compile import build_model, calibration_setup
    from openrknn.quant.calibrate import CalibrationCache
    cfg, cache = rknn._cfg(), CalibrationCache()
    plain = build_model(rknn._source, cfg, True, dataset, None, None, cache=cache)
    settings, samples = calibration_setup(plain, cfg, dataset)
    result = auto_hybrid(plain, samples, settings, THRESHOLD, None, None, "float16", cache)
    rknn._model = result.model
    return {"float16_layers": result.float_layers, "int16_layers": result.int16_layers,
            "output_cosine": result.output_cosine}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repo", default=str(HERE.parent), help="code base to measure (put first on sys.path)")
    parser.add_argument("--data", default=str(HERE.parent.parent / "shared"))
    parser.add_argument("--models", default="det,rec,cls")
    parser.add_argument("--modes", default="int8,fp16_sensitivity,auto_hybrid")
    parser.add_argument("--target", default="rk3588", help="target_platform of the builds (auto_hybrid's cost model)")
    args = parser.parse_args()
    sys.path.insert(0, str(Path(args.repo).resolve()))
    run(args.models.split(","), args.modes.split(","), Path(args.data), args.target)


if __name__ == "__main__":
    main()
