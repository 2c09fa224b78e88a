"""openrknn's quantization compiled by Rockchip's rknn-toolkit2, against the vendor's own builds, in one run.

For the shared OCR detector and classifier, on held-out pictures (disjoint from calibration):

* ``vendor normal`` / ``vendor mmse``: rknn-toolkit2 alone (its ``build(do_quantization=True)``), its simulator;
* ``openrknn X → vendor``: openrknn builds with algorithm X (normal, mmse, auto_hybrid) — with
  ``weight_qtype='asymmetric_quantized'`` (the vendor's own weight grid) and with the default — then
  ``export_rknn(toolchain='rknn-toolkit2')`` compiles it with the vendor toolkit; the vendor's simulator
  runs that very build.

Columns: cosine of the main output against the float model (onnxruntime fp32), openrknn's own
simulator on its build, the vendor simulator on the exported build, the agreement of those two, and
build time (openrknn build; vendor compile). Needs the vendor's Python: ``--toolchain-python`` or
``$OPENRKNN_RKNN_TOOLKIT2``.

Usage: ``python bench/vendor_backend.py [--data ../shared] [--models det,cls] [--toolchain-python PY]
[--weight-qtypes asymmetric_quantized,symmetric_quantized] [--vendor-algorithms normal,mmse]``
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort
from PIL import Image

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from text_images import text_pictures  # noqa: E402

from openrknn.export import rockchip  # noqa: E402
from rknn.api import RKNN  # noqa: E402

IMAGENET = dict(mean=[123.675, 116.28, 103.53], std=[58.395, 57.12, 57.375])
MODELS = {
    "det": dict(file="ch_PP-OCRv3_det_infer.onnx", size=(480, 480), text=True, **IMAGENET),
    "cls": dict(file="ch_ppocr_mobile_v2.0_cls_infer.onnx", size=(48, 192), text=False, **IMAGENET),
}
CALIBRATION, HELD_OUT = 20, 10

_VENDOR_ALONE = """
import json, sys, time, numpy as np
from rknn.api import RKNN
job = json.load(open(sys.argv[1]))
r = RKNN(verbose=False)
r.config(mean_values=[job['mean']], std_values=[job['std']], target_platform='rk3588',
         quantized_algorithm=job['algorithm'])
assert r.load_onnx(model=job['onnx'], inputs=[job['input']], input_size_list=[job['shape']]) == 0
t = time.time()
assert r.build(do_quantization=True, dataset=job['dataset']) == 0
seconds = time.time() - t
assert r.init_runtime() == 0
outs = []
for k, p in enumerate(job['samples']):
    o = r.inference(inputs=[np.load(p)])[0]
    outs.append(p + '.vendor.npy'); np.save(outs[-1], o.astype(np.float32))
