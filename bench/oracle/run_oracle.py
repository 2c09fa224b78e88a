"""Oracle corpus: build every model with rknn-toolkit2 2.5.0 and with openrknn, compare the layer graphs.

    python bench/oracle/run_oracle.py [--platforms rk3588] [--dtypes int8 fp16] [--only NAME ...] [--table]

Models: the ONNX files ``export_models.py`` wrote to ``bench/oracle/.cache`` plus the shared PP-OCR
ONNX and MediaPipe TFLite models. Both toolkits calibrate on the same pictures (the shared photos,
resized; random values for a non-image input). Rockchip's toolkit runs in its own venv
(``--reference-venv``, default: the venv of ``$OPENRKNN_RKNN_TOOLKIT2``) as a subprocess, with ``-I`` from a folder outside the
repository. Per model, platform and dtype it records (a JSON file in the cache; finished runs are
kept, so the corpus resumes; rknn-toolkit2's rows, scales and stored tensors are kept apart in
``vendor/``, so deleting a result re-runs only openrknn's side):

* the layer count of the "Network Layer Information Table" and of openrknn's ``eval_perf``;
* the OpType × DataType histogram of both;
* the stored tensors — rknn-toolkit2's "Feature Tensor Information Table", openrknn's layer record
  (``LayerRecord.stored`` and the inputs) — by ONNX origin (:func:`origin` strips the suffixes
  rknn-toolkit2 gives tensors it derives), and how many are common;
* int8: for the common stored tensors both ``hybrid_quantization_step1`` configs scale per tensor,
  how many scales agree within 0.5 %.

``--table`` prints the Markdown table for ``docs/fidelity.md`` from the cached results.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
SHARED = Path(os.environ.get("OPENRKNN_TEST_DATA", REPO.parent / "shared"))   # ../shared, or a worktree's data


def _default_reference_venv() -> str:
    """The venv whose Python ``$OPENRKNN_RKNN_TOOLKIT2`` names (rknn-toolkit2 installed there)."""
    python = os.environ.get("OPENRKNN_RKNN_TOOLKIT2")
    return str(Path(python).parents[1]) if python else "rknn-reference-venv"
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

SHARED_ONNX = {"ppocr_cls": ("ch_ppocr_mobile_v2.0_cls_infer.onnx", (1, 3, 48, 192)),
               "ppocr_det": ("ch_PP-OCRv3_det_infer.onnx", (1, 3, 96, 96)),
               "ppocr_rec": ("ch_PP-OCRv4_rec_infer.onnx", (1, 3, 48, 160))}
SHARED_TFLITE = {"mp_face_detection": "face_detection_short_range.tflite",
                 "mp_hand_landmark": "hand_landmark_lite.tflite", "mp_iris": "iris_landmark.tflite"}

_VENDOR = r'''
import json, sys
from rknn.api import RKNN
job = json.loads(sys.argv[1])
def configure(r):
    r.config(mean_values=job["mean"], std_values=job["std"], target_platform=job["platform"])
    if job["kind"] == "tflite":
        return r.load_tflite(model=job["model"])
    kw = {"inputs": job["inputs"], "input_size_list": job["sizes"]} if job["sizes"] else {}
    return r.load_onnx(model=job["model"], **kw)
r = RKNN(verbose=True)
assert configure(r) == 0
assert r.build(do_quantization=job["quant"], dataset=job["dataset"]) == 0
if job["quant"]:
    s = RKNN()
    assert configure(s) == 0
    assert s.hybrid_quantization_step1(dataset=job["dataset"]) == 0
'''


def parse_table(text: str) -> list[tuple[str, str, str, str]]:
    """(OpType, DataType, Target, FullName) rows of the first layer table in a verbose build log."""
    rows, state = [], 0
    for line in text.splitlines():
        body = line.split("]", 1)[-1].strip() if "RKNN:" in line else line.strip()
        if state == 0 and "Network Layer Information Table" in body:
            state = 1
            continue
        parts = body.split()
        if state >= 1 and len(parts) > 4 and parts[0].isdigit():
            if rows and int(parts[0]) <= int(rows[-1][0]) and state == 2:
                break
            rows.append((parts[0], parts[1], parts[2], parts[3], parts[-1]))
            state = 2
        elif state == 2 and body.startswith("----") and len(rows) > 1:
            break
    return [r[1:] for r in rows]


def feature_tensors(text: str) -> list[str]:
    """Tensor names of the first "Feature Tensor Information Table": what rknn-toolkit2 stores."""
    names, state = [], 0
    for line in text.splitlines():
        body = line.split("]", 1)[-1].strip() if "RKNN:" in line else line.strip()
        if state == 0 and "Feature Tensor Information Table" in body:
            state = 1
            continue
        parts = body.split()
        if state == 1 and len(parts) > 4 and parts[0].isdigit():
            names.append(parts[2])
        elif state == 1 and names and body.startswith("----"):
            break
    return list(dict.fromkeys(names))


def scales_of(cfg: Path) -> dict[str, float]:
    from compare_layers import activation_scales
    return activation_scales(cfg) if cfg.exists() else {}


def dataset_for(folder: Path, shape: tuple[int, ...], count: int = 4) -> tuple[Path, bool]:
    """Calibration inputs: the shared photos for 3-channel images, else seeded random arrays."""
    import numpy as np
    from PIL import Image
    lines = []
    image = len(shape) == 4 and 3 in (shape[1], shape[3])
    photos = sorted((SHARED / "images").glob("*.png"))
    for i in range(count):
        if image and photos:
            h, w = (shape[2], shape[3]) if shape[1] == 3 else (shape[1], shape[2])
            Image.open(photos[i % len(photos)]).convert("RGB").resize((w, h)).save(folder / f"c{i}.png")
            lines.append(str(folder / f"c{i}.png"))
        else:
            np.save(folder / f"c{i}.npy", np.random.default_rng(i).uniform(-1, 1, shape).astype(np.float32))
            lines.append(str(folder / f"c{i}.npy"))
    (folder / "dataset.txt").write_text("\n".join(lines) + "\n")
    return folder / "dataset.txt", image


def model_inputs(name: str, cache: Path) -> tuple[str, Path, list | None, tuple]:
    """(kind, path, input_size_list or None, input shape)."""
    shared = SHARED / "models"
    if name in SHARED_ONNX:
        file, shape = SHARED_ONNX[name]
        return "onnx", shared / "onnx" / file, [list(shape)], shape
    if name in SHARED_TFLITE:
        from openrknn.frontends.tflite import load_tflite   # noqa: F401 - only to read the input shape below
        import tflite   # the schema package
        buf = (shared / "tflite" / SHARED_TFLITE[name]).read_bytes()
        sub = tflite.Model.GetRootAsModel(buf, 0).Subgraphs(0)
        shape = tuple(int(d) for d in sub.Tensors(sub.Inputs(0)).ShapeAsNumpy())
        return "tflite", shared / "tflite" / SHARED_TFLITE[name], None, shape
    import onnx
    path = cache / f"{name}.onnx"
    dims = onnx.load(str(path), load_external_data=False).graph.input[0].type.tensor_type.shape.dim
    return "onnx", path, None, tuple(d.dim_value for d in dims)


def ours(job: dict, work: Path) -> dict:
    from openrknn.chips import get_chip
    from openrknn.profile import estimate_perf
    from rknn.api import RKNN
    here = os.getcwd()
    os.chdir(work)
    try:
        def configure(r):
            assert r.config(mean_values=job["mean"], std_values=job["std"], target_platform=job["platform"]) == 0
            if job["kind"] == "tflite":
                return r.load_tflite(model=job["model"])
            kw = {"inputs": job["inputs"], "input_size_list": job["sizes"]} if job["sizes"] else {}
            return r.load_onnx(model=job["model"], **kw)
        r = RKNN()
        assert configure(r) == 0
        assert r.build(do_quantization=job["quant"], dataset=job["dataset"]) == 0
        from openrknn.graph import npu_layers
        layers = estimate_perf(r._model, get_chip(job["platform"])).layers
        rows = [(layer.op_type, layer.data_type.upper(), layer.target, layer.full_name) for layer in layers]
        # what the layers store: the record's stored tensors and the graph inputs
        records = npu_layers.model_records(r._model)
        stored = [t.name for t in r._model.inputs] + [t for rec in records if rec.kind != "alias" for t in rec.stored]
        # a cascaded GlobalAveragePool stores its stages too (npu_layers.global_average_pool_stages),
        # openrknn as `<out>__pool_stage<j>`, rknn-toolkit2 as `<node>_2conv<j>`: compared under the latter
        stages = npu_layers.vendor_pool_stage_names(r._model.graph)
        stored += list(stages)
        scales = {}
        if job["quant"]:
            s = RKNN()
            assert configure(s) == 0
            assert s.hybrid_quantization_step1(dataset=job["dataset"]) == 0
            scales = scales_of(next(work.glob("*.quantization.cfg"), work / "none"))
        return {"rows": rows, "scales": scales, "stored": stored, "aliases": {**vendor_style_names(records), **stages}}
    finally:
        os.chdir(here)


def vendor_style_names(records) -> dict[str, str]:
    """openrknn's stored tensor → the other name rknn-toolkit2 may give the same tensor, after a
    node or a member's output rather than the layer's last ONNX tensor (probe blocks,
    convnext_tiny, the transformer encoder, PP-OCRv4 rec): an ``exNorm`` layer's output after the
    layer's first node (``<node>_2ln``, ``<node>#1``; in PP-OCRv4 rec only the last one), a
    Conv + GELU layer's and a MatMul + bias layer's output after the MatMul's own output
    (``<out>_sw_sw``, ``<out>``). :func:`compare` counts a tensor common under either name."""
    renamed = {}
    for rec in records:
        if not rec.stored or not rec.nodes:
            continue
        if rec.op_name == "exNorm":
            renamed[rec.stored[0]] = rec.nodes[0]
        elif rec.node_outputs and (rec.op_name.endswith("ExGelu")
                                   or (rec.kind == "gemm" and rec.op_name == "Conv" and len(rec.nodes) == 2)):
            renamed[rec.stored[0]] = rec.node_outputs[0]
    return renamed


def vendor(job: dict, work: Path, venv: Path) -> dict:
    done = subprocess.run([str(venv / "bin" / "python"), "-I", "-c", _VENDOR, json.dumps(job)], capture_output=True,
                          text=True, timeout=1800, cwd=work)
    log = done.stdout + done.stderr
    rows = parse_table(log)
    if done.returncode != 0 or not rows:
        tail = [line for line in log.splitlines() if "Error" in line or "error" in line][-3:]
        raise RuntimeError(f"rknn-toolkit2 failed (rc {done.returncode}): {' | '.join(tail)[:400]}")
    return {"rows": rows, "scales": scales_of(next(work.glob("*.quantization.cfg"), work / "none")),
            "stored": feature_tensors(log)}


# Suffixes rknn-toolkit2 gives the tensors it creates while lowering (a reshape around a layer, a
# second output, a type conversion) and openrknn's input stage:
# stripped before names are compared, so a tensor counts as common when both store its ONNX origin.
# A global pool's stages (`<node>_2conv<j>`) keep their names: each is a tensor of its own, matched by name.
_DERIVED = re.compile(r"(_exSecondary|-rs|_rs|_tp|_sw|_mm|_2ln|_sdpa|#\d+|__cvt\w*|_cvt\w*|__scaled)$")


def origin(name: str) -> str:
    """The ONNX tensor a stored tensor comes from."""
    previous = None
    while previous != name:
        previous, name = name, _DERIVED.sub("", name)
    return name


def _scales_by_origin(scales: dict[str, float]) -> dict[str, float]:
    """Scales by stored tensor, as :func:`compare` counts the stored tensors: under the tensor's own
    name, else under its ONNX origin when every derived name of it (rknn-toolkit2's ``-rs``, ``_sw``,
    ``#1`` … of a reshaped or swapped copy: a transformer's tensors) has one scale; an origin whose
    derived names disagree is left out."""
    derived: dict[str, set[float]] = {}
    for name, value in scales.items():
        if origin(name) != name:
            derived.setdefault(origin(name), set()).add(round(float(value), 12))
    found = {base: next(iter(values)) for base, values in derived.items() if len(values) == 1}
    found.update(scales)
    return found


def _close(mine: float, theirs: float) -> bool:
    """Scales within 0.5 %; an all-zero tensor's scale (rknn-toolkit2 0, openrknn a tiny floor) counts equal."""
    return abs(mine - theirs) <= 0.005 * abs(theirs) or max(abs(mine), abs(theirs)) < 1e-12


def compare(theirs: dict, mine: dict) -> dict:
    hist_t = collections.Counter(f"{r[0]} {r[1]}" for r in theirs["rows"])
    hist_o = collections.Counter(f"{r[0]} {r[1]}" for r in mine["rows"])
    common_rows = sum((hist_t & hist_o).values())
    out = {"layers_rknn": len(theirs["rows"]), "layers_openrknn": len(mine["rows"]),
           "histogram_match": common_rows / max(len(theirs["rows"]), len(mine["rows"]), 1),
           "hist_rknn": dict(hist_t), "hist_openrknn": dict(hist_o)}
    vt = {origin(n) for n in theirs["stored"]}
    aliases = mine.get("aliases", {})
    named = {n: aliases[n] if n in aliases and origin(aliases[n]) in vt else n for n in mine["stored"]}
    vo = {origin(n) for n in named.values()}
    common = sorted(vt & vo)
    out.update({"stored_rknn": len(vt), "stored_openrknn": len(vo), "stored_common": len(common),
                "only_rknn": sorted(vt - vo), "only_openrknn": sorted(vo - vt)})
    st, so = (_scales_by_origin(theirs["scales"]),
              _scales_by_origin({named.get(k, k): v for k, v in mine["scales"].items()}))
    if st:
        scaled = [n for n in common if n in st and n in so]
        out.update({"scales_compared": len(scaled),
                    "scales_close": sum(1 for n in scaled if _close(so[n], st[n]))})
    return out


def run_one(name: str, platform: str, dtype: str, cache: Path, venv: Path) -> dict:
    result_path = cache / "results" / f"{name}.{platform}.{dtype}.json"
    if result_path.exists():
        return json.loads(result_path.read_text())
    kind, path, sizes, shape = model_inputs(name, cache)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="oracle_") as tmp:
        tmp = Path(tmp)
        dataset, image = dataset_for(tmp, shape)
        scale = 255.0 if name not in SHARED_ONNX else 127.5
        channels = 3 if image else 0
        mean = [[0.0 if name not in SHARED_ONNX else 127.5] * channels] if image else None
        std = [[scale] * channels] if image else None
        job = {"model": str(path), "kind": kind, "inputs": ["x"] if sizes else None, "sizes": sizes,
               "dataset": str(dataset), "platform": platform, "quant": dtype == "int8", "mean": mean, "std": std}
        record = {"model": name, "platform": platform, "dtype": dtype}
        (tmp / "v").mkdir()
        (tmp / "o").mkdir()
        vendor_path = cache / "vendor" / result_path.name   # rknn-toolkit2's side does not change: kept
        if vendor_path.exists():
            theirs = json.loads(vendor_path.read_text())
        else:
            try:
                theirs = vendor(job, tmp / "v", venv)
            except Exception as e:  # noqa: BLE001 - recorded: the oracle could not run
                theirs = {"error": str(e)}
            vendor_path.parent.mkdir(parents=True, exist_ok=True)
            vendor_path.write_text(json.dumps(theirs))
        if "error" in theirs:
            theirs, record["rknn_error"] = None, theirs["error"]
        try:
            mine = ours(job, tmp / "o")
        except BaseException as e:  # noqa: BLE001 - recorded, the corpus goes on
            mine, record["openrknn_error"] = None, f"{type(e).__name__}: {str(e)[:300]}"
        if theirs and mine:
            record.update(compare(theirs, mine))
    record["seconds"] = round(time.perf_counter() - started, 1)
    result_path.parent.mkdir(parents=True, exist_ok=True)
    result_path.write_text(json.dumps(record, indent=1))
    return record


