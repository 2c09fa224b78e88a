"""Our NPU layer list next to Rockchip's rknn-toolkit2, per shared ONNX model (int8, rk3588).

    python bench/compare_layers.py [--reference-venv /tmp/rknn-reference] [--models cls rec det]

Rockchip's toolkit runs in its own venv (``../shared/tools/reference-toolkit-env.sh`` makes it; it
is never a dependency): this script runs its verbose int8 build in a subprocess and reads the
"Network Layer Information Table" it prints; ours is ``eval_perf``'s layer list of the same build.
Both calibrate on the same pictures (text pictures for the OCR models). Prints the layer count of
each OpType side by side and the total. With ``--params`` it also runs both toolkits'
``hybrid_quantization_step1`` and compares the per-tensor activation scales each writes into its
``.quantization.cfg`` for the tensors both quantize.
"""
from __future__ import annotations

import argparse
import collections
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

MEAN, STD = [[123.675, 116.28, 103.53]], [[58.395, 57.12, 57.375]]
MODELS = {"cls": ("ch_ppocr_mobile_v2.0_cls_infer.onnx", 48, 192),
          "rec": ("ch_PP-OCRv4_rec_infer.onnx", 48, 320),
          "det": ("ch_PP-OCRv3_det_infer.onnx", 480, 480)}

_REFERENCE_BUILD = """
import sys
from rknn.api import RKNN
model, h, w, dataset, mean, std = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], eval(sys.argv[5]), eval(sys.argv[6])
r = RKNN(verbose=True)
r.config(mean_values=mean, std_values=std, target_platform='rk3588')
assert r.load_onnx(model=model, inputs=['x'], input_size_list=[[1, 3, h, w]]) == 0
assert r.build(do_quantization=True, dataset=dataset) == 0
"""

_REFERENCE_STEP1 = """
import sys
from rknn.api import RKNN
model, h, w, dataset, mean, std = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], eval(sys.argv[5]), eval(sys.argv[6])
r = RKNN()
r.config(mean_values=mean, std_values=std, target_platform='rk3588')
assert r.load_onnx(model=model, inputs=['x'], input_size_list=[[1, 3, h, w]]) == 0
assert r.hybrid_quantization_step1(dataset=dataset) == 0
"""


def activation_scales(cfg_path: Path) -> dict[str, float]:
    """Tensor -> scale of every per-tensor entry of a hybrid ``.quantization.cfg``."""
    import yaml
    text = cfg_path.read_text()
    params = yaml.safe_load(text[text.index("\n") + 1:] if text.startswith("%YAML") else text)
    scales = {}
    for name, entry in (params.get("quantize_parameters") or {}).items():
        scale = entry.get("scale") if isinstance(entry, dict) else None
        if isinstance(scale, list) and len(scale) == 1 and scale[0]:
            scales[name] = float(scale[0])
    return scales


def compare_params(venv: Path, model: Path, h: int, w: int, dataset: Path, mean, std) -> None:
    """Both toolkits' step-1 activation scales side by side, for the tensors both quantize."""
    import numpy as np
    from rknn.api import RKNN
    stem = model.stem
    with tempfile.TemporaryDirectory() as theirs_dir, tempfile.TemporaryDirectory() as ours_dir:
        subprocess.run([str(venv / "bin" / "python"), "-I", "-c", _REFERENCE_STEP1, str(model), str(h), str(w),
                        str(dataset), repr(mean), repr(std)], capture_output=True, text=True, timeout=3600,
                       cwd=theirs_dir, check=True)
        import os
        here = os.getcwd()
        os.chdir(ours_dir)
        try:
            rknn = RKNN()
            rknn.config(mean_values=mean, std_values=std, target_platform="rk3588")
            assert rknn.load_onnx(model=str(model), inputs=["x"], input_size_list=[[1, 3, h, w]]) == 0
            assert rknn.hybrid_quantization_step1(dataset=str(dataset)) == 0
        finally:
            os.chdir(here)
        theirs = activation_scales(Path(theirs_dir) / f"{stem}.quantization.cfg")
        ours = activation_scales(Path(ours_dir) / f"{stem}.quantization.cfg")
    common = sorted(set(theirs) & set(ours))
    ratios = np.array([ours[n] / theirs[n] for n in common])
    print(f"  per-tensor activation scales: rknn-toolkit2 {len(theirs)}, openrknn {len(ours)}, both {len(common)}")
    if common:
        same = int(np.sum(np.abs(ratios - 1) < 1e-3))
        print(f"    same scale (within 0.1%): {same} of {len(common)}; ours/theirs median {np.median(ratios):.4f}, "
              f"min {ratios.min():.4f}, max {ratios.max():.4f}")
        worst = sorted(zip(common, ratios), key=lambda item: -abs(np.log(item[1])))[:5]
        print("    largest differences: " + ", ".join(f"{n} {r:.3f}" for n, r in worst))


