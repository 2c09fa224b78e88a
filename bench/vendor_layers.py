"""Where Rockchip's simulator and openrknn's part on the same quantization, tensor by tensor.

openrknn builds the model (``--algorithm``), hands its build to rknn-toolkit2 exactly as
``export_rknn(toolchain='rknn-toolkit2')`` does (the same job script), and the vendor's
``accuracy_analysis`` dumps its simulator's value of every tensor on one held-out picture. openrknn's
simulator values of the same tensors come from its own analysis graph. Printed, in graph order: each
tensor both have, its cosine between the two simulators, the largest difference in steps of openrknn's
scale, the share of values that differ, and what the vendor's cfg says about it (its range given by openrknn, its own, float).

Usage: ``python bench/vendor_layers.py [--model cls|det] [--algorithm normal] [--toolchain-python PY]
[--weight-qtype asymmetric_quantized|symmetric_quantized] [--keep DIR [--reuse]] [--all]``
(``--all`` prints every tensor, not only those below 0.9999 and their neighbours; ``--reuse`` reads the
vendor's dumps of an earlier run kept in DIR instead of compiling again).
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
from PIL import Image

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from vendor_backend import CALIBRATION, MODELS, cosine, pictures  # noqa: E402

from openrknn.analysis import _read_inputs  # noqa: E402
from openrknn.analysis.accuracy import _expose_quantized, _lowered, _run_all, _sim_value  # noqa: E402
from openrknn.export import rockchip  # noqa: E402
from openrknn.graph import npu_layers  # noqa: E402
from rknn.api import RKNN  # noqa: E402

# the vendor side: the product's job script, then the vendor's accuracy_analysis on the same build
_VENDOR_ANALYSIS = """
import json, os, sys
sys.path.insert(0, os.getcwd())
import rk_job
from rknn.api import RKNN
job = json.load(open(sys.argv[1]))
result = {}
r = RKNN(verbose=False)
assert r.config(**job['config']) == 0
assert r.load_onnx(model=job['onnx']) == 0
assert r.hybrid_quantization_step1(dataset=job['dataset'], proposal=False) == 0
stem = os.path.splitext(os.path.basename(job['onnx']))[0]
rk_job._edit_config(stem + '.quantization.cfg', job['ranges'], job['float16'], result, job['float16_internal'])
open('handed.cfg', 'w').write(open(stem + '.quantization.cfg').read())   # the edited cfg, kept for reading
r.release()
r = RKNN(verbose=False)
assert r.hybrid_quantization_step2(model_input=stem + '.model', data_input=stem + '.data',
                                   model_quantization_cfg=stem + '.quantization.cfg') == 0