json.dump({'seconds': seconds, 'outputs': outs}, open(sys.argv[2], 'w'))
"""


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.astype(np.float64).ravel(), b.astype(np.float64).ravel()
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b) + 1e-30))


# A main output with fewer values than this (the classifier's two class scores) is compared as one
# vector stacked over the held-out pictures: a cosine of two numbers says little.
SMALL_OUTPUT = 16


def agreement(xs: list[np.ndarray], ys: list[np.ndarray]) -> tuple[float, float]:
    """Mean and worst cosine over the pictures (one stacked figure for small outputs)."""
    if xs[0].size < SMALL_OUTPUT:
        c = cosine(np.concatenate([x.ravel() for x in xs]), np.concatenate([y.ravel() for y in ys]))
        return c, c
    values = [cosine(x, y) for x, y in zip(xs, ys)]
    return float(np.mean(values)), float(min(values))


def pictures(data: Path, spec: dict, count: int, seed: int) -> list[np.ndarray]:
    h, w = spec["size"]
    if spec["text"]:
        return text_pictures(data / "images", count, (h, w), seed=seed)
    photos = sorted((data / "images").glob("*.png"))
    rng = np.random.default_rng(seed)
    out = []
    for k in range(count):
        img = Image.open(photos[(k + seed * 7) % len(photos)]).convert("RGB")
        x0, y0 = rng.integers(0, max(1, img.width - 4 * w // 2)), rng.integers(0, max(1, img.height - h))
        out.append(np.asarray(img.crop((x0, y0, x0 + 2 * w, y0 + 2 * h)).resize((w, h)), np.uint8))
    return out


def float_outputs(model_path: str, spec: dict, images: list[np.ndarray]) -> list[np.ndarray]:
    session = ort.InferenceSession(model_path, providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name
    mean, std = np.array(spec["mean"], np.float32), np.array(spec["std"], np.float32)
    return [session.run(None, {name: ((img - mean) / std).transpose(2, 0, 1)[None].astype(np.float32)})[0]
            for img in images]


def vendor_alone(python: str, onnx_path: str, spec: dict, input_name: str, dataset: str, samples: list[str],
                 algorithm: str, work: str) -> tuple[float, list[np.ndarray]]:
    job = dict(onnx=onnx_path, mean=spec["mean"], std=spec["std"], input=input_name,
               shape=[1, 3, *spec["size"]], dataset=dataset, samples=samples, algorithm=algorithm)
    paths = [os.path.join(work, n) for n in ("alone.json", "alone_result.json", "alone.py")]
    Path(paths[0]).write_text(json.dumps(job))
    Path(paths[2]).write_text(_VENDOR_ALONE)
    subprocess.run([python, "-I", paths[2], paths[0], paths[1]], cwd=work, check=True, capture_output=True)
    result = json.loads(Path(paths[1]).read_text())
    return result["seconds"], [np.load(p) for p in result["outputs"]]


def run_model(key: str, data: Path, python: str, vendor_algorithms: list[str],
              weight_qtypes: list[str]) -> list[tuple]:
    spec = MODELS[key]
    onnx_path = str(data / "models" / "onnx" / spec["file"])
    rows = []
    with tempfile.TemporaryDirectory(prefix="vendor-bench-") as work:
        calib = pictures(data, spec, CALIBRATION, seed=0)
        held = pictures(data, spec, HELD_OUT, seed=1)
        dataset = os.path.join(work, "dataset.txt")
        names = []
        for k, img in enumerate(calib):
            names.append(os.path.join(work, f"calib_{k}.png"))
            Image.fromarray(img).save(names[-1])
        Path(dataset).write_text("\n".join(names) + "\n")
        samples = []
        for k, img in enumerate(held):
            samples.append(os.path.join(work, f"held_{k}.npy"))
            np.save(samples[-1], img[None])
        reference = float_outputs(onnx_path, spec, held)
        import onnx
        input_name = onnx.load(onnx_path).graph.input[0].name
        for algorithm in vendor_algorithms:
            seconds, outs = vendor_alone(python, onnx_path, spec, input_name, dataset, samples, algorithm, work)
            rows.append((key, f"vendor {algorithm}", agreement(outs, reference)[0], None, None, None, seconds, None))
        for weights, algorithm in [(w, a) for w in weight_qtypes for a in ("normal", "mmse", "auto_hybrid")]:
            rknn = RKNN()
            rknn.config(mean_values=[spec["mean"]], std_values=[spec["std"]], target_platform="rk3588",
                        quantized_algorithm="normal" if algorithm == "auto_hybrid" else algorithm,
                        auto_hybrid_cos_thresh=0.995, weight_qtype=weights)
            rknn.load_onnx(model=onnx_path, inputs=[input_name], input_size_list=[[1, 3, *spec["size"]]])
            started = time.time()
            assert rknn.build(do_quantization=True, dataset=dataset, auto_hybrid=algorithm == "auto_hybrid") == 0
            build_seconds = time.time() - started
            rknn.init_runtime()
            ours = [rknn.inference(inputs=[img[None]])[0] for img in held]
            built = rockchip.compile_with_vendor(rknn._model, rknn._source.model, rknn._cfg(), dataset,
                                                 os.path.join(work, f"{algorithm}.rknn"), python,
                                                 check_samples=[[img[None]] for img in held])
            theirs = [sample[0] for sample in built.vendor_outputs]
            label = f"openrknn {algorithm}" + (", asymmetric weights" if weights == "asymmetric_quantized" else "")
            rows.append((key, f"{label} → vendor", agreement(theirs, reference)[0],
                         agreement(ours, reference)[0], *agreement(ours, theirs), build_seconds,
                         built.build_seconds))
            rknn.release()
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(REPO.parent / "shared"))
    parser.add_argument("--models", default="det,cls")
    parser.add_argument("--toolchain-python", default=os.environ.get(rockchip.ENV_VAR))
    parser.add_argument("--vendor-algorithms", default="normal,mmse",
                        help="the vendor's own builds to compare with (its mmse takes minutes on the detector)")
    parser.add_argument("--weight-qtypes", default="asymmetric_quantized,symmetric_quantized",
                        help="openrknn builds to hand over: config(weight_qtype=...) of each")
    args = parser.parse_args(argv)
    python, version = rockchip.find_toolchain(args.toolchain_python)
    print(f"rknn-toolkit2 {version}; rk3588; {CALIBRATION} calibration / {HELD_OUT} held-out pictures")
    print("| model | build | cosine vs float (vendor sim) | openrknn sim vs float | vendor sim vs openrknn sim "
          "(mean / min) | openrknn build s | vendor compile s |")
    print("|---|---|---|---|---|---|---|")
    for key in args.models.split(","):
        for m, build, vendor_cos, ours_cos, agree, agree_min, seconds, vendor_seconds in run_model(
                key, Path(args.data), python, args.vendor_algorithms.split(","), args.weight_qtypes.split(",")):
            fmt = lambda v, d=4: "—" if v is None else f"{v:.{d}f}"   # noqa: E731
            print(f"| {m} | {build} | {fmt(vendor_cos)} | {fmt(ours_cos)} | {fmt(agree)} / {fmt(agree_min)} | "
                  f"{fmt(seconds, 1)} | {fmt(vendor_seconds, 1)} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