def reference_layers(venv: Path, model: Path, h: int, w: int, dataset: Path, mean, std) -> list[tuple[str, ...]]:
    """(OpType, DataType, Target, FullName) rows of the reference toolkit's layer table."""
    # -I, and a neutral working folder: this checkout's own `rknn` package must not shadow Rockchip's
    done = subprocess.run([str(venv / "bin" / "python"), "-I", "-c", _REFERENCE_BUILD, str(model), str(h), str(w),
                           str(dataset), repr(mean), repr(std)], capture_output=True, text=True, timeout=3600,
                          cwd=dataset.parent)
    rows, in_table = [], False
    for line in (done.stdout + done.stderr).splitlines():
        text = line.split("]", 1)[-1].strip() if "RKNN:" in line else line.strip()
        if "Network Layer Information Table" in text:
            in_table = True
            continue
        parts = text.split()
        if in_table and len(parts) > 4 and parts[0].isdigit():
            rows.append((parts[1], parts[2], parts[3], parts[-1]))
        elif in_table and rows and not parts[:1] == ["-" * len(parts[0])] and text.startswith("---"):
            break
    if not rows:
        raise RuntimeError(f"no layer table in the reference build's output:\n{(done.stdout + done.stderr)[-2000:]}")
    return rows


def our_layers(model: Path, h: int, w: int, dataset: Path, mean, std) -> list[tuple[str, str, str]]:
    from openrknn.chips import get_chip
    from openrknn.profile import estimate_perf
    from rknn.api import RKNN
    rknn = RKNN()
    rknn.config(mean_values=mean, std_values=std, target_platform="rk3588")
    assert rknn.load_onnx(model=str(model), inputs=["x"], input_size_list=[[1, 3, h, w]]) == 0
    assert rknn.build(do_quantization=True, dataset=str(dataset)) == 0
    return [(layer.op_type, layer.data_type.upper(), layer.target, layer.full_name)
            for layer in estimate_perf(rknn._model, get_chip("rk3588")).layers]


def layer_heads(rows: list[tuple[str, ...]]) -> set[str]:
    """The ONNX node each layer is named after ('Conv:Conv@11_ConvAdd' -> 'Conv@11'): which node
    outputs the layer stores, in both toolkits' naming."""
    heads = set()
    for *_, full_name in rows:
        name = full_name.split(":", 1)[-1]
        for suffix in ("_ConvAdd", "_2conv0", "_2conv1", "_2conv2", "_2conv3"):
            name = name.split(suffix)[0]
        heads.add(name)
    return heads - {"x"}


def main(argv: list[str] | None = None) -> int:
    from PIL import Image
    from text_images import text_pictures
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reference-venv", default="/tmp/rknn-reference")
    ap.add_argument("--shared", default=str(REPO.parent / "shared"))
    ap.add_argument("--models", nargs="*", default=list(MODELS))
    ap.add_argument("--params", action="store_true", help="also compare step-1 quantization parameters")
    args = ap.parse_args(argv)
    venv, shared = Path(args.reference_venv), Path(args.shared)
    if not (venv / "bin" / "python").exists():
        print(f"E no reference venv at {venv}: run ../shared/tools/reference-toolkit-env.sh {venv}", file=sys.stderr)
        return 1
    for key in args.models:
        file, h, w = MODELS[key]
        with tempfile.TemporaryDirectory() as tmp:
            lines = []
            for i, picture in enumerate(text_pictures(shared / "images", 8, (h, w), seed=0)):
                Image.fromarray(picture).save(f"{tmp}/c{i}.png")
                lines.append(f"{tmp}/c{i}.png")
            dataset = Path(tmp) / "dataset.txt"
            dataset.write_text("\n".join(lines) + "\n")
            model = shared / "models" / "onnx" / file
            theirs = reference_layers(venv, model, h, w, dataset, MEAN, STD)
            ours = our_layers(model, h, w, dataset, MEAN, STD)
            if args.params:
                compare_params(venv, model, h, w, dataset, MEAN, STD)
        count_t = collections.Counter(f"{row[0]} {row[1]}" for row in theirs)
        count_o = collections.Counter(f"{row[0]} {row[1]}" for row in ours)
        heads_t, heads_o = layer_heads(theirs), layer_heads(ours)
        print(f"\n{file} ({h}x{w}): rknn-toolkit2 {len(theirs)} layers, openrknn {len(ours)} "
              f"({len(ours) / len(theirs) - 1:+.0%})")
        print(f"  {'OpType DataType':<34}{'rknn-toolkit2':>14}{'openrknn':>10}")
        for kind in sorted(set(count_t) | set(count_o), key=lambda k: -max(count_t[k], count_o[k])):
            print(f"  {kind:<34}{count_t[kind]:>14}{count_o[kind]:>10}")
        common = heads_t & heads_o
        print(f"  layers named after the same ONNX node: {len(common)} (rknn-toolkit2 {len(heads_t)}, "
              f"openrknn {len(heads_o)})")
        print(f"    only rknn-toolkit2: {sorted(heads_t - heads_o)[:12]}")
        print(f"    only openrknn:      {sorted(heads_o - heads_t)[:12]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
