"""The sweep's rows on a wider held-out set: 30 pictures instead of 4, both toolkits in the same run.

The sweep (``arch_sweep.py``) judges each build on 4 held-out pictures. In randomised networks with
squeeze-and-excitation blocks one quantized model's error pattern is shared by every picture and the
channel gains amplify it, so a row moves by a few hundredths with the pictures. This script judges
the same exports (``bench/.cache/arch_sweep/<arch>_<init>.onnx``, calibrated on the same pictures)
on the 10 pictures calibration does not use, each also mirrored and centre-cropped (30 pictures).
The vendor's outputs are cached beside the sweep's (``<arch>_<init>.vendor_int8.wide.npz``);
openrknn's scores are cached per row (``<arch>_<init>.wide.row.json``) keyed by the git commit that
produced them, so a rerun redoes only what a new commit may have changed. int8 only.

Usage (all 34 rows, the table written between the wide-table markers of ``docs/arch-sweep.md``):
``OPENRKNN_RKNN_TOOLKIT2=/path/to/python python bench/arch_sweep_wide.py``; choose rows with
``--archs regnet_y_400mf,efficientnet_b0 --inits bnrand`` (measured in that order), print the cached
table only with ``--table-only``. A row that fails is reported and the run goes on.
``SWEEP_VERBOSE=1`` prints openrknn's build log (the bias-correction decision, for example).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort
from PIL import Image

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from arch_sweep import IMAGENET, VENDOR_PYTHON, YOLO, _unpack, cosine, git_commit  # noqa: E402
from arch_sweep_models import ARCHS, INITS  # noqa: E402

MARGIN = 0.005  # the bound: no row more than this below the vendor
PIPELINE_SUFFIX = {"openrknn": "", "vendor": ".vendor-pipeline"}
VARIANTS = 3     # each held-out picture as it is, mirrored, centre-cropped (consecutive in the set)


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
            variants = (image, image.transpose(Image.FLIP_LEFT_RIGHT),
                        image.crop((w // 6, h // 6, w - w // 6, h - h // 6)))
            assert len(variants) == VARIANTS
            for variant in variants:
                pictures.append(np.asarray(variant.resize((size, size), Image.BILINEAR), np.uint8))
        path.parent.mkdir(parents=True, exist_ok=True)
        np.save(path, np.stack(pictures))
    return path


def float_outputs(model: Path, norm: dict, pictures: np.ndarray) -> list[list[np.ndarray]]:
    session = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name
    return [session.run(None, {name: ((p.astype(np.float32) - norm["mean"]) / norm["std"])
                               .transpose(2, 0, 1)[None].astype(np.float32)}) for p in pictures]


# --pipeline vendor: openrknn quantizing as rknn-toolkit2 2.5.0 does (bench/vendor_weight_grid.py measured
# it): asymmetric per-channel weights rounded to nearest, no bias correction, no depthwise equalization
VENDOR_PIPELINE = {"bias_correction": False, "equalize_depthwise": False}


def parse_settings(pairs: list[str]) -> dict:
    """``--set bias_correction=false`` → ``{'bias_correction': False}`` (QuantSettings fields, an experiment)."""
    from openrknn.quant.settings import QuantSettings
    fields = {f.name for f in dataclasses.fields(QuantSettings)}
    settings = {}
    for pair in pairs:
        key, _, text = pair.partition("=")
        if key not in fields:
            raise SystemExit(f"--set {pair}: '{key}' is not a QuantSettings field (choose from {sorted(fields)})")
        lowered = text.lower()
        settings[key] = (True if lowered == "true" else False if lowered == "false" else
                         None if lowered == "none" else int(text) if text.lstrip("-").isdigit() else text)
    return settings


def settings_suffix(settings: dict) -> str:
    return "".join(f".{key}-{value}" for key, value in sorted(settings.items()))


def openrknn_outputs(model: Path, norm: dict, dataset: Path, pictures: np.ndarray,
                     pipeline: str = "openrknn", settings: dict | None = None) -> list[list[np.ndarray]]:
    from rknn.api import RKNN
    import openrknn.compile as compile_stage
    setup = compile_stage.calibration_setup
    changes = dict(VENDOR_PIPELINE if pipeline == "vendor" else {}, **(settings or {}))
    if changes:
        def changed_setup(*args, **kwargs):
            quant_settings, samples = setup(*args, **kwargs)
            return dataclasses.replace(quant_settings, **changes), samples
        compile_stage.calibration_setup = changed_setup
    extra = {"weight_qtype": "asymmetric_quantized"} if pipeline == "vendor" else {}
    rknn = RKNN(verbose=os.environ.get("SWEEP_VERBOSE") == "1")
    try:
        rknn.config(mean_values=[norm["mean"]], std_values=[norm["std"]], target_platform="rk3588", **extra)
        if rknn.load_onnx(model=str(model)) != 0 or rknn.build(do_quantization=True, dataset=str(dataset)) != 0 \
                or rknn.init_runtime() != 0:
            raise SystemExit(f"openrknn could not build {model.name}")
        return [[np.asarray(o, np.float32) for o in rknn.inference(inputs=[p[None]])] for p in pictures]
    finally:
        rknn.release()
        compile_stage.calibration_setup = setup


def vendor_outputs(model: Path, norm: dict, dataset: Path, pictures_path: Path, count: int) -> list[list[np.ndarray]]:
    """The vendor's outputs on the wide pictures, built once and cached beside the model."""
    result = model.with_suffix(".vendor_int8.wide.npz")
    if not result.exists():
        if not VENDOR_PYTHON:
            raise RowFailed("the vendor's column needs rknn-toolkit2: set OPENRKNN_RKNN_TOOLKIT2 to its Python")
        sweep_job = model.with_suffix(".vendor_int8.job.json")
        disabled = json.loads(sweep_job.read_text()).get("disable_rules", []) if sweep_job.exists() else []
        job = model.with_suffix(".vendor_int8.wide.job.json")
        job.write_text(json.dumps({"onnx": str(model), "dataset": str(dataset), "images": str(pictures_path),
                                   "mean": norm["mean"], "std": norm["std"], "platform": "rk3588",
                                   "quantize": True, "result": str(result), "disable_rules": disabled}))
        # -I: the vendor's own rknn package, never the project's (the script's folder is not on its path)
        subprocess.run([VENDOR_PYTHON, "-I", str(REPO / "bench" / "arch_sweep_vendor.py"), str(job)],
                       cwd=model.parent, capture_output=True, text=True, timeout=3600)
        if not result.exists():
            raise RowFailed(f"rknn-toolkit2 could not build {model.name}")
    return _unpack(np.load(result), count)


