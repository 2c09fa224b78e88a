"""Quantization quality and speed on the demo model and the real ONNX models, in one run.

For every model (the embedded demo MobileNet and each ``models/onnx/*.onnx`` of the shared data
folder) and every algorithm, with the default w8a8 / channel settings::

    build time, cosine mean and min of the main output against onnxruntime fp32 on the original
    model, the largest absolute difference, and the simulator / onnxruntime latency ratio

A main output with fewer than ``SMALL_OUTPUT`` values (silero's speech probability) is compared
as one vector stacked over all evaluation samples: a per-sample cosine of one number is always 1.

Calibration uses the first half of the photos, evaluation the other half (disjoint); the text
detector gets 20 calibration and 10 held-out text pictures (``text_images.py``, different seeds).
The audio model (silero VAD) is fed 512-sample rows cut from the photos' grey levels here;
``bench/vad_speech.py`` judges it on speech.

The build's log is hidden; ``QQ_LOG=INFO`` shows it (the bias-correction decision, for example).

Besides the algorithms, two pseudo-algorithms: ``float`` (the float16 build, no quantization) and
``auto_hybrid`` (``normal`` with ``build(auto_hybrid=True)``, threshold ``--hybrid-thresh``).

Usage: ``python bench/quant_quality.py [--data ../shared] [--algorithms normal,kl_divergence,mmse]
[--models ch_PP-OCRv4_rec_infer,...]``
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from PIL import Image

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from openrknn import log  # noqa: E402
from rknn.api import RKNN  # noqa: E402

OCR = dict(mean=[127.5] * 3, std=[127.5] * 3)
DET = dict(mean=[123.675, 116.28, 103.53], std=[58.395, 57.12, 57.375])
DEMO = dict(mean=[123.675, 116.28, 103.53], std=[58.395, 57.12, 57.375])
MODELS = {
    "demo_mobilenet": dict(size=(224, 224), **DEMO),
    "ch_ppocr_mobile_v2.0_cls_infer": dict(size=(48, 192), **OCR),
    "ch_PP-OCRv4_rec_infer": dict(size=(48, 320), **OCR),
    "ch_PP-OCRv3_det_infer": dict(size=(480, 480), text=True, **DET),
    "silero_vad_16k_op15": dict(size=None),
}


# Outputs with fewer values (silero's speech probability is one number) are compared as one vector
# stacked over all evaluation samples.
SMALL_OUTPUT = 16


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b) + 1e-30))


def _images(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.suffix.lower() in (".jpg", ".jpeg", ".png", ".bmp"))


def _audio(image: Path, rng: np.random.Generator) -> list[np.ndarray]:
    with Image.open(image) as img:
        grey = np.asarray(img.convert("L").resize((512, 8)), np.float32) / 255.0 - 0.5
    state = rng.normal(0, 0.05, (2, 1, 128)).astype(np.float32)
    return [grey[3:4] * 0.6, state, np.array(16000, np.int64)]


def _write_dataset(folder: Path, case: dict, images: list[Path]) -> str:
    path = folder / "dataset.txt"
    lines = []
    if case["size"]:
        lines = [str(p) for p in images]
    else:
        rng = np.random.default_rng(0)
        for i, image in enumerate(images):
            names = []
            for k, array in enumerate(_audio(image, rng)):
                name = folder / f"s{i}_{k}.npy"
                np.save(name, array)
                names.append(name.name)
            lines.append(" ".join(names))
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def _eval_inputs(case: dict, images: list[Path]) -> list[list[np.ndarray]]:
    if not case["size"]:
        rng = np.random.default_rng(1)
        return [_audio(p, rng) for p in images]
    h, w = case["size"]
    out = []
    for p in images:
        with Image.open(p) as img:
            out.append([np.asarray(img.convert("RGB").resize((w, h)), np.uint8)[None]])
    return out


def _reference_feeds(session: ort.InferenceSession, case: dict, inputs: list[np.ndarray]) -> dict:
    names = [i.name for i in session.get_inputs()]
    if not case["size"]:
        return dict(zip(names, inputs))
    x = (inputs[0].astype(np.float32) - np.float32(case["mean"])) / np.float32(case["std"])
    return {names[0]: x.transpose(0, 3, 1, 2).astype(np.float32)}


def _text_sets(folder: Path, case: dict, photos: Path) -> tuple[list[Path], list[Path]]:
    """20 calibration and 10 held-out text pictures written as PNG files in ``folder``."""
    sys.path.insert(0, str(REPO / "bench"))
    from text_images import text_pictures
    sets = []
    for label, count, seed in (("calib", 20, 0), ("eval", 10, 1)):
        paths = []
        for i, picture in enumerate(text_pictures(photos, count, case["size"], seed)):
            paths.append(folder / f"{label}{i}.png")
            Image.fromarray(picture).save(paths[-1])
        sets.append(paths)
    return sets[0], sets[1]


HYBRID_THRESH = 0.995


def _build(path: str, case: dict, algorithm: str, dataset: str) -> tuple[RKNN, float]:
    rknn = RKNN()
    hybrid = algorithm == "auto_hybrid"
    quantized_algorithm = "normal" if algorithm in ("auto_hybrid", "float") else algorithm
    if case["size"]:
        h, w = case["size"]
        rknn.config(mean_values=[case["mean"]], std_values=[case["std"]], target_platform="rk3588",
                    quantized_algorithm=quantized_algorithm, auto_hybrid_cos_thresh=HYBRID_THRESH)
        ok = rknn.load_onnx(model=path, inputs=[_input_name(path)], input_size_list=[[1, 3, h, w]])
    else:
        rknn.config(target_platform="rk3588", quantized_algorithm=quantized_algorithm,
                    auto_hybrid_cos_thresh=HYBRID_THRESH)
        ok = rknn.load_onnx(model=path, inputs=["input", "state", "sr"], input_size_list=[[1, 512], [2, 1, 128], []])
    if ok != 0:
        raise RuntimeError(f"load_onnx failed for {path}")
    started = time.perf_counter()
    if rknn.build(do_quantization=algorithm != "float", dataset=dataset, auto_hybrid=hybrid) != 0:
        raise RuntimeError(f"build failed for {path} ({algorithm})")
    seconds = time.perf_counter() - started
    if rknn.init_runtime() != 0:
        raise RuntimeError(f"init_runtime failed for {path}")
    return rknn, seconds


def _input_name(path: str) -> str:
    model = onnx.load(path, load_external_data=False)
    return model.graph.input[0].name


def _latency(rknn: RKNN, session: ort.InferenceSession, sim_inputs: list, feeds: dict, rounds: int = 10) -> float:
    sim_t, ref_t = [], []
    for _ in range(rounds):   # alternate so machine load affects both alike
        t = time.perf_counter()
        rknn.inference(inputs=sim_inputs)
        sim_t.append(time.perf_counter() - t)
        t = time.perf_counter()
        session.run(None, feeds)
        ref_t.append(time.perf_counter() - t)
    return float(np.median(sim_t) / np.median(ref_t))


def bench_model(name: str, path: str, images: list[Path], algorithms: list[str]) -> list[dict]:
    case = MODELS[name]
    half = len(images) // 2
    calibration, evaluation = images[:half], images[half:]
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        if case.get("text"):
            calibration, evaluation = _text_sets(Path(tmp), case, images[0].parent)
        dataset = _write_dataset(Path(tmp), case, calibration)
        eval_inputs = _eval_inputs(case, evaluation)
        references = [session.run(None, _reference_feeds(session, case, x))[0] for x in eval_inputs]
        for algorithm in algorithms:
            rknn, seconds = _build(path, case, algorithm, dataset)
            outputs = [rknn.inference(inputs=x)[0] for x in eval_inputs]
            if references[0].size < SMALL_OUTPUT:   # a per-sample cosine of a scalar is always ±1
                cosines = [cosine(np.concatenate([o.ravel() for o in outputs]),
                                  np.concatenate([r.ravel() for r in references]))]
            else:
                cosines = [cosine(o, ref) for o, ref in zip(outputs, references)]
            ratio = _latency(rknn, session, eval_inputs[0], _reference_feeds(session, case, eval_inputs[0]))
            worst = max(float(np.max(np.abs(o - ref))) for o, ref in zip(outputs, references))
            moved = len((rknn._model.metadata.get("auto_hybrid") or {}).get("float_layers", []))
            label = f"{algorithm} ({moved} fp16)" if algorithm == "auto_hybrid" else algorithm
            rows.append(dict(model=name, algorithm=label, build_s=seconds, cos_mean=float(np.mean(cosines)),
                             cos_min=float(np.min(cosines)), max_abs=worst, latency_ratio=ratio))
            rknn.release()
    return rows


def main(argv: list[str] | None = None) -> int:
    global HYBRID_THRESH
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=os.environ.get("OPENRKNN_TEST_DATA", str(REPO.parent / "shared")))
    parser.add_argument("--algorithms", default="normal,kl_divergence,mmse")
    parser.add_argument("--models", default=",".join(MODELS), help="comma-separated model names to run")
    parser.add_argument("--hybrid-thresh", type=float, default=HYBRID_THRESH)
    args = parser.parse_args(argv)
    HYBRID_THRESH = args.hybrid_thresh
    log.configure(verbose=False)
    log.logger.setLevel(os.environ.get("QQ_LOG", "ERROR"))
    data = Path(args.data)
    images = _images(data / "images")
    algorithms = args.algorithms.split(",")
    rows = []
    models = set(args.models.split(","))
    with tempfile.TemporaryDirectory() as tmp:
        from openrknn.cli.demo_model import build_demo_model
        demo = Path(tmp) / "demo_mobilenet.onnx"
        onnx.save(build_demo_model(), demo)
        if "demo_mobilenet" in models:
            rows += bench_model("demo_mobilenet", str(demo), images, algorithms)
    for path in sorted((data / "models" / "onnx").glob("*.onnx")):
        if path.stem in MODELS and path.stem in models:
            rows += bench_model(path.stem, str(path), images, algorithms)
    print(f"{'model':34s} {'algorithm':20s} {'build s':>8s} {'cos mean':>9s} {'cos min':>9s} {'max abs':>9s} {'sim/ort':>8s}")
    for r in rows:
        print(f"{r['model']:34s} {r['algorithm']:20s} {r['build_s']:8.2f} {r['cos_mean']:9.5f} {r['cos_min']:9.5f} {r['max_abs']:9.3g} "
              f"{r['latency_ratio']:8.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
