"""Architecture sweep: openrknn's int8 / float16 cosine against float, next to rknn-toolkit2's, same run.

For every architecture in ``arch_sweep_models.ARCHS`` and both initialisations (randomised
BatchNorm statistics, PyTorch's default init), with random weights:

1. the bench venv's torch exports the model to ONNX (``arch_sweep_models.py``, subprocess);
2. openrknn builds it int8 (w8a8, normal, channel) and float16 for rk3588 and simulates the
   held-out pictures;
3. rknn-toolkit2 does the same in its own Python (``arch_sweep_vendor.py``, subprocess);
4. both are compared with onnxruntime float32 on the original model.

Calibration: the first ``--calib`` pictures of the shared image folder, resized to the input size
and written once as PNGs both toolkits read; held-out: the next ``--held-out`` pictures. The
score of a build is the mean cosine over the held-out pictures, the worst output counting.

Everything is cached per model under ``--cache`` (gitignored): the ONNX export, the vendor's
outputs, and openrknn's scores keyed by the git commit that produced them, so a rerun after a
merge only redoes openrknn's rows (``--redo vendor`` redoes the vendor's). The markdown table is
written to ``--table``.

Usage: ``python bench/arch_sweep.py [--archs resnet18,yolov8n] [--inits bnrand,default]
[--data ../shared] [--table docs/arch-sweep.md]``
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from PIL import Image

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from arch_sweep_models import ARCHS, INITS  # noqa: E402

# a Python with torch + torchvision + timm + ultralytics (model export), and rknn-toolkit2's Python
BENCH_PYTHON = os.environ.get("OPENRKNN_BENCH_PYTHON", sys.executable)
VENDOR_PYTHON = os.environ.get("OPENRKNN_RKNN_TOOLKIT2", "")
IMAGENET = dict(mean=[123.675, 116.28, 103.53], std=[58.395, 57.12, 57.375])
YOLO = dict(mean=[0.0, 0.0, 0.0], std=[255.0, 255.0, 255.0])
DTYPES = ("int8", "float16")
FLOAT16_MAX = 65504.0


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
    na, nb = np.linalg.norm(a), np.linalg.norm(b)
    if na == 0 and nb == 0:
        return 1.0
    return float(a @ b / (na * nb + 1e-300))


def git_commit() -> str:
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True)
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO,
                           capture_output=True, text=True).stdout.strip()
    return head.stdout.strip() + ("+dirty" if dirty else "")


class Sweep:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.cache = Path(args.cache).resolve()
        self.cache.mkdir(parents=True, exist_ok=True)
        self.commit = git_commit()
        images = sorted(p for p in (Path(args.data) / "images").iterdir()
                        if p.suffix.lower() in (".jpg", ".jpeg", ".png", ".bmp"))
        if len(images) < args.calib + args.held_out:
            sys.exit(f"need {args.calib + args.held_out} pictures in {args.data}/images, found {len(images)}")
        self.calib_sources = images[:args.calib]
        self.held_out_sources = images[args.calib:args.calib + args.held_out]

    # ------------------------------------------------------------------ inputs
    def pictures(self, size: int) -> tuple[str, Path]:
        """Calibration list (PNG paths at the input size) and the held-out pictures (uint8 NHWC .npy)."""
        folder = self.cache / f"pictures_{size}"
        folder.mkdir(exist_ok=True)
        lines = []
        for src in self.calib_sources:
            dst = folder / f"calib_{src.stem}.png"
            if not dst.exists():
                Image.open(src).convert("RGB").resize((size, size), Image.BILINEAR).save(dst)
            lines.append(str(dst))
        dataset = folder / "dataset.txt"
        dataset.write_text("\n".join(lines) + "\n")
        held = folder / "held_out.npy"
        if not held.exists():
            np.save(held, np.stack([np.asarray(Image.open(p).convert("RGB").resize((size, size), Image.BILINEAR),
                                               np.uint8) for p in self.held_out_sources]))
        return str(dataset), held

    def export(self, arch: str, init: str) -> Path | None:
        path = self.cache / f"{arch}_{init}.onnx"
        failed = path.with_suffix(".export-error.txt")
        if path.exists():
            return path
        if failed.exists() and not self.args.retry_failed:
            return None
        partial = path.with_name(f"{path.stem}.{os.getpid()}.partial.onnx")   # renamed when complete
        run = subprocess.run([BENCH_PYTHON, "-I", str(REPO / "bench" / "arch_sweep_models.py"), arch, init, str(partial)],
                             cwd=self.cache, capture_output=True, text=True, timeout=1800)
        if run.returncode != 0 or not partial.exists():
            failed.write_text(run.stdout[-3000:] + run.stderr[-3000:])
            partial.unlink(missing_ok=True)
            return None
        os.replace(partial, path)
        return path

    # --------------------------------------------------------------- references
    def float_outputs(self, model: Path, norm: dict, held: Path) -> list[list[np.ndarray]]:
        cached = model.with_suffix(".float.npz")
        images = np.load(held)
        if not cached.exists():
            session = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
            name = session.get_inputs()[0].name
            arrays = {}
            for i, image in enumerate(images):
                x = ((image.astype(np.float32) - norm["mean"]) / norm["std"]).transpose(2, 0, 1)[None]
                for k, out in enumerate(session.run(None, {name: x.astype(np.float32)})):
                    arrays[f"out{k}_{i}"] = out
            np.savez(cached, **arrays)
        return _unpack(np.load(cached), len(images))

    # ------------------------------------------------------------------ builds
    def openrknn(self, model: Path, norm: dict, dataset: str, held: Path, dtype: str) -> dict:
        from rknn.api import RKNN
        rknn = RKNN(verbose=False)
        started = time.time()
        try:
            rknn.config(mean_values=[norm["mean"]], std_values=[norm["std"]], target_platform="rk3588")
            if rknn.load_onnx(model=str(model)) != 0:
                return {"error": "load_onnx failed"}
            if rknn.build(do_quantization=dtype == "int8", dataset=dataset) != 0:
                return {"error": "build failed"}
            if rknn.init_runtime() != 0:
                return {"error": "init_runtime failed"}
            built = time.time() - started
            outputs = []
            for image in np.load(held):
                got = rknn.inference(inputs=[image[None]])
                if got is None:
                    return {"error": "inference failed"}
                outputs.append([np.asarray(o, np.float32) for o in got])
            return {"outputs": outputs, "build_seconds": built}
        finally:
            rknn.release()

    def vendor(self, model: Path, norm: dict, dataset: str, held: Path, dtype: str) -> dict:
        result = self.cache / f"{model.stem}.vendor_{dtype}.npz"
        error = Path(str(result) + ".error.json")
        if self.args.redo == "vendor":
            result.unlink(missing_ok=True)
            error.unlink(missing_ok=True)
        disabled: list[str] = []
        while not result.exists() and not error.exists():
            if not VENDOR_PYTHON:
                raise SystemExit("the vendor's rows need rknn-toolkit2: set OPENRKNN_RKNN_TOOLKIT2 to its Python")
            job = self.cache / f"{model.stem}.vendor_{dtype}.job.json"
            job.write_text(json.dumps({"onnx": str(model), "dataset": dataset, "images": str(held),
                                       "mean": norm["mean"], "std": norm["std"], "platform": "rk3588",
                                       "quantize": dtype == "int8", "result": str(result),
                                       "disable_rules": disabled}))
            try:
                run = subprocess.run([VENDOR_PYTHON, "-I", str(REPO / "bench" / "arch_sweep_vendor.py"), str(job)],
                                     cwd=self.cache, capture_output=True, text=True, timeout=3600)
                log_tail = (run.stdout + run.stderr)[-6000:]
            except subprocess.TimeoutExpired:
                log_tail = "timed out"
            # A crash inside one of the vendor's fusion rules: retry without it, as its guide advises.
            crashed_rule = re.findall(r"rknn\.api\.rules\.\w+\._p_(\w+)", log_tail)
            if not result.exists() and crashed_rule and crashed_rule[-1] not in disabled and len(disabled) < 3:
                disabled.append(crashed_rule[-1])
                error.unlink(missing_ok=True)
                continue
            if not result.exists():
                details = json.loads(error.read_text()) if error.exists() else {"error": "crashed"}
                error.write_text(json.dumps({**details, "log": log_tail}))
        if error.exists():
            return json.loads(error.read_text())
        data = np.load(result)
        n = len(np.load(held))
        out = {"outputs": _unpack(data, n), "build_seconds": float(data["build_seconds"])}
        job = self.cache / f"{model.stem}.vendor_{dtype}.job.json"
        if job.exists() and json.loads(job.read_text()).get("disable_rules"):
            out["disable_rules"] = json.loads(job.read_text())["disable_rules"]
        return out

    # ------------------------------------------------------------------- rows
    def cached_rows(self) -> list[dict]:
        """Every row measured so far, in the order of ``ARCHS`` (earlier runs' rows included)."""
        rows = []
        for arch in ARCHS:
            for init in INITS:
                path = self.cache / f"{arch}_{init}.row.json"
                if path.exists():
                    row = json.loads(path.read_text())
                    reference = self.cache / f"{arch}_{init}.float.npz"
                    if "float_max" not in row and reference.exists():
                        data = np.load(reference)
                        row["float_max"] = max(float(np.abs(data[k]).max()) for k in data.files)
                        row["float_spread"] = float_spread(_unpack(data, len(self.held_out_sources)))
                    rows.append(row)
        return rows

    def score(self, outputs: list[list[np.ndarray]], reference: list[list[np.ndarray]]) -> float:
        per_output = []
        for k in range(len(reference[0])):
            per_output.append(np.mean([cosine(got[k], ref[k]) for got, ref in zip(outputs, reference)]))
        return float(min(per_output))

    def run_one(self, arch: str, init: str) -> dict:
        size = ARCHS[arch][2]
        norm = YOLO if ARCHS[arch][0] == "ultralytics" else IMAGENET
        row_path = self.cache / f"{arch}_{init}.row.json"
        row = json.loads(row_path.read_text()) if row_path.exists() else {}
        row.update(arch=arch, init=init, library=ARCHS[arch][0], size=size)
        model = self.export(arch, init)
        if model is None:
            row["error"] = "export failed"
            row_path.write_text(json.dumps(row, indent=1))
            return row
        row["hazards"] = model_hazards(model)
        dataset, held = self.pictures(size)
        reference = self.float_outputs(model, norm, held)
        row["float_spread"] = float_spread(reference)
        for toolkit in self.args.toolkits:
            for dtype in self.args.dtypes:
                key = f"{toolkit}_{dtype}"
                fresh = toolkit == "vendor" or row.get(f"{key}_commit") == self.commit
                done = row.get(key) is not None or (key in row and not self.args.retry_failed)
                if done and fresh and self.args.redo != toolkit:
                    continue
                started = time.time()
                result = (self.openrknn if toolkit == "openrknn" else self.vendor)(model, norm, dataset, held, dtype)
                if "error" in result:
                    row[key] = None
                    row[f"{key}_error"] = result["error"]
                else:
                    row[key] = self.score(result["outputs"], reference)
                    row.pop(f"{key}_error", None)
                if result.get("disable_rules"):
                    row[f"{key}_disable_rules"] = result["disable_rules"]
                row[f"{key}_seconds"] = round(time.time() - started, 1)
                if toolkit == "openrknn":
                    row[f"{key}_commit"] = self.commit
                row_path.write_text(json.dumps(row, indent=1))
                print(f"{arch:28s} {init:8s} {key:18s} {row[key]}", flush=True)
        return row


def _unpack(data, n: int) -> list[list[np.ndarray]]:
    count = len([k for k in data.files if k.startswith("out") and k.endswith("_0")])
    return [[data[f"out{k}_{i}"] for k in range(count)] for i in range(n)]


def float_spread(reference: list[list[np.ndarray]]) -> float:
    """How much the float output changes between pictures (std over pictures / mean |value|, worst output).

    Near 0, the output is the same for every picture (e.g. a classifier bias once the signal died
    out): any cosine is then ≈1 and says nothing about quantization.
    """
    spreads = []
    for k in range(len(reference[0])):
        stack = np.stack([r[k].astype(np.float64) for r in reference])
        spreads.append(float(stack.std(axis=0).mean() / (np.abs(stack).mean() + 1e-300)))
    return min(spreads)


def model_hazards(path: Path) -> list[str]:
    """What in the exported graph q1's fixes touch: initializers shared by several layers."""
    model = onnx.load(str(path), load_external_data=False)
    inits = {i.name for i in model.graph.initializer}
    alias = {n.output[0]: n.input[0] for n in model.graph.node if n.op_type == "Identity" and n.input[0] in inits}
    users: dict[str, int] = {}
    for node in model.graph.node:
        if node.op_type in ("Conv", "Gemm", "ConvTranspose", "MatMul"):
            for name in node.input[1:]:
                name = alias.get(name, name)
                if name in inits:
                    users[name] = users.get(name, 0) + 1
    shared = sum(1 for count in users.values() if count > 1)
    return [f"{shared} shared weight/bias initializer(s)"] if shared else []


def write_table(rows: list[dict], path: Path) -> None:
    def fmt(row: dict, key: str) -> str:
        if key not in row:
            return "–"                                   # not measured yet
        value = row[key]
        return "fail" if value is None else "non-finite" if not np.isfinite(value) else f"{value:.4f}"

    lines = ["| architecture | init | input | openrknn int8 | vendor int8 | Δ int8 | openrknn fp16 | vendor fp16 | notes |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "error" in r and r.get("error"):
            lines.append(f"| {r['arch']} | {r['init']} | {r.get('size')} | – | – | – | – | – | {r['error']} |")
            continue
        o8, v8 = r.get("openrknn_int8"), r.get("vendor_int8")
        comparable = o8 is not None and v8 is not None and np.isfinite(o8) and np.isfinite(v8)
        delta = f"{o8 - v8:+.4f}" + (" ✗" if o8 < v8 - 0.005 else "") if comparable else ""
        notes = list(r.get("hazards", []))
        if r.get("float_max", 0) > FLOAT16_MAX:
            notes.append(f"float output reaches {r['float_max']:.1e}, beyond float16's range: fp16 builds overflow")
        if r.get("float_spread") is not None and r["float_spread"] < 1e-3:
            notes.append(f"float output nearly constant over pictures (spread {r['float_spread']:.0e}): cosine says little")
        for key in ("openrknn_int8", "vendor_int8", "openrknn_float16", "vendor_float16"):
            if r.get(f"{key}_error"):
                notes.append(f"{key}: {r[f'{key}_error']}")
            if r.get(f"{key}_disable_rules"):
                notes.append(f"{key} built with disable_rules={r[f'{key}_disable_rules']} (its fusion rule crashed)")
        lines.append(f"| {r['arch']} | {r['init']} | {r['size']} | {fmt(r, 'openrknn_int8')} | {fmt(r, 'vendor_int8')} | "
                     f"{delta} | {fmt(r, 'openrknn_float16')} | {fmt(r, 'vendor_float16')} | {'; '.join(notes)} |")
    text = path.read_text() if path.exists() else ""
    begin, end = "<!-- arch-sweep table begin -->", "<!-- arch-sweep table end -->"
    commits = sorted({r[k] for r in rows for k in r if k.endswith("_commit")})
    table = (f"{begin}\nopenrknn at commit {', '.join(f'`{c}`' for c in commits)}, rknn-toolkit2 2.5.0, rk3588.\n\n"
             + "\n".join(lines) + f"\n{end}")
    if begin in text and end in text:
        text = text[:text.index(begin)] + table + text[text.index(end) + len(end):]
    else:
        text = text + ("\n" if text else "") + table + "\n"
    path.write_text(text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--archs", default=",".join(ARCHS))
    parser.add_argument("--inits", default=",".join(INITS))
    parser.add_argument("--toolkits", default="openrknn,vendor")
    parser.add_argument("--dtypes", default=",".join(DTYPES))
    parser.add_argument("--data", default=os.environ.get("OPENRKNN_TEST_DATA", str(REPO.parent / "shared")),
                        help="folder with images/ (default $OPENRKNN_TEST_DATA, else ../shared)")
    parser.add_argument("--calib", type=int, default=10)
    parser.add_argument("--held-out", type=int, default=4)
    parser.add_argument("--cache", default=str(REPO / "bench" / ".cache" / "arch_sweep"))
    parser.add_argument("--table", default=str(REPO / "docs" / "arch-sweep.md"))
    parser.add_argument("--redo", choices=("openrknn", "vendor"), default=None)
    parser.add_argument("--retry-failed", action="store_true")
    parser.add_argument("--reverse", action="store_true", help="run the architectures in reverse order")
    parser.add_argument("--table-only", action="store_true", help="only write the table from the cached rows")
    args = parser.parse_args()
    args.toolkits = args.toolkits.split(",")
    args.dtypes = args.dtypes.split(",")
    sweep = Sweep(args)
    if args.table_only:
        write_table(sweep.cached_rows(), Path(args.table))
        print(Path(args.table).read_text())
        return
    archs = args.archs.split(",")
    for arch in (archs[::-1] if args.reverse else archs):
        for init in args.inits.split(","):
            sweep.run_one(arch, init)
            write_table(sweep.cached_rows(), Path(args.table))
    print(Path(args.table).read_text())


if __name__ == "__main__":
    main()
