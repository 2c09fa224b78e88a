"""Predicted inference time (and memory) of the shared models and the reference networks on every platform.

Usage::

    python bench/profile_models.py [--dtype w8a8] [--memory] [--models DIR]

Shared ONNX models (``OPENRKNN_TEST_DATA`` or ``../shared`` → ``models/onnx``) get their dynamic
dimensions fixed (PP-OCRv4 rec 1x3x48x320, PP-OCR cls 1x3x48x192, silero VAD 1x512 audio and its
static state) and their shape/constant sub-graphs folded by onnxruntime's basic optimizer, as the
RKNN build would. Each cell is the estimated total time in ms (single core, ``core_mask`` AUTO);
RK3588/RK3576 also get an all-cores column. Toolkit1 platforms use their own quantized dtype.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

import onnx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from openrknn.chips import all_chips  # noqa: E402
from openrknn.api.common import NPUCoreMask  # noqa: E402
from openrknn.profile import estimate_memory, estimate_perf  # noqa: E402
from openrknn.profile.reference_nets import BUILDERS, reference_onnx, wrap_onnx  # noqa: E402

FIXED_SHAPES = {
    "ch_PP-OCRv4_rec_infer.onnx": {"x": [1, 3, 48, 320]},
    "ch_ppocr_mobile_v2.0_cls_infer.onnx": {"x": [1, 3, 48, 192]},
    "silero_vad_16k_op15.onnx": {"input": [1, 512], "state": [2, 1, 128]},
}
REFERENCE_SIZES = {"ppocr_det_like": 480}
TOOLKIT1_DTYPE = "asymmetric_quantized-u8"


def shared_models_dir(explicit: str | None) -> Path | None:
    env = os.environ.get("OPENRKNN_TEST_DATA")
    for root in [Path(p) for p in (explicit, env) if p] + [REPO.parent / "shared"]:
        d = root / "models" / "onnx" if (root / "models").is_dir() else root
        if d.is_dir() and any(d.glob("*.onnx")):
            return d
    return None


def fix_and_fold(path: Path) -> onnx.ModelProto:
    """Static input shapes, then onnxruntime constant folding (ORT_ENABLE_BASIC keeps standard ONNX ops)."""
    import onnxruntime as ort
    model = onnx.load(str(path))
    shapes = FIXED_SHAPES.get(path.name, {})
    inits = {i.name for i in model.graph.initializer}
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        dims = shapes.get(vi.name) or [d.dim_value or 1 for d in vi.type.tensor_type.shape.dim]
        vi.type.tensor_type.shape.Clear()
        for d in dims:
            vi.type.tensor_type.shape.dim.add().dim_value = d
    if path.name.startswith("silero"):           # sample rate as a constant: the 16 kHz branch is taken
        model.graph.initializer.append(onnx.numpy_helper.from_array(__import__("numpy").array(16000, "int64"), "sr"))
        keep = [vi for vi in model.graph.input if vi.name != "sr"]
        del model.graph.input[:]
        model.graph.input.extend(keep)
    for vi in model.graph.output:
        vi.type.tensor_type.ClearField("shape")
    with tempfile.TemporaryDirectory() as tmp:
        src, dst = Path(tmp) / "in.onnx", Path(tmp) / "out.onnx"
        onnx.save(model, str(src))
        opts = ort.SessionOptions()
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
        opts.optimized_model_filepath = str(dst)
        ort.InferenceSession(str(src), opts, providers=["CPUExecutionProvider"])
        return onnx.load(str(dst))


def collect(models_dir: Path | None) -> dict[str, onnx.ModelProto]:
    nets = {name: reference_onnx(name, REFERENCE_SIZES.get(name)) for name in BUILDERS}
    if models_dir is not None:
        for path in sorted(models_dir.glob("*.onnx")):
            try:
                nets[path.stem] = fix_and_fold(path)
            except Exception as e:  # noqa: BLE001 - a bench skips models it cannot prepare, and says why
                print(f"skip {path.name}: {e}", file=sys.stderr)
    return nets


def chip_dtype(chip, dtype: str | None) -> str | None:
    """The requested dtype if the chip offers it, else the chip's first quantized dtype (RK2118: w16a16i)."""
    if chip.toolkit == 1:
        return TOOLKIT1_DTYPE
    if dtype is None and chip.float_on_npu:
        return None
    return dtype if dtype in chip.quantized_dtypes else chip.quantized_dtypes[0]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dtype", default="w8a8", help="Toolkit2 quantized_dtype ('none' for float16)")
    ap.add_argument("--memory", action="store_true", help="also print total memory (MiB) per platform")
    ap.add_argument("--models", default=None, help="folder with models/onnx (default: OPENRKNN_TEST_DATA or ../shared)")
    args = ap.parse_args(argv)
    dtype = None if args.dtype.lower() == "none" else args.dtype
    chips = list(all_chips().values())
    nets = collect(shared_models_dir(args.models))
    cols = []
    for c in chips:
        cols.append((c, 0, c.name))
        if c.cores > 1:
            cols.append((c, NPUCoreMask.NPU_CORE_ALL, f"{c.name}x{c.cores}"))
    width = max(len(n) for n in nets) + 2
    print(f"Estimated time per frame (ms), openrknn cost model; dtype {args.dtype} (Toolkit1 chips: {TOOLKIT1_DTYPE}, "
          f"chips without it: their first quantized dtype); <chip>xN = all N cores")
    print("network".ljust(width) + "".join(f"{label:>11}" for _, _, label in cols))
    for name, onnx_model in nets.items():
        cells = []
        for chip, mask, _ in cols:
            model = wrap_onnx(onnx_model, chip_dtype(chip, dtype), chip.name)
            cells.append(f"{estimate_perf(model, chip, mask).total_time_us / 1000:>11.2f}")
        print(name.ljust(width) + "".join(cells))
    if args.memory:
        print("\nEstimated total NPU memory (MiB)")
        print("network".ljust(width) + "".join(f"{c.name:>11}" for c in chips))
        for name, onnx_model in nets.items():
            cells = [f"{estimate_memory(wrap_onnx(onnx_model, chip_dtype(c, dtype), c.name), c).total_memory / 2**20:>11.2f}"
                     for c in chips]
            print(name.ljust(width) + "".join(cells))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
