"""Build one ONNX model with Rockchip's rknn-toolkit2 and run its simulator on held-out pictures.

Runs under the vendor's Python only, as a subprocess from a folder outside the project
(``cd CACHE && $OPENRKNN_RKNN_TOOLKIT2 -I arch_sweep_vendor.py JOB.json``), so the project's
own ``rknn`` package cannot shadow the vendor's. The job file names the model, the calibration
list, the held-out pictures (a uint8 NHWC ``.npy``), mean/std, the dtype and the result path;
optional ``inputs`` / ``input_size_list`` fix a dynamic input's shape, ``disable_rules``
switches off fusion rules that crash (the vendor's own advice); the result is an ``.npz`` of the outputs per picture (``out{k}_{i}``) or a JSON error.
"""
from __future__ import annotations

import json
import sys
import time

import numpy as np


def main(job_path: str) -> int:
    job = json.loads(open(job_path).read())
    from rknn.api import RKNN
    rknn = RKNN(verbose=False)
    started = time.time()
    extra = {"disable_rules": job["disable_rules"]} if job.get("disable_rules") else {}
    rknn.config(mean_values=[job["mean"]], std_values=[job["std"]], target_platform=job["platform"], **extra)
    steps = [("load_onnx", lambda: rknn.load_onnx(model=job["onnx"], inputs=job.get("inputs"),
                                                  input_size_list=job.get("input_size_list"))),
             ("build", lambda: rknn.build(do_quantization=job["quantize"], dataset=job["dataset"])),
             ("init_runtime", lambda: rknn.init_runtime())]
    for name, step in steps:
        if step() != 0:
            open(job["result"] + ".error.json", "w").write(json.dumps({"error": f"{name} failed"}))
            return 1
    built = time.time() - started
    images = np.load(job["images"])
    arrays = {}
    for i, image in enumerate(images):
        outputs = rknn.inference(inputs=[image[None]])
        if outputs is None:
            open(job["result"] + ".error.json", "w").write(json.dumps({"error": "inference failed"}))
            return 1
        for k, out in enumerate(outputs):
            arrays[f"out{k}_{i}"] = np.asarray(out, np.float32)
    arrays["build_seconds"] = np.array(built)
    np.savez(job["result"], **arrays)
    rknn.release()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
