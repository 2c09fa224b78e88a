"""Does Rockchip's own simulator give the same detector output on two CPUs?

The vendor's simulator (rknn-toolkit2 ``init_runtime()`` + ``inference``) runs every op in float32
through onnxruntime, whose MLAS kernels pick their summation order by CPU features (AVX-512 / AVX2 /
SSE). docs/deployment.md traces the last 0.004 between it and openrknn's exact integer simulator on
the PP-OCRv3 detector to rounding ties decided by that float32 order. This bench measures it:

1. ``prepare``: openrknn builds the detector (rk3588, ``normal``, asymmetric weights, the calibration
   and held-out pictures of ``bench/vendor_backend.py``), exports it with
   ``export_rknn(toolchain='rknn-toolkit2')`` (the Rockchip file, keeping the handover's job folder) and
   as its own ``.rknn``.
2. ``vendor TAG [--emulate CPU]``: the vendor's interpreter (``-I``, from the work folder) repeats the
   handover's last step (``hybrid_quantization_step2`` on the kept config: the vendor refuses
   ``init_runtime()`` on its simulator after ``load_rknn``), then ``init_runtime()`` + ``inference``, and
   saves its outputs; ``--emulate CPU`` runs it under ``qemu-x86_64 -cpu CPU``: ``Haswell`` (AVX2 + FMA,
   no AVX-512) or ``SandyBridge`` (AVX without FMA). onnxruntime has no switch to force another MLAS kernel
   family natively, so emulation is the way; the vendor's numpy/onnxruntime need AVX (``Nehalem``,
   ``qemu64`` stop on an illegal instruction).
3. ``openrknn TAG [--emulate CPU]``: openrknn's simulator on its own file, natively or emulated.
4. ``compare``: cosine and share of differing values between every pair of saved runs.

``all`` runs the four steps in order (natively, then emulated as each CPU of ``--cpus``). Usage:
``python bench/vendor_cpu_dependence.py all [--work DIR] [--pictures 2] [--cpus Haswell,SandyBridge]``.
Needs the vendor's Python (``$OPENRKNN_RKNN_TOOLKIT2`` or ``--toolchain-python``) and ``qemu-x86_64``
(7.2 or later: AVX2 in its emulator).
"""
from __future__ import annotations

import argparse
import contextlib
import glob
import itertools
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

# rknn-toolkit2 refuses init_runtime() on the simulator after load_rknn ("use load_xxx & build"), so the
# vendor's run repeats the handover's last step on the kept files: hybrid_quantization_step2 on the
# config openrknn edited, then its simulator. The file it writes is compared too (is the compile CPU-free?).
_VENDOR_SCRIPT = """
import sys, numpy as np
from rknn.api import RKNN
handover, tag, samples = sys.argv[1], sys.argv[2], sys.argv[3:]
r = RKNN(verbose=False)
assert r.hybrid_quantization_step2(model_input=handover + '/model.model', data_input=handover + '/model.data',
                                   model_quantization_cfg=handover + '/model.quantization.cfg') == 0, 'step2'
assert r.export_rknn(f'{tag}.rknn') == 0, 'export_rknn'
assert r.init_runtime() == 0, 'init_runtime'
for k, p in enumerate(samples):
    out = r.inference(inputs=[np.load(p)])
    assert out is not None, 'inference'
    np.save(f'out_{tag}_{k}.npy', np.asarray(out[0], np.float32))
"""


def emulated(cpu: str | None) -> list[str]:
    return ["qemu-x86_64", "-cpu", cpu] if cpu else []


def prepare(work: Path, pictures_count: int, toolchain_python: str | None) -> None:
    from PIL import Image

    from rknn.api import RKNN
    from vendor_backend import CALIBRATION, MODELS, pictures

    spec = MODELS["det"]
    data = REPO.parent / "shared" if (REPO.parent / "shared").is_dir() else Path(os.environ["OPENRKNN_TEST_DATA"])
    onnx_path = str(data / "models" / "onnx" / spec["file"])
    names = []
    for k, img in enumerate(pictures(data, spec, CALIBRATION, seed=0)):
        names.append(str(work / f"calib_{k}.png"))
        Image.fromarray(img).save(names[-1])
    (work / "dataset.txt").write_text("\n".join(names) + "\n")
    held = pictures(data, spec, pictures_count, seed=1)
    for k, img in enumerate(held):
        np.save(work / f"held_{k}.npy", img[None])
    import onnx
    input_name = onnx.load(onnx_path).graph.input[0].name
    rknn = RKNN()
    rknn.config(mean_values=[spec["mean"]], std_values=[spec["std"]], target_platform="rk3588",
                quantized_algorithm="normal", weight_qtype="asymmetric_quantized")
    rknn.load_onnx(model=onnx_path, inputs=[input_name], input_size_list=[[1, 3, *spec["size"]]])
    assert rknn.build(do_quantization=True, dataset=str(work / "dataset.txt")) == 0
    # keep the handover's job folder (model.model / .data / edited .quantization.cfg) for the vendor runs
    from openrknn.export import rockchip
    handover = work / "handover"
    handover.mkdir(exist_ok=True)
    original = rockchip.tempfile.TemporaryDirectory
    rockchip.tempfile.TemporaryDirectory = lambda **_: contextlib.nullcontext(str(handover))
    try:
        assert rknn.export_rknn(str(work / "det.rknn"), toolchain="rknn-toolkit2",
                                toolchain_python=toolchain_python) == 0
    finally:
        rockchip.tempfile.TemporaryDirectory = original
    assert rknn.export_rknn(str(work / "det.openrknn.rknn")) == 0
    rknn.release()