assert r.accuracy_analysis(inputs=job['analysis_inputs'], output_dir=job['analysis_dir']) == 0
json.dump(result, open(sys.argv[2], 'w'))
"""


def run_vendor_job(python: str, model, source, config, dataset: str, work: str, script: str, script_text: str,
                   args: list[str], **extra) -> dict:
    """Hand ``model`` over as ``export_rknn(toolchain='rknn-toolkit2')`` does (graph, vendor config, ranges,
    float16 layers; ``extra`` joins the job) and run ``script_text`` as ``script`` in the vendor's Python,
    isolated (``-I``) in ``work``, beside the export's ``rk_job`` module. Returns the job."""
    import onnx
    _, version = rockchip.find_toolchain(python)
    onnx_path = os.path.join(work, "model.onnx")
    onnx.save(rockchip.handover_graph(model, source), onnx_path)
    job = {"onnx": onnx_path, "config": rockchip.vendor_config(config, model, version),
           "dataset": rockchip._absolute_dataset(dataset, work), "ranges": rockchip.tensor_ranges(model),
           "float16": rockchip.float16_tensors(model), "float16_internal": rockchip.float16_layer_internals(model),
           **extra}
    Path(work, "job.json").write_text(json.dumps(job))
    shutil.copyfile(rockchip._JOB_SCRIPT, os.path.join(work, "rk_job.py"))
    Path(work, script).write_text(script_text)
    done = subprocess.run([python, "-I", script, "job.json", *args], cwd=work, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(done.stdout[-3000:] + done.stderr[-3000:])
    return job


def vendor_dump(python: str, model, source, config, dataset: str, image: str, work: str) -> tuple[dict, dict]:
    """The vendor simulator's value of every tensor it dumps (name → array) and the handover result."""
    job = run_vendor_job(python, model, source, config, dataset, work, "analysis.py", _VENDOR_ANALYSIS,
                         ["result.json"], analysis_inputs=[image], analysis_dir=os.path.join(work, "snapshot"))
    return read_snapshot(job["analysis_dir"]), json.loads(Path(work, "result.json").read_text())


def read_snapshot(folder: str) -> dict[str, np.ndarray]:
    """The vendor's simulator dumps (``simulator/npy/*.npy``); ``map_name_to_file.txt`` names their tensors."""
    names = {}
    mapping = os.path.join(folder, "map_name_to_file.txt")
    for line in Path(mapping).read_text().splitlines()[2:]:
        parts = line.split()
        if len(parts) == 2:
            names[os.path.splitext(parts[1])[0]] = parts[0]
    return {names.get(Path(path).stem, Path(path).stem): np.load(path)
            for path in glob.glob(os.path.join(folder, "simulator", "npy", "*.npy"))}


def prepare_build(data: Path, model_key: str, algorithm: str, weight_qtype: str, work: str):
    """openrknn's build of ``model_key`` (calibration pictures and one held-out picture written into
    ``work``): returns (the RKNN object, the dataset file, the held-out picture)."""
    spec = MODELS[model_key]
    onnx_path = str(data / "models" / "onnx" / spec["file"])
    os.makedirs(work, exist_ok=True)
    names = []
    for k, img in enumerate(pictures(data, spec, CALIBRATION, seed=0)):
        names.append(os.path.join(work, f"calib_{k}.png"))
        Image.fromarray(img).save(names[-1])
    dataset = os.path.join(work, "dataset.txt")
    Path(dataset).write_text("\n".join(names) + "\n")
    image = os.path.join(work, "held.png")
    Image.fromarray(pictures(data, spec, 1, seed=1)[0]).save(image)
    import onnx
    input_name = onnx.load(onnx_path).graph.input[0].name
    rknn = RKNN()
    rknn.config(mean_values=[spec["mean"]], std_values=[spec["std"]], target_platform="rk3588",
                quantized_algorithm="normal" if algorithm == "auto_hybrid" else algorithm,
                auto_hybrid_cos_thresh=0.995, weight_qtype=weight_qtype)
    rknn.load_onnx(model=onnx_path, inputs=[input_name], input_size_list=[[1, 3, *spec["size"]]])
    assert rknn.build(do_quantization=True, dataset=dataset, auto_hybrid=algorithm == "auto_hybrid") == 0
    return rknn, dataset, image


def add_build_arguments(parser: argparse.ArgumentParser, model: str) -> None:
    """The options of :func:`prepare_build` and of the vendor's interpreter, shared by the vendor benches."""
    parser.add_argument("--data", default=str(REPO.parent / "shared"))
    parser.add_argument("--model", default=model)
    parser.add_argument("--algorithm", default="normal")
    parser.add_argument("--toolchain-python", default=os.environ.get(rockchip.ENV_VAR))
    parser.add_argument("--weight-qtype", default="asymmetric_quantized")
    parser.add_argument("--keep", help="keep the work folder here")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_build_arguments(parser, model="cls")
    parser.add_argument("--all", action="store_true")
    parser.add_argument("--reuse", action="store_true", help="reuse the vendor's dumps in --keep (same build)")
    args = parser.parse_args(argv)
    python, _ = rockchip.find_toolchain(args.toolchain_python)
    work = args.keep or tempfile.mkdtemp(prefix="vendor-layers-")
    rknn, dataset, image = prepare_build(Path(args.data), args.model, args.algorithm, args.weight_qtype, work)
    model = rknn._model
    feeds = _read_inputs(model, [image], rknn._cfg())
    simulated = _run_all(_expose_quantized(_lowered(model)), feeds)
    if args.reuse and os.path.isfile(os.path.join(work, "result.json")):   # the vendor's dumps of an earlier run
        theirs = read_snapshot(os.path.join(work, "snapshot"))
        handed = json.loads(Path(work, "result.json").read_text())
    else:
        theirs, handed = vendor_dump(python, model, rknn._source.model, rknn._cfg(), dataset, image, work)
    unmapped, vendor_float = set(handed.get("unmapped", [])), set(handed.get("vendor_float", []))
    internal = npu_layers.internal_tensors(model.golden.graph)
    order = [o for n in model.golden.graph.node for o in n.output]
    print(f"{len(theirs)} vendor tensors dumped; {len(handed.get('mapped', []))} mapped, {len(unmapped)} unmapped "
          f"({', '.join(sorted(unmapped))}); vendor float: {', '.join(sorted(vendor_float))}")
    rows = []
    for name in order:
        ours, vendor = _sim_value(simulated, name), theirs.get(name)
        if ours is None or vendor is None:
            rows.append((name, None, None, "ours" if vendor is None and ours is not None else
                         ("vendor" if vendor is not None else "neither")))
            continue
        if vendor.size != ours.size:
            rows.append((name, None, None, f"shape {ours.shape} vs {vendor.shape}"))
            continue
        vendor = vendor.reshape(ours.shape) if vendor.shape == ours.shape or vendor.ndim != 4 \
            else vendor.reshape([ours.shape[i] for i in (0, 2, 3, 1)]).transpose(0, 3, 1, 2)
        params = model.quant_params.get(name) or {}
        scale = float(params["scale"][0]) if params.get("scale") and len(params["scale"]) == 1 else None
        steps = float(np.abs(ours - vendor).max() / scale) if scale else float("nan")
        differ = float(np.mean(np.abs(ours - vendor) > 0.01 * scale)) if scale else float("nan")
        note = f"{100 * differ:5.2f}% differ  " if scale else ""
        note += "internal to our layer" if name in internal else "unmapped" if name in unmapped else ("vendor float" if name in vendor_float else "")
        rows.append((name, cosine(ours, vendor), steps, note))
    for k, (name, cos, steps, note) in enumerate(rows):
        near = any(r[1] is not None and r[1] < 0.9999 for r in rows[max(0, k - 1):k + 2])
        if args.all or near:
            print(f"{name:60s} {'—' if cos is None else f'{cos:.6f}':>9s} "
                  f"{'—' if steps is None else f'{steps:.1f}':>7s}  {note}")
    print("work folder:", work)
    return 0


if __name__ == "__main__":
    sys.exit(main())