def per_picture(outputs: list[list[np.ndarray]], reference: list[list[np.ndarray]]) -> np.ndarray:
    """Cosine per output and picture (outputs × pictures)."""
    return np.array([[cosine(got[k], ref[k]) for got, ref in zip(outputs, reference)]
                     for k in range(len(reference[0]))])


def score(cosines: np.ndarray) -> float:
    """Mean cosine over the pictures, the worst output counting (as the sweep scores)."""
    return float(cosines.mean(axis=1).min())


def delta_error(ours: np.ndarray, theirs: np.ndarray) -> float:
    """Standard error of openrknn − vendor, on the output that sets openrknn's score.

    The three variants of one source picture are alike, so the paired differences are averaged per
    source picture first and the error is taken over the 10 sources (not over 30 independent draws).
    """
    k = int(ours.mean(axis=1).argmin())
    per_source = (ours[k] - theirs[k]).reshape(-1, VARIANTS).mean(axis=1)
    return float(per_source.std(ddof=1) / np.sqrt(len(per_source)))


class RowFailed(Exception):
    """One row could not be measured; the others go on."""


def measure(arch: str, init: str, args: argparse.Namespace, cache: Path, commit: str) -> dict:
    """One row: openrknn's score (recomputed unless cached for this commit) and the vendor's (cached outputs)."""
    row_path = cache / f"{arch}_{init}.wide{PIPELINE_SUFFIX[args.pipeline]}{args.suffix}.row.json"
    row = json.loads(row_path.read_text()) if row_path.exists() else {}
    if row.get("openrknn_commit") == commit and "delta_se" in row and not args.redo:
        return row
    model = cache / f"{arch}_{init}.onnx"
    size = ARCHS[arch][2]
    dataset = cache / f"pictures_{size}" / "dataset.txt"
    if not model.exists() or not dataset.exists():
        raise RowFailed(f"run bench/arch_sweep.py for {arch} {init} first (it exports the model and the pictures)")
    norm = YOLO if ARCHS[arch][0] == "ultralytics" else IMAGENET
    pictures_path = wide_pictures(Path(args.data), cache, size, args.calib)
    pictures = np.load(pictures_path)
    reference = float_outputs(model, norm, pictures)
    started = time.time()
    ours = per_picture(openrknn_outputs(model, norm, dataset, pictures, args.pipeline, args.settings), reference)
    seconds = round(time.time() - started, 1)
    theirs = per_picture(vendor_outputs(model, norm, dataset, pictures_path, len(pictures)), reference)
    row = dict(arch=arch, init=init, pictures=len(pictures), openrknn=score(ours), vendor=score(theirs),
               delta_se=delta_error(ours, theirs), openrknn_commit=commit, openrknn_seconds=seconds)
    row_path.write_text(json.dumps(row, indent=1))
    return row