def run_vendor(work: Path, tag: str, cpu: str | None, toolchain_python: str | None) -> float:
    from openrknn.export import rockchip

    python, _ = rockchip.find_toolchain(toolchain_python)
    (work / "vendor_sim.py").write_text(_VENDOR_SCRIPT)
    samples = sorted(str(p) for p in work.glob("held_*.npy"))
    started = time.time()
    subprocess.run([*emulated(cpu), python, "-I", "vendor_sim.py", str(work / "handover"), f"vendor_{tag}",
                    *samples], cwd=work, check=True)
    return time.time() - started


def run_openrknn(work: Path, tag: str) -> None:
    from rknn.api import RKNN

    rknn = RKNN()
    assert rknn.load_rknn(str(work / "det.openrknn.rknn")) == 0
    rknn.init_runtime()
    for k, p in enumerate(sorted(work.glob("held_*.npy"))):
        np.save(work / f"out_openrknn_{tag}_{k}.npy", np.asarray(rknn.inference(inputs=[np.load(p)])[0], np.float32))
    rknn.release()


def compare(work: Path) -> list[str]:
    """One table row per pair of runs: mean / worst cosine over the pictures, share of differing values."""
    runs: dict[str, list[np.ndarray]] = {}
    for path in sorted(glob.glob(str(work / "out_*_*.npy"))):
        name = Path(path).stem[len("out_"):].rsplit("_", 1)[0]
        runs.setdefault(name, []).append(np.load(path))
    rows = ["| run A | run B | cosine mean / worst | values differing | largest difference |", "|---|---|---|---|---|"]
    for a, b in itertools.combinations(sorted(runs), 2):
        pairs = list(zip(runs[a], runs[b]))
        cos = [float(x.astype(np.float64).ravel() @ y.astype(np.float64).ravel()
                     / (np.linalg.norm(x.astype(np.float64)) * np.linalg.norm(y.astype(np.float64)) + 1e-30))
               for x, y in pairs]
        differing = sum(int(np.count_nonzero(x != y)) for x, y in pairs)
        total = sum(x.size for x, _ in pairs)
        largest = max(float(np.abs(x.astype(np.float64) - y).max()) for x, y in pairs)
        rows.append(f"| {a} | {b} | {np.mean(cos):.6f} / {min(cos):.6f} | {differing} of {total} "
                    f"({differing / total:.2%}) | {largest:.4g} |")
    files = sorted(work.glob("vendor_*.rknn"))
    if len(files) > 1:
        # they differ between two native runs too (build metadata), so this is context, not a finding
        first = np.frombuffer(files[0].read_bytes(), np.uint8)
        for f in files[1:]:
            other = np.frombuffer(f.read_bytes(), np.uint8)
            apart = int(np.count_nonzero(first != other)) if other.size == first.size else "size differs"
            rows.append(f"{files[0].stem} vs {f.stem} compiled file: {apart} byte(s) differ of {first.size}")
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("step", choices=["prepare", "vendor", "openrknn", "compare", "all"])
    parser.add_argument("tag", nargs="?", default="native", help="name of the run (vendor/openrknn steps)")
    parser.add_argument("--work", default="/tmp/vendor_cpu_dependence")
    parser.add_argument("--pictures", type=int, default=2)
    parser.add_argument("--emulate", default=None, help="qemu-x86_64 -cpu model, e.g. Haswell")
    parser.add_argument("--cpus", default="Haswell,SandyBridge", help="emulated CPUs of the 'all' step")
    parser.add_argument("--toolchain-python", default=None)
    args = parser.parse_args(argv)
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    if args.step in ("prepare", "all"):
        prepare(work, args.pictures, args.toolchain_python)
    if args.step == "vendor":
        print(f"vendor {args.tag}: {run_vendor(work, args.tag, args.emulate, args.toolchain_python):.0f} s")
    if args.step == "openrknn":
        if args.emulate:   # the whole openrknn process under the emulated CPU
            subprocess.run([*emulated(args.emulate), sys.executable, __file__, "openrknn", args.tag,
                            "--work", str(work)], check=True)
        else:
            run_openrknn(work, args.tag)
    if args.step == "all":
        cpus = args.cpus.split(",")
        for tag, emulate in [("native", None)] + [(cpu, cpu) for cpu in cpus]:
            print(f"vendor {tag}: {run_vendor(work, tag, emulate, args.toolchain_python):.0f} s", flush=True)
        run_openrknn(work, "native")
        for cpu in cpus:
            subprocess.run([*emulated(cpu), sys.executable, __file__, "openrknn", cpu, "--work", str(work)],
                           check=True)
    if args.step in ("compare", "all"):
        print("\n".join(compare(work)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