def corpus(cache: Path) -> list[str]:
    names = sorted(p.stem for p in cache.glob("*.onnx"))
    return names + list(SHARED_ONNX) + list(SHARED_TFLITE)


def why(record: dict) -> str:
    """The largest OpType×dtype differences (what to read when a target is missed)."""
    t, o = collections.Counter(record.get("hist_rknn", {})), collections.Counter(record.get("hist_openrknn", {}))
    diffs = sorted(set(t) | set(o), key=lambda k: (-abs(t[k] - o[k]), k))   # ties: by name, a stable table
    return ", ".join(f"{k} {t[k]}/{o[k]}" for k in diffs[:3] if t[k] != o[k])


def table(cache: Path) -> str:
    lines = ["| model | chip | dtype | layers rknn / openrknn (Δ) | OpType×dtype match | stored common | scales ≤0.5% | largest differences (rknn/openrknn) |",
             "|---|---|---|---|---|---|---|---|"]
    for path in sorted((cache / "results").glob("*.json")):
        r = json.loads(path.read_text())
        head = f"| {r['model']} | {r['platform']} | {r['dtype']} |"
        if "rknn_error" in r or "openrknn_error" in r:
            reason = r.get("rknn_error", "").split("|")[-1].strip()[:100]
            ours_state = ("openrknn: " + r["openrknn_error"][:100]) if "openrknn_error" in r else "openrknn converts it"
            lines.append(f"{head} oracle could not run: {reason.replace('|', '/')} | | | | {ours_state} |")
            continue
        delta = r["layers_openrknn"] / r["layers_rknn"] - 1
        stored = f"{r['stored_common']}/{r['stored_rknn']} ({r['stored_common'] / max(r['stored_rknn'], 1):.0%})"
        scales = (f"{r['scales_close']}/{r['scales_compared']} ({r['scales_close'] / max(r['scales_compared'], 1):.0%})"
                  if "scales_compared" in r else "—")
        lines.append(f"{head} {r['layers_rknn']} / {r['layers_openrknn']} ({delta:+.0%}) | {r['histogram_match']:.0%} | "
                     f"{stored} | {scales} | {why(r)} |")
    return "\n".join(lines)


