"""The optional oracle: the same corpus case through rknn-toolkit2's simulator, in a subprocess.

``OPENRKNN_REFERENCE_PYTHON`` names the python of an environment where Rockchip's toolkit is
installed. The script below runs there (``-I``, from the case folder, so this project's ``rknn``
package cannot shadow the vendor's); the vendor package is never imported in this process.
"""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import numpy as np

ENV = "OPENRKNN_REFERENCE_PYTHON"

_SCRIPT = r'''
import json, sys
import numpy as np
from rknn.api import RKNN
job = json.load(open("vendor_job.json"))
rknn = RKNN(verbose=False)
rknn.config(target_platform=job["platform"], quantized_dtype=job["dtype"], optimization_level=3)
assert rknn.load_onnx(model=job["model"]) == 0
assert rknn.build(do_quantization=True, dataset=job["dataset"]) == 0
assert rknn.init_runtime() == 0
results = {}
for k, files in enumerate(job["evaluation"]):
    outs = rknn.inference(inputs=[np.load(f) for f in files], data_format=["nchw"] * len(files))
    for j, out in enumerate(outs):
        results[f"{k}_{j}"] = np.asarray(out, np.float32)
np.savez("vendor_outputs.npz", **results)
'''


def reference_python() -> str | None:
    path = os.environ.get(ENV)
    return path if path and Path(path).exists() else None


def run_vendor(folder: Path, model: Path, dataset: Path, evaluation: list[list[np.ndarray]], outputs: int,
               dtype: str = "w8a8", platform: str = "rk3588", timeout: float = 300) -> list[list[np.ndarray]]:
    """The vendor simulator's outputs for each evaluation sample (raises on failure)."""
    files = []
    for k, sample in enumerate(evaluation):
        names = []
        for j, array in enumerate(sample):
            path = folder / f"eval{k}_{j}.npy"
            np.save(path, array)
            names.append(str(path))
        files.append(names)
    (folder / "vendor_job.json").write_text(json.dumps({"platform": platform, "dtype": dtype, "model": str(model),
                                                        "dataset": str(dataset), "evaluation": files}))
    (folder / "vendor_run.py").write_text(_SCRIPT)
    done = subprocess.run([reference_python(), "-I", "vendor_run.py"], cwd=folder, capture_output=True, text=True,
                          timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"vendor run failed: {done.stdout[-2000:]}{done.stderr[-2000:]}")
    data = np.load(folder / "vendor_outputs.npz")
    return [[data[f"{k}_{j}"] for j in range(outputs) if f"{k}_{j}" in data] for k in range(len(evaluation))]