def table(rows: list[dict]) -> str:
    """The markdown table; ✗ marks a row more than 0.005 below the vendor."""
    lines = ["| architecture | init | pictures | openrknn int8 | vendor int8 | Δ | s.e. of Δ |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        delta = r["openrknn"] - r["vendor"]
        error = f"{r['delta_se']:.4f}" if r.get("delta_se") is not None else "–"
        lines.append(f"| {r['arch']} | {r['init']} | {r['pictures']} | {r['openrknn']:.4f} | {r['vendor']:.4f} | "
                     f"{delta:+.4f}{' ✗' if delta < -MARGIN else ''} | {error} |")
    commits = sorted({r["openrknn_commit"] for r in rows if r.get("openrknn_commit")})
    measured = f"openrknn at commit {', '.join(f'`{c}`' for c in commits)}" if commits else "no row measured yet"
    return (f"{measured}, rknn-toolkit2 2.5.0, rk3588, int8, 30 held-out pictures.\n\n"
            + "\n".join(lines))


def write_table(text: str, path: Path) -> None:
    """Replace the table between the wide-table markers of the doc (appended when the markers are missing)."""
    begin, end = "<!-- arch-sweep wide table begin -->", "<!-- arch-sweep wide table end -->"
    doc = path.read_text() if path.exists() else ""
    block = f"{begin}\n{text}\n{end}"
    if begin in doc and end in doc:
        doc = doc[:doc.index(begin)] + block + doc[doc.index(end) + len(end):]
    else:
        doc = doc + ("\n" if doc else "") + block + "\n"
    path.write_text(doc)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--archs", default=",".join(ARCHS), help="comma-separated, measured in this order")
    parser.add_argument("--inits", "--init", default=",".join(INITS), help="comma-separated (bnrand,default)")
    parser.add_argument("--data", default=os.environ.get("OPENRKNN_TEST_DATA", str(REPO.parent / "shared")),
                        help="folder with images/ (default $OPENRKNN_TEST_DATA, else ../shared)")
    parser.add_argument("--calib", type=int, default=10)
    parser.add_argument("--cache", default=str(REPO / "bench" / ".cache" / "arch_sweep"))
    parser.add_argument("--table", default=str(REPO / "docs" / "arch-sweep.md"),
                        help="doc whose wide-table markers receive the table ('' to only print it)")
    parser.add_argument("--table-only", action="store_true", help="only print/write the table from the cached rows")
    parser.add_argument("--redo", action="store_true", help="recompute openrknn's column even if cached for this commit")
    parser.add_argument("--pipeline", choices=tuple(PIPELINE_SUFFIX), default="openrknn",
                        help="openrknn's default quantization, or 'vendor': rknn-toolkit2's (asymmetric weights, "
                             "no bias correction, no depthwise equalization; rows cached apart, table only printed)")
    parser.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                        help="an experiment: change one QuantSettings field (repeatable; rows cached apart, "
                             "table only printed)")
    args = parser.parse_args()
    args.settings = parse_settings(args.set)
    args.suffix = settings_suffix(args.settings)
    if args.pipeline != "openrknn" or args.settings:
        args.table = ""
    cache = Path(args.cache).resolve()
    commit = git_commit()
    archs, inits = args.archs.split(","), args.inits.split(",")
    unknown = [a for a in archs if a not in ARCHS] + [i for i in inits if i not in INITS]
    if unknown:
        raise SystemExit(f"unknown architecture or init: {unknown} (choose from {list(ARCHS)} × {INITS})")
    if not args.table_only:
        for arch in archs:
            for init in inits:
                try:
                    row = measure(arch, init, args, cache, commit)
                    print(f"{arch:28s} {init:8s} openrknn {row['openrknn']:.4f} vendor {row['vendor']:.4f} "
                          f"Δ {row['openrknn'] - row['vendor']:+.4f}", flush=True)
                except (Exception, SystemExit) as failure:   # one row failing must not stop the run
                    print(f"{arch:28s} {init:8s} failed: {failure}", flush=True)
    rows = []
    for arch in ARCHS:                                  # the table in the sweep's order, cached rows only
        for init in INITS:
            row_path = cache / f"{arch}_{init}.wide{PIPELINE_SUFFIX[args.pipeline]}{args.suffix}.row.json"
            if row_path.exists():
                rows.append(json.loads(row_path.read_text()))
    text = table(rows)
    print(text)
    if args.table:
        write_table(text, Path(args.table))


if __name__ == "__main__":
    main()