def summary(cache: Path) -> str:
    """Per chip and dtype: how many models meet each target (the summary table of docs/fidelity.md)."""
    builds: dict[tuple[str, str], list[dict]] = {}
    for path in sorted((cache / "results").glob("*.json")):
        r = json.loads(path.read_text())
        if "layers_rknn" in r:
            builds.setdefault((r["platform"], r["dtype"]), []).append(r)
    lines = ["| build | models | layers ±3 % | stored ≥ 95 % | scales ≥ 95 % within 0.5 % |", "|---|---|---|---|---|"]
    for (platform, dtype), rows in sorted(builds.items()):
        layers = sum(abs(r["layers_openrknn"] / r["layers_rknn"] - 1) <= 0.03 for r in rows)
        stored = sum(r["stored_common"] >= 0.95 * r["stored_rknn"] for r in rows)
        scaled = [r for r in rows if r.get("scales_compared")]
        scales = (f"{sum(r['scales_close'] >= 0.95 * r['scales_compared'] for r in scaled)} of {len(scaled)} "
                  f"({sum(r['scales_close'] for r in scaled)} of {sum(r['scales_compared'] for r in scaled)} tensors)"
                  if scaled else "—")
        lines.append(f"| {platform} {dtype} | {len(rows)} | {layers} | {stored} | {scales} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cache", default=str(HERE / ".cache"))
    ap.add_argument("--reference-venv", default=_default_reference_venv())
    ap.add_argument("--platforms", nargs="*", default=["rk3588"])
    ap.add_argument("--dtypes", nargs="*", default=["int8"])
    ap.add_argument("--only", nargs="*")
    ap.add_argument("--table", action="store_true")
    args = ap.parse_args(argv)
    cache = Path(args.cache)
    if args.table:
        print(table(cache))
        print()
        print(summary(cache))
        return 0
    venv = Path(args.reference_venv)
    if not (venv / "bin" / "python").exists():
        print(f"E no reference venv at {venv}", file=sys.stderr)
        return 1
    for platform in args.platforms:
        for dtype in args.dtypes:
            for name in args.only or corpus(cache):
                r = run_one(name, platform, dtype, cache, venv)
                status = r.get("rknn_error") or r.get("openrknn_error") or (
                    f"{r['layers_rknn']} vs {r['layers_openrknn']} layers, hist {r['histogram_match']:.0%}"
                    + (f", stored {r['stored_common']}/{r['stored_rknn']}" if 'stored_rknn' in r else "")
                    + (f", scales {r['scales_close']}/{r['scales_compared']}" if 'scales_compared' in r else ""))
                print(f"{name} {platform} {dtype}: {status} ({r['seconds']} s)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
